"""Transactional messages (Java ``TransactionalMessageUtil``, ``MessageConst``,
``TransactionalMessageServiceImpl``): the half and op topics, the properties a half message
carries, and the op message body.

* a half message is stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` (queue 0 by default) with its real
  topic and queue in properties; a check that gets no answer puts it back as a new copy at the
  end of the half queue, ``TRANSACTION_CHECK_TIMES`` counting the checks;
* the producer's end (commit or rollback) is an op message in ``RMQ_SYS_TRANS_OP_HALF_TOPIC``
  (same queue id as the half queue), tag ``d``, whose body lists half-queue offsets, each
  followed by a comma (``"9,5,3,"``); a commit also writes the message into its real topic with
  sysFlag COMMIT and preparedTransactionOffset = the half copy's CommitLog offset;
* the check's progress is consumerOffset.json's group ``CID_RMQ_SYS_TRANS`` on both topics.

:func:`decode_op_body` reads an op body as the broker's check does (``String.split(",")``, then
``Long.parseLong`` per item, -1 for an item that is no number).
"""
from __future__ import annotations

from .codecs import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC  # noqa: F401  (re-exported)
from .epoch import JAVA_INT, JAVA_LONG, java_number, java_split

#: the group whose offsets in consumerOffset.json are the check's progress (MixAll.CID_SYS_RMQ_TRANS)
CHECK_GROUP = "CID_RMQ_SYS_TRANS"
#: the topic a half message checked too many times is moved to (DefaultTransactionalMessageCheckListener)
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
#: an op message's tag when it ends half messages (TransactionalMessageUtil.REMOVE_TAG)
REMOVE_TAG = "d"
OFFSET_SEPARATOR = ","
#: what the broker reads an item that is no number as (getLong's fallback)
BAD_ITEM = -1
#: op messages one pull of the check reads (OP_MSG_PULL_NUMS)
OP_PULL_BATCH = 32
#: broker defaults (BrokerConfig): transactionCheckMax, transactionTimeOut (ms)
DEFAULT_CHECK_MAX = 15
DEFAULT_TRANSACTION_TIMEOUT_MS = 6_000
#: MessageStoreConfig.fileReservedTime (hours): the check skips older half messages (needSkip)
DEFAULT_FILE_RESERVED_HOURS = 72

# properties (MessageConst)
PROP_REAL_TOPIC = "REAL_TOPIC"
PROP_REAL_QID = "REAL_QID"
PROP_PRODUCER_GROUP = "PGROUP"
PROP_TRANSACTION_PREPARED = "TRAN_MSG"
PROP_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROP_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROP_CHECK_IMMUNITY_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROP_UNIQ_KEY = "UNIQ_KEY"
PROP_TRANSACTION_ID = "__transactionId__"

def java_long(text: str) -> int | None:
    """``Long.parseLong(text)``, or None where Java throws."""
    return java_number(text, JAVA_LONG)


def java_int(text: str | None) -> int | None:
    """``Integer.parseInt(text)``, or None where Java throws (or for no text)."""
    return java_number(text, JAVA_INT)


def split_items(text: str) -> list[str]:
    """Java's ``text.split(",")``: trailing empty strings dropped, inner ones kept."""
    return java_split(text, OFFSET_SEPARATOR)


def decode_op_body(body: bytes | None) -> tuple[list[int], list[str]]:
    """(half-queue offsets, items that are no number) of an op message body, as the check reads
    it: UTF-8 (bad bytes replaced), split on commas; an item Long.parseLong refuses is read as
    :data:`BAD_ITEM` (below every half offset, so ignored) and listed in the second list."""
    if not body:
        return [], []
    text = bytes(body).decode("utf-8", errors="replace")
    offsets, bad = [], []
    for item in split_items(text):
        value = java_long(item)
        if value is None:
            bad.append(item)
        else:
            offsets.append(value)
    return offsets, bad


def encode_op_body(offsets: list[int]) -> bytes:
    """The body the broker writes for ``offsets`` (each followed by a comma)."""
    return "".join(f"{o}{OFFSET_SEPARATOR}" for o in offsets).encode("ascii")
