"""Prose of the mqtool-spark-* man pages (see man/pages.py for the format)."""

_INPUTS = """\
Each PATH is one broker's store root (the directory holding commitlog/) or a CommitLog
directory, as a local path, a file:// URL or any URL the Spark session's Hadoop configuration
lists (hdfs://, s3a://, ...). The broker is named after the path: the store root's name, or
its parent's when the root is called store (/data/broker-a/store is broker-a); --broker-name,
given once per PATH, overrides it. Executors read local and file:// paths directly (a shared
mount works on a cluster); other schemes are read by byte range with fsspec or pyarrow, which
must then be installed on the driver and every executor."""

_SPLITS = """\
The work is split into byte ranges of CommitLog files (--split-size, 128m by default, so a
1 GiB file is read by 8 tasks). A task resynchronises to the first record that starts in its
range (magic code, self-recorded PHYSICALOFFSET equal to its position, consistent lengths, body
CRC) and reads every record up to where the next range's task starts, so each record is read
exactly once, by mqtool's one scanner, with the same resynchronisation over damage as verify.
A record with a bad CRC or a wrong PHYSICALOFFSET right after a range boundary still belongs to
the range before it. Records a file's blank record hides (stale data past it) are dropped,
as the sequential scan never reaches them."""

_SESSION = """\
The default master is local[*]: Spark runs inside mqtool's process, nothing to set up beyond
pip and Java 17. --master spark://HOST:PORT, yarn or k8s://... runs on a cluster: mqtool ships
its own code to the executors as a zip (addPyFile); the executors' Python needs mqtool's
dependencies (construct, numpy). --conf passes any Spark setting. Under spark-submit, hand it
the file printed by python -m mqtool.spark.submit --where and leave out --master."""

PAGES = {
    ("spark", "audit"): {
        "summary": "audit the CommitLogs of many brokers on Apache Spark",
        "description": """\
Scans the CommitLogs of any number of brokers with Spark and reports verify's findings.

Of a store root on a file system every executor reads (a local path, file://, a shared
mount), the findings are exactly mqtool verify's, every code, file, offset, severity, message
and count: the ConsumeQueue, BatchConsumeQueue and IndexFile cross-checks against the records
and the prediction of the broker's recovery included. verify itself runs: its per-file checks
as one Spark task per CommitLog file, its merge on the driver; each CommitLog file of such a
store is read twice (by the scan for the tables, and by verify's task).

Of a bare CommitLog directory or a remote store (s3://, ...), the audit checks the CommitLog
alone, with verify's codes, files, offsets and wording: CL_CRC_MISMATCH,
CL_PROP_CRC_MISMATCH, CL_OFFSET_MISMATCH, CL_BAD_MAGIC, CL_LENGTH_MISMATCH, CL_TRUNCATED
(damaged regions, with the bytes until the next plausible record), CL_FILE_SIZE, CL_GAP,
CL_STRAY_FILE, the DLedger entry-header codes DL_ENTRY_*, and CQ_QUEUE_GAP for queue offsets
recorded in the CommitLog that skip or repeat; severities are the codes' defaults. The
summary's checks say which codes hold for which inputs.

""" + _INPUTS + "\n\n" + _SPLITS + "\n\n" + _SESSION,
        "arguments": {"paths": "Store roots or CommitLog directories, one broker each."},
        "output": """\
With --out DIR, Parquet tables and a JSON summary:

DIR/messages, partitioned by broker and store_date (UTC): one row per message with broker,
file, file_offset, commitlog_offset, total_size, magic_version, topic, queue_id, queue_offset,
physical_offset, sys_flag, transaction, born_timestamp, store_timestamp, reconsume_times,
tags, keys, uniq_key, body_crc, body_crc_ok, prop_crc_ok, body_length, inner_num,
inner_position, outer_commitlog_offset and system (dump's decoded system object as JSON text;
hosts, properties and bodies are spark export's).

DIR/findings, partitioned by broker: broker, code, severity, file, offset, message,
commitlog_offset, topic, queue_id, queue_offset, count, details (JSON).

DIR/files: one row per CommitLog file (tasks, messages, where its data ends and how, damaged
regions and runs of zeros with records after them). DIR/uniq_key_duplicates: every UNIQ_KEY
stored more than once, with its brokers and topics.

DIR/summary.json, also printed by --json: per broker, topic and queue the record and message
counts, bytes, store time range, queue-offset range, gaps (with the number of missing
offsets) and duplicates, CRC failures; per broker the holes (damaged regions, runs of zeros,
missing bytes between files) and findings by code; UNIQ_KEYs stored more than once and in
more than one broker. Without --json, tables of brokers and topics (--queues adds queues), the
UNIQ_KEY counts and the first findings. Without --out nothing is written.""",
        "exit": """\
0 no error found (warnings may be present).

1 errors found.

2 bad usage, input that cannot be read as a store, or pyspark missing.""",
        "examples": [
            ("Audit three brokers' archived stores on this machine:",
             "mqtool spark audit --out /data/audit /archive/broker-a/store "
             "/archive/broker-b/store /archive/broker-c/store"),
            ("On a YARN cluster, stores and tables in HDFS:",
             "mqtool spark audit --master yarn --conf spark.executor.instances=20 "
             "--out hdfs:///audits/2026-11 hdfs:///archive/broker-a/store"),
            ("Smaller tasks, and one row per queue:",
             "mqtool spark audit --split-size 32m --queues STORE"),
        ],
        "see_also": ["mqtool-verify", "mqtool-spark-export"],
    },
    ("spark", "export"): {
        "summary": "export every message of many brokers, bodies included, with Spark",
        "description": """\
Writes every message of the given brokers' CommitLogs as a Parquet (or JSON lines) dataset
partitioned by broker and store_date (UTC). The columns are those of a commitlog/message
record of dump --json (file, file_offset, commitlog_offset, total_size, magic_code, ...,
topic, properties as a map, tags, keys, uniq_key, msg_id, prop_crc_ok) plus broker, with the
body as bytes: decompressed as dump decompresses it unless --no-decompress, which keeps the
stored bytes. JSON output writes the body in base64. The records are those of
dump --resync: the scan continues past damage at the next plausible record.

""" + _INPUTS + "\n\n" + _SPLITS + "\n\n" + _SESSION,
        "arguments": {"paths": "Store roots or CommitLog directories, one broker each."},
        "output": """\
The dataset under --out; on stdout a table of brokers with the records scanned and exported
(--json: the same as one JSON document).""",
        "exit": """\
0 exported.

2 bad usage, input that cannot be read as a store, or pyspark missing.""",
        "examples": [
            ("All messages of two brokers as Parquet:",
             "mqtool spark export --out /data/export /archive/broker-a/store "
             "/archive/broker-b/store"),
            ("One topic as JSON lines, bodies as stored:",
             "mqtool spark export --format json --topic TopicTest --no-decompress --out "
             "/tmp/topic STORE"),
        ],
        "see_also": ["mqtool-dump", "mqtool-spark-audit"],
    },
}
