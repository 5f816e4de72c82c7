"""Column lists of the Spark outputs, as plain data; :func:`struct_type` makes the pyspark
schema on the driver (the row builders in :mod:`mqtool.spark.splits` follow these orders)."""
from __future__ import annotations

#: the ``messages`` table: one row per CommitLog message (``store_date`` is added by Spark);
#: hosts, properties and bodies are ``spark export``'s
MESSAGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("broker", "string"),
    ("file", "string"),
    ("file_offset", "long"),
    ("commitlog_offset", "long"),
    ("total_size", "int"),
    ("magic_version", "string"),
    ("topic", "string"),
    ("queue_id", "int"),
    ("queue_offset", "long"),
    ("physical_offset", "long"),
    ("sys_flag", "int"),
    ("transaction", "string"),
    ("born_timestamp", "long"),
    ("store_timestamp", "long"),
    ("reconsume_times", "int"),
    ("tags", "string"),
    ("keys", "string"),
    ("uniq_key", "string"),
    ("body_crc", "int"),
    ("body_crc_ok", "boolean"),
    ("prop_crc_ok", "boolean"),
    ("body_length", "int"),
    ("inner_num", "int"),        # INNER_NUM of an inner-batch record (its queue-offset step)
    # an inner message of a 5.x inner batch (unwrapped): its index in the batch and the batch
    # record's CommitLog offset; null for stored records
    ("inner_position", "int"),
    ("outer_commitlog_offset", "long"),
    # dump's ``system`` object (trace, pop, delayed/timer, DLQ/retry origin, priority,
    # transaction records: mqtool.inspect.system_object) as JSON text; null for others
    ("system", "string"),
)

#: ``spark export``: ``dump``'s message record (``mqtool.inspect.message_to_dict``), body as
#: bytes (decompressed like dump's unless --no-decompress), properties as a map
EXPORT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("broker", "string"),
    ("file", "string"),
    ("file_offset", "long"),
    ("commitlog_offset", "long"),
    ("total_size", "int"),
    ("magic_code", "long"),
    ("magic_version", "string"),
    ("body_crc", "long"),
    ("body_crc_ok", "boolean"),
    ("queue_id", "int"),
    ("flag", "int"),
    ("queue_offset", "long"),
    ("physical_offset", "long"),
    ("offset_ok", "boolean"),
    ("sys_flag", "int"),
    ("transaction", "string"),
    ("born_timestamp", "long"),
    ("born_host", "string"),
    ("store_timestamp", "long"),
    ("store_host", "string"),
    ("reconsume_times", "int"),
    ("prepared_transaction_offset", "long"),
    ("body_length", "int"),
    ("topic", "string"),
    ("properties", "map<string,string>"),
    ("tags", "string"),
    ("keys", "string"),
    ("uniq_key", "string"),
    ("msg_id", "string"),
    ("prop_crc_ok", "boolean"),
    ("body", "binary"),
    ("body_stored_length", "int"),
    ("body_compression", "string"),
    ("body_decompressed", "boolean"),
    ("body_decompress_error", "string"),
    ("body_truncated", "boolean"),
    ("inner_position", "int"),             # as in MESSAGE_COLUMNS
    ("outer_commitlog_offset", "long"),
    ("system", "string"),                  # as in MESSAGE_COLUMNS
)

#: the ``findings`` table: ``verify``'s Finding plus the broker; details as JSON text
FINDING_COLUMNS: tuple[tuple[str, str], ...] = (
    ("broker", "string"),
    ("code", "string"),
    ("severity", "string"),
    ("file", "string"),
    ("offset", "long"),
    ("message", "string"),
    ("commitlog_offset", "long"),
    ("topic", "string"),
    ("queue_id", "int"),
    ("queue_offset", "long"),
    ("count", "long"),
    ("details", "string"),
)

#: the ``files`` table: one row per CommitLog file, from the tasks' reports
FILE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("broker", "string"),
    ("file", "string"),
    ("url", "string"),
    ("base_offset", "long"),
    ("length", "long"),
    ("splits", "int"),
    ("messages", "long"),
    ("message_bytes", "long"),
    ("data_end", "long"),          # where the data ends: past the last record, at a blank
    ("end_kind", "string"),        # blank, unwritten, corrupt, file_end, empty
    ("corrupt_regions", "long"),
    ("corrupt_bytes", "long"),
    ("zero_holes", "long"),        # runs of zeros with records after them
    ("zero_hole_bytes", "long"),
)


def names(columns) -> tuple[str, ...]:
    return tuple(name for name, _ in columns)


def struct_type(columns):
    """The pyspark StructType of a column list (imports pyspark)."""
    from pyspark.sql import types as T

    simple = {"string": T.StringType(), "long": T.LongType(), "int": T.IntegerType(),
              "boolean": T.BooleanType(), "binary": T.BinaryType(),
              "map<string,string>": T.MapType(T.StringType(), T.StringType())}
    return T.StructType([T.StructField(name, simple[kind], True) for name, kind in columns])
