"""The fixture forge: deterministic stores laid out as a broker lays them out, and fault injection.

:func:`make_store` generates a message mix like the one the reference stores were written with
(topics x queues, tags, keys with hot keys, UNIQ_KEY, user properties, delay levels,
transactions, zlib bodies, IPv6 hosts, V2 records, property CRC) and hands every message to
:mod:`mqtool.writer`, which appends it to the CommitLog and dispatches it to ConsumeQueues and
IndexFiles as the 4.9.8 broker does. ``crash=True`` leaves what a JVM halt in ASYNC_FLUSH
leaves: an ``abort`` file, a lagging checkpoint, dispatch stopped short of the CommitLog end and
the preallocated next CommitLog file.

:func:`damage_store` injects one fault (torn tail, bit flip, zeroed range, truncated or deleted
file, stray files, stale checkpoint) and describes exactly what it changed.

Everything is a function of the seed: the same arguments give byte-identical stores and damage.

Read the modules in this order:

* :mod:`.mix` - the options (:class:`ForgeOptions`) and the message mix
  (:class:`MessageGenerator`): what each message is, drawn from the seed;
* :mod:`.make` - :func:`make_store`: the mix through :mod:`mqtool.writer`, clean or crashed,
  plain or in DLedger mode (``--dledger``; ``--dledger-after`` for a store upgraded to it);
* :mod:`.configs` - the config/ files (fastjson layout, .bak copies) and consumer groups;
* :mod:`.damage` - :func:`damage_store` and its fault kinds.
"""
from __future__ import annotations

from ..config import JavaBean, fastjson_pretty
from ..vocabulary import DEFAULT_TOPICS
from .configs import consumer_group_offsets, write_configs
from .damage import CONFIG_DAMAGE_KINDS, DAMAGE_KINDS, damage_store
from .make import Manifest, make_store
from .mix import (KINDS, ForgeOptions, MessageGenerator, check_consumer_groups,
                  long_retry_topic_name,
                  long_topic_name, month_start_ms, parse_body_size, parse_consumer_group,
                  parse_forge_version, parse_size)

__all__ = ["ForgeOptions", "MessageGenerator", "Manifest", "make_store",
           "damage_store", "parse_size", "parse_body_size", "parse_forge_version",
           "fastjson_pretty", "JavaBean",
           "DAMAGE_KINDS", "CONFIG_DAMAGE_KINDS", "DEFAULT_TOPICS", "KINDS", "long_topic_name",
           "long_retry_topic_name", "month_start_ms", "parse_consumer_group",
           "check_consumer_groups", "consumer_group_offsets", "write_configs"]
