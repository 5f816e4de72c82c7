"""In which order a store's producers put a message's properties into its HashMap.

The stored property bytes are ``MessageDecoder.messageProperties2String`` of a
java.util.HashMap: names sharing a bucket come out in the order they were put in, so the same
properties serialise differently depending on the producer path (client, broker, or a tool
writing to the store directly). A :class:`PropertyInsertion` names that order; the writer
serialises with one, and :func:`property_insertion_of` finds the one a store's records follow.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from .formats import codecs

# What the broker adds after the producer's properties. Names a model does not list are user
# properties, put between its first and last groups.
BROKER_LAST = ("DELAY", "TRAN_MSG", "PGROUP", "__transactionId__", "REAL_TOPIC", "REAL_QID",
               "CLUSTER")


@dataclass(frozen=True)
class PropertyInsertion:
    """The order a store's producer path put the properties into the message's HashMap."""

    name: str
    first: tuple[str, ...]
    last: tuple[str, ...]


# Message constructor (TAGS, KEYS, WAIT), the client id set before the user properties, and
# the broker's additions afterwards: every 4.9.8 store and most 5.3.3 ones.
PRODUCER_UNIQ_KEY_FIRST = PropertyInsertion("uniq-key-first", ("TAGS", "KEYS", "WAIT", "UNIQ_KEY"),
                                            BROKER_LAST)
# UNIQ_KEY put after everything else, the broker's CLUSTER included (v5-compress-clean).
UNIQ_KEY_LAST = PropertyInsertion("uniq-key-last", ("TAGS", "KEYS", "WAIT"),
                                  BROKER_LAST + ("UNIQ_KEY",))
PROPERTY_INSERTIONS = (PRODUCER_UNIQ_KEY_FIRST, UNIQ_KEY_LAST)


@functools.lru_cache(maxsize=4096)
def _property_key_order(keys: tuple[str, ...],
                        insertion: PropertyInsertion = PRODUCER_UNIQ_KEY_FIRST) -> tuple[str, ...]:
    first = [k for k in insertion.first if k in keys]
    last = [k for k in insertion.last if k in keys]
    middle = [k for k in keys if k not in first and k not in last and k != codecs.PROP_CRC_KEY]
    return tuple(codecs.java_hashmap_order(first + middle + last))


def broker_property_order(properties: dict[str, str],
                          insertion: PropertyInsertion = PRODUCER_UNIQ_KEY_FIRST) -> dict[str, str]:
    """Properties reordered as the broker's HashMap serialises them (``__CRC32#`` excluded)."""
    return {k: properties[k] for k in _property_key_order(tuple(properties), insertion)}


def property_insertion_of(stored: list[bytes]) -> PropertyInsertion | None:
    """The producer model under which every one of these stored property byte strings is the
    HashMap order of its names (classic-batch records excluded: they hold two maps), or None."""
    names = [tuple(seg.split(b"\x01", 1)[0].decode("utf-8", "replace")
                   for seg in raw.split(b"\x02") if seg) for raw in stored]
    for insertion in PROPERTY_INSERTIONS:
        if all(_property_key_order(n, insertion) == tuple(k for k in n if k != codecs.PROP_CRC_KEY)
               for n in names):
            return insertion
    return None
