"""Declarations of Apache RocketMQ's on-disk store formats (shipped as ``mqtool.formats``).

Pure declarations and codecs: nothing in this package opens a file or prints.
Modules mirror the Java classes they describe:

* :mod:`.commitlog` - CommitLog message record (V1/V2 magic, IPv4/IPv6 hosts), blank record,
  MessageSysFlag bits, the properties codec.
* :mod:`.consumequeue` - ConsumeQueue (20-byte) and BatchConsumeQueue (46-byte) units.
* :mod:`.innerbatch` - the body of a 5.x inner-batch record: the client's encoding of its
  inner messages, with a checked parse/build codec.
* :mod:`.indexfile` - IndexFile header, hash slot and entry, with the geometry as parameters.
* :mod:`.checkpoint` - StoreCheckpoint (4 KiB).
* :mod:`.dledger` - DLedger-mode CommitLog: entry header, end-of-file blank, index unit, the
  checkpoint/currterm text files.
* :mod:`.codecs` - CRC, Java String.hashCode, index key hash, tagsCode, message ids, property CRC.
"""
