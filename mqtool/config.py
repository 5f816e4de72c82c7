"""The broker's config files (``config/*.json``, spec §6.3) read as the broker reads them.

The broker writes them with fastjson: ``Map<Integer, ...>`` keys come out unquoted
(``{"offsetTable":{"T@G":{0:12,1:7}}}``), pretty-printed with tabs when persisted. It loads each
with ``ConfigManager.load`` (identical in 4.9 and 5.x):

* the main file is read whole; when it is missing or empty (zero bytes) ``loadBak`` runs;
* otherwise it is decoded; if decoding throws, ``loadBak`` runs. Blank text (whitespace only),
  ``null`` or ``""`` decode to a null bean *without* throwing: the manager keeps its empty
  table and the ``.bak`` is never read;
* ``loadBak``: a missing or empty ``.bak`` leaves the table empty and the load *succeeds*; a
  ``.bak`` that decodes is used; one that throws makes the load fail, and the broker refuses to
  start (BrokerController.initialize returns false).

The store code after 5.3.3 (family 5.3.4+) takes the same file, but first *deletes* a main file
that is empty or fails to decode (the bytes are gone after its start); and its persist moves the
old file to ``.bak`` and rewrites the main file in place (no ``.tmp``).

:func:`read_config` follows exactly that and says which file it used and why. The parser here
is our own (no regular-expression quoting), so a hostile file (deep nesting, huge numbers, wrong
types, binary, truncation) is a :class:`FastjsonError` with a position, never a traceback, and
the typed readers report every value they cannot take rather than guess.

5.x brokers configured to keep metadata in RocksDB use ``config/rdb/`` (v2 ConfigStorage) or
``config/consumerOffsets/``, ``config/topics/``, ``config/subscriptionGroups/`` (v1 RocksDB
managers); :func:`rocksdb_metadata` recognises them. mqtool does not read RocksDB.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from json.decoder import scanstring
from pathlib import Path

from .vocabulary import VERSION_534

#: deeper than any config the broker writes (5 levels); far below Python's recursion limit
MAX_DEPTH = 64
#: the broker reads the whole file into one String; mqtool refuses absurd sizes instead
MAX_CONFIG_BYTES = 256 * 1024 * 1024
#: longer numbers are no offsets, and Python refuses to convert very long ones
MAX_NUMBER_CHARS = 100
JAVA_LONG_MIN, JAVA_LONG_MAX = -(1 << 63), (1 << 63) - 1
JAVA_INT_MIN, JAVA_INT_MAX = -(1 << 31), (1 << 31) - 1

CONSUMER_OFFSET = "consumerOffset.json"
TOPICS = "topics.json"
SUBSCRIPTION_GROUP = "subscriptionGroup.json"
DELAY_OFFSET = "delayOffset.json"
#: the files consumer forensics reads, in the order the broker loads them
CONSUMER_CONFIGS = (TOPICS, CONSUMER_OFFSET, SUBSCRIPTION_GROUP, DELAY_OFFSET)
#: every config file whose failed load stops the broker's start (BrokerController's
#: initialize / initializeMetadata and the store's load, 4.9.8 and 5.3.3; the 5.x-only ones
#: exist only in 5.x stores)
STARTUP_CONFIGS = (TOPICS, "topicQueueMapping.json", CONSUMER_OFFSET, SUBSCRIPTION_GROUP,
                   "consumerFilter.json", "consumerOrderInfo.json", DELAY_OFFSET)
#: every JSON table a 4.x/5.x broker persists under config/ (what ``info`` summarises)
STORE_CONFIGS = (TOPICS, CONSUMER_OFFSET, SUBSCRIPTION_GROUP, DELAY_OFFSET, "consumerFilter.json",
                 "topicQueueMapping.json", "consumerOrderInfo.json", "lmqConsumerOffset.json",
                 "messageRequestMode.json", "timermetrics")
#: RocksDB metadata folders of 5.x under config/, and what each holds
ROCKSDB_DIRS = {
    "rdb": "all metadata (5.x ConfigStorage, v2)",
    "consumerOffsets": "consumer offsets (RocksDBConsumerOffsetManager)",
    "topics": "topic configs (RocksDBTopicConfigManager)",
    "subscriptionGroups": "subscription groups (RocksDBSubscriptionGroupManager)",
}
TOPIC_GROUP_SEPARATOR = "@"


class FastjsonError(ValueError):
    """Text fastjson would not decode (or that mqtool will not decode: too deep, too big)."""

    def __init__(self, message: str, position: int | None = None):
        self.position = position
        super().__init__(message if position is None else f"{message} at character {position}")


# --- the parser -------------------------------------------------------------------------------

_WHITESPACE = " \t\n\r\f\b"
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")
_BARE_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*|-?\d+")


class _Parser:
    """Recursive descent over fastjson's text: JSON plus what fastjson's default parser features
    accept: unquoted keys (the integer map keys the broker writes, and identifiers),
    single-quoted strings and extra commas. Everything else is an error with its position."""

    def __init__(self, text: str, locate_depth: int = 0):
        self.text = text
        self.pos = 0
        # where each object member's value starts, by key path, down to locate_depth keys
        self.locate_depth = locate_depth
        self.where: dict[tuple, int] = {}
        self._path: list = []

    def skip(self) -> None:
        text, pos = self.text, self.pos
        while pos < len(text) and text[pos] in _WHITESPACE:
            pos += 1
        self.pos = pos

    def fail(self, message: str) -> FastjsonError:
        return FastjsonError(message, self.pos)

    def document(self):
        self.skip()
        if self.pos >= len(self.text):
            raise self.fail("no JSON value (whitespace only)")
        value = self.value(0)
        self.skip()
        if self.pos < len(self.text):
            char = self.text[self.pos]
            shown = repr(char) if char.isprintable() else f"U+{ord(char):04X}"
            raise self.fail(f"text continues after the JSON value ({shown})")
        return value

    def value(self, depth: int):
        if depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH} levels")
        self.skip()
        if self.pos >= len(self.text):
            raise self.fail("text ends where a value should start (truncated)")
        char = self.text[self.pos]
        if char == "{":
            return self.obj(depth)
        if char == "[":
            return self.array(depth)
        if char in "\"'":
            return self.string()
        for word, result in (("true", True), ("false", False), ("null", None)):
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return result
        match = _NUMBER.match(self.text, self.pos)
        if match:
            if match.end() - match.start() > MAX_NUMBER_CHARS:
                raise self.fail(f"a number of {match.end() - match.start():,} characters")
            self.pos = match.end()
            if match.group(1) or match.group(2):
                number = float(match.group(0))
                if number != number or number in (float("inf"), float("-inf")):
                    raise self.fail("number out of range")
                return number
            return int(match.group(0))
        shown = repr(char) if char.isprintable() else f"U+{ord(char):04X}"
        raise self.fail(f"unexpected {shown}")

    def string(self) -> str:
        quote = self.text[self.pos]
        if quote == '"':
            try:
                value, self.pos = scanstring(self.text, self.pos + 1, False)
            except ValueError:
                raise self.fail("unterminated or malformed string") from None
            return value
        end = self.text.find("'", self.pos + 1)
        if end < 0:
            raise self.fail("unterminated string")
        value = self.text[self.pos + 1:end]
        self.pos = end + 1
        return value

    def key(self):
        self.skip()
        if self.pos >= len(self.text):
            raise self.fail("text ends inside an object (truncated)")
        if self.text[self.pos] in "\"'":
            return self.string()
        match = _BARE_KEY.match(self.text, self.pos)
        if not match:
            char = self.text[self.pos]
            shown = repr(char) if char.isprintable() else f"U+{ord(char):04X}"
            raise self.fail(f"expected a key, found {shown}")
        word = match.group(0)
        if word.lstrip("-").isdigit():
            if len(word) > MAX_NUMBER_CHARS:
                # as for a value: no map key is that long, and Python refuses to convert it
                raise self.fail(f"a numeric key of {len(word):,} characters")
            self.pos = match.end()
            return int(word)
        self.pos = match.end()
        return word

    def expect(self, char: str, what: str) -> None:
        self.skip()
        if self.pos >= len(self.text):
            raise self.fail(f"text ends inside {what} (truncated)")
        if self.text[self.pos] != char:
            found = self.text[self.pos]
            shown = repr(found) if found.isprintable() else f"U+{ord(found):04X}"
            raise self.fail(f"expected {char!r} in {what}, found {shown}")
        self.pos += 1

    def _next_is(self, char: str) -> bool:
        self.skip()
        if self.pos < len(self.text) and self.text[self.pos] == char:
            self.pos += 1
            return True
        return False

    def _commas(self) -> bool:
        """Skip a run of commas (fastjson's default AllowArbitraryCommas accepts extra ones)."""
        found = False
        while self._next_is(","):
            found = True
        return found

    def obj(self, depth: int) -> dict:
        self.pos += 1
        result: dict = {}
        self._commas()
        if self._next_is("}"):
            return result
        while True:
            key = self.key()
            self.expect(":", "an object")
            self._path.append(key)
            if len(self._path) <= self.locate_depth:
                self.skip()
                self.where[tuple(self._path)] = self.pos
            result[key] = self.value(depth + 1)   # fastjson's maps keep the last duplicate
            self._path.pop()
            if self._commas():
                if self._next_is("}"):
                    return result
                continue
            self.expect("}", "an object")
            return result

    def array(self, depth: int) -> list:
        self.pos += 1
        result: list = []
        self._commas()
        if self._next_is("]"):
            return result
        while True:
            result.append(self.value(depth + 1))
            if self._commas():
                if self._next_is("]"):
                    return result
                continue
            self.expect("]", "an array")
            return result


def parse_fastjson(text: str):
    """The value in fastjson text. Object keys written unquoted as integers come back as ``int``
    (fastjson reads ``0`` and ``"0"`` alike into an Integer-keyed map; :func:`int_key` accepts
    both). Raises :class:`FastjsonError` (a ValueError) with a position."""
    return _Parser(text).document()


def parse_fastjson_located(text: str, depth: int = 3) -> tuple[object, dict[tuple, int]]:
    """:func:`parse_fastjson` plus where each object member's value starts (character index),
    by key path, for paths of up to ``depth`` keys."""
    parser = _Parser(text, depth)
    return parser.document(), parser.where


def byte_position(text: str, index: int) -> int:
    """The file offset of character ``index`` of the UTF-8 text."""
    return len(text[:index].encode("utf-8", errors="surrogatepass"))


def read_fastjson_file(path: Path):
    """Parse one file as ``MixAll.file2String`` reads it (the whole file, as UTF-8)."""
    data = read_config_bytes(Path(path))
    if not data:
        raise FastjsonError("empty file")
    return parse_fastjson(data.decode("utf-8", errors="replace"))


def text_keys(value):
    """A decoded document with every object key as text (``0`` -> ``"0"``), as JSON writes it:
    :func:`parse_fastjson` gives Integer-keyed maps int keys; info and dump show the JSON view."""
    if isinstance(value, dict):
        return {str(k): text_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [text_keys(v) for v in value]
    return value


def read_config_bytes(path: Path) -> bytes:
    """The whole file, refusing one larger than any config file the broker writes."""
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise FastjsonError(f"{size:,} bytes: larger than mqtool reads ({MAX_CONFIG_BYTES:,})")
    return path.read_bytes()


# --- the writer's layout ----------------------------------------------------------------------

class JavaBean(dict):
    """A value fastjson serialises as a bean: fields sorted by name, one per line."""


def fastjson_pretty(value, depth: int = 0) -> str:
    """``JSON.toJSONString(obj, true)`` as fastjson 1.2.x writes it.

    Beans and String-keyed maps put each entry on its own line (tab-indented); maps with Integer
    keys write them unquoted on one line and only close on a new line; an empty map is ``{}``.
    Null fields and map values are left out (fastjson writes them only with WriteMapNullValue)."""
    if isinstance(value, JavaBean):
        inner = "\t" * (depth + 1)
        fields = [f"\n{inner}{json.dumps(k, ensure_ascii=False)}:{fastjson_pretty(v, depth + 1)}"
                  for k, v in sorted(value.items()) if v is not None]
        return "{" + ",".join(fields) + "\n" + "\t" * depth + "}"
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if v is not None}
        if not value:
            return "{}"
        inner = "\t" * (depth + 1)
        entries = []
        for k, v in value.items():
            if isinstance(k, int):
                entries.append(f"{k}:{fastjson_pretty(v, depth + 1)}")
            else:
                entries.append(f"\n{inner}{json.dumps(k, ensure_ascii=False)}:"
                               f"{fastjson_pretty(v, depth + 1)}")
        return "{" + ",".join(entries) + "\n" + "\t" * depth + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return json.dumps(str(value), ensure_ascii=False)


# --- ConfigManager.load -----------------------------------------------------------------------

@dataclass
class FileState:
    """What one of the two files (main or .bak) holds, for the broker's purposes."""

    name: str
    state: str              # missing | empty | ok | null | unparsable | unreadable
    size: int | None = None
    error: str | None = None
    position: int | None = None   # unparsable: the byte offset where decoding failed

    def sentence(self) -> str:
        if self.state == "missing":
            return f"{self.name} is missing"
        if self.state == "empty":
            return f"{self.name} is empty (0 bytes)"
        if self.state == "null":
            return f"{self.name} decodes to nothing ({self.error})"
        if self.state == "ok":
            return f"{self.name} decodes ({self.size:,} bytes)"
        return f"{self.name} is {self.state}: {self.error}"


@dataclass
class ConfigLoad:
    """The outcome of ConfigManager.load for one config file."""

    name: str
    path: Path
    main: FileState
    bak: FileState | None          # None: the broker never looked at it
    used: str | None               # the file whose content the broker takes, None: nothing
    outcome: str                   # main | bak | empty | absent | refuses
    reason: str                    # one sentence: what the broker does and why
    document: object = None
    text: str = field(default="", repr=False)            # the used file's text
    locations: dict = field(default_factory=dict, repr=False)
    tmp: FileState | None = None    # a .tmp left by an interrupted 4.9/5.0 persist
    deletes_main: bool = False      # 5.3.4+: the load deletes the (empty or torn) main file

    def offset_of(self, *path) -> int:
        """Byte offset of the value at a key path in the used file (0 when unknown); an integer
        key is found written either way (``0`` or ``"0"``)."""
        for candidate in (path, tuple(str(k) for k in path)):
            if candidate in self.locations:
                return byte_position(self.text, self.locations[candidate])
        return 0

    @property
    def broker_refuses(self) -> bool:
        return self.outcome == "refuses"

    def to_dict(self) -> dict:
        return {"file": self.name, "used": self.used, "outcome": self.outcome,
                "reason": self.reason,
                "main": {k: v for k, v in vars(self.main).items() if v is not None},
                "bak": ({k: v for k, v in vars(self.bak).items() if v is not None}
                        if self.bak else None),
                "tmp": ({k: v for k, v in vars(self.tmp).items() if v is not None}
                        if self.tmp else None),
                "deletes_main": self.deletes_main}


@dataclass
class _Parsed:
    document: object = None
    text: str = ""
    locations: dict = field(default_factory=dict)


def _file_state(path: Path) -> tuple[FileState, _Parsed]:
    name = path.name
    nothing = _Parsed()
    if not path.exists():
        return FileState(name, "missing"), nothing
    if not path.is_file():
        # file2String reads it with a FileInputStream, which throws: the broker's decode fails
        return FileState(name, "unreadable", error="not a regular file"), nothing
    try:
        data = read_config_bytes(path)
    except FastjsonError as err:
        return FileState(name, "unreadable", path.stat().st_size, str(err)), nothing
    except OSError as err:
        return FileState(name, "unreadable", error=err.strerror or str(err)), nothing
    if not data:
        return FileState(name, "empty", 0), nothing
    text = data.decode("utf-8", errors="replace")
    if not text.strip(_WHITESPACE):
        # not empty for ConfigManager, so it is decoded; fastjson's bean reader answers null
        # for blank input (JavaBeanDeserializer: isBlankInput), without an exception
        return FileState(name, "null", len(data), "whitespace only"), nothing
    try:
        document, locations = parse_fastjson_located(text)
    except FastjsonError as err:
        where = byte_position(text, err.position) if err.position is not None else None
        return FileState(name, "unparsable", len(data), str(err), where), nothing
    if document is None or document == "":
        # a top-level null, or an empty string literal, also decodes to a null bean
        return FileState(name, "null", len(data), "null" if document is None
                         else "an empty string"), nothing
    if not isinstance(document, dict):
        return FileState(name, "unparsable", len(data),
                         f"the top-level value is a {_type_name(document)}, not an object",
                         0), nothing
    return FileState(name, "ok", len(data)), _Parsed(document, text, locations)


#: the broker families whose ConfigManager.load deletes an empty or undecodable main file
DELETING_FAMILIES = (VERSION_534,)
#: main-file states that make ConfigManager.load throw or see nothing (then it deletes the file)
_DELETED_STATES = ("empty", "unparsable", "unreadable")


def read_config(path: Path, family: str | None = None) -> ConfigLoad:
    """ConfigManager.load for the config file at ``path`` (its ``.bak`` beside it) by the
    broker ``family`` (a recovery-rules name; None: any before 5.3.4+). A ``.tmp`` beside them
    (4.9/5.0 persist writes it, then deletes the file and renames the tmp: a crash in between
    leaves it) is never read by the broker; the reason says so."""
    load = _load(Path(path))
    if family in DELETING_FAMILIES and load.main.state in _DELETED_STATES and \
            Path(path).is_file():
        load.deletes_main = True
        load.reason += (f"; the {family} broker deletes {load.name} on this load (its "
                        f"{load.main.size or 0:,} bytes are gone once it has started)")
    tmp = load.path.with_name(load.name + ".tmp")
    if tmp.exists():
        state, _ = _file_state(tmp)
        load.tmp = state
        load.reason += (f"; {tmp.name} is left from an interrupted persist ({state.sentence()}), "
                        "which the broker never reads: it may hold newer content")
    return load


def _load(path: Path) -> ConfigLoad:
    name = path.name
    main, parsed = _file_state(path)
    if main.state in ("ok", "null"):
        if main.state == "null":
            # decode returns null and the manager keeps its empty table; .bak is not looked at
            return ConfigLoad(name, path, main, None, name, "empty",
                              f"{main.sentence()}: the broker starts with an EMPTY table and "
                              "does not read the .bak (the file is not empty, and decoding it "
                              "throws nothing)")
        return ConfigLoad(name, path, main, None, name, "main", f"the broker loads {name}",
                          parsed.document, parsed.text, parsed.locations)
    bak, bak_parsed = _file_state(path.with_name(name + ".bak"))
    why = main.sentence()
    if bak.state == "ok":
        return ConfigLoad(name, path, main, bak, bak.name, "bak",
                          f"{why}: the broker loads {bak.name} instead", bak_parsed.document,
                          bak_parsed.text, bak_parsed.locations)
    if bak.state in ("missing", "empty", "null"):
        if main.state == "missing" and bak.state == "missing":
            return ConfigLoad(name, path, main, bak, None, "absent",
                              f"{name} and its .bak are missing: the broker starts with an empty "
                              "table (normal before the first persist)")
        return ConfigLoad(name, path, main, bak, None, "empty",
                          f"{why} and {bak.sentence()}: the broker starts with an EMPTY table "
                          "(everything the file held is forgotten)")
    return ConfigLoad(name, path, main, bak, None, "refuses",
                      f"{why}, and {bak.sentence()}: the broker's load fails and it refuses to "
                      "start")


def rocksdb_metadata(config_dir: Path) -> dict[str, str]:
    """RocksDB metadata folders under ``config/`` (name -> what it holds), when present."""
    found = {}
    for name, what in ROCKSDB_DIRS.items():
        folder = Path(config_dir) / name
        if folder.is_dir():
            files = [p.name for p in folder.iterdir()]
            marker = "CURRENT" in files or any(f.startswith("MANIFEST-") for f in files)
            found[name] = what + ("" if marker else " (no CURRENT/MANIFEST: maybe not RocksDB)")
    return found


@dataclass
class StoreConfigs:
    """Every consumer-related config file of a store, as the broker would load it."""

    config_dir: Path
    loads: dict[str, ConfigLoad]
    rocksdb: dict[str, str] = field(default_factory=dict)

    def document(self, name: str):
        load = self.loads.get(name)
        return load.document if load is not None else None

    @property
    def offsets_in_rocksdb(self) -> bool:
        return "consumerOffsets" in self.rocksdb or "rdb" in self.rocksdb

    def to_dict(self) -> dict:
        return {"files": {name: load.to_dict() for name, load in self.loads.items()},
                "rocksdb": self.rocksdb}


def read_store_configs(root: Path, names=CONSUMER_CONFIGS,
                       family: str | None = None) -> StoreConfigs:
    config_dir = Path(root) / "config"
    loads = {name: read_config(config_dir / name, family) for name in names}
    return StoreConfigs(config_dir, loads, rocksdb_metadata(config_dir))


# --- typed views of the documents -------------------------------------------------------------

def _type_name(value) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(value), type(value).__name__)


def int_key(key, low: int = JAVA_INT_MIN, high: int = JAVA_INT_MAX) -> int | None:
    """An Integer map key as fastjson reads it (unquoted or quoted digits), or None."""
    if isinstance(key, bool):
        return None
    if isinstance(key, str) and re.fullmatch(r"-?\d{1,20}", key.strip()):
        key = int(key.strip())
    if isinstance(key, int) and low <= key <= high:
        return key
    return None


def long_value(value) -> int | None:
    """A Long as the broker's maps hold it: a whole number in Java's long range, or None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if JAVA_LONG_MIN <= value <= JAVA_LONG_MAX else None


class Problem(str):
    """A sentence about a config entry the broker would not write, with its file and the key
    path of the entry (to locate it)."""

    def __new__(cls, file: str, path: tuple, text: str):
        problem = super().__new__(cls, text)
        problem.file, problem.path = file, path
        return problem


def _describe(value) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str) if not isinstance(value, str) \
        else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def offset_table(document, file: str = CONSUMER_OFFSET
                 ) -> tuple[dict[str, dict[int, int]], list[str]]:
    """``offsetTable`` of consumerOffset.json: {"topic@group": {queueId: nextOffset}}, and a
    sentence for every entry that is not what the broker writes (skipped, never guessed)."""
    problems: list[str] = []
    table: dict[str, dict[int, int]] = {}
    if not isinstance(document, dict):
        return table, problems
    raw = document.get("offsetTable")
    if raw is None:
        if "offsetTable" in document:
            problems.append(Problem(file, ("offsetTable",), f"{file}: offsetTable is null"))
        return table, problems
    if not isinstance(raw, dict):
        problems.append(Problem(file, ("offsetTable",),
                                f"{file}: offsetTable is a {_type_name(raw)}, not an object"))
        return table, problems
    for topic_group, queues in raw.items():
        if not isinstance(topic_group, str) or TOPIC_GROUP_SEPARATOR not in topic_group:
            problems.append(Problem(file, ("offsetTable", topic_group),
                                    f"{file}: key {_describe(topic_group)} is not topic@group"))
            continue
        if not isinstance(queues, dict):
            problems.append(Problem(file, ("offsetTable", topic_group),
                                    f"{file}: {topic_group}: a {_type_name(queues)}, not a map "
                                    "of queue offsets"))
            continue
        entry = table.setdefault(topic_group, {})
        for qid, offset in queues.items():
            queue_id = int_key(qid)
            value = long_value(offset)
            if queue_id is None:
                problems.append(Problem(file, ("offsetTable", topic_group, qid),
                                        f"{file}: {topic_group}: queue id {_describe(qid)} is "
                                        "not an integer in Java's int range"))
            elif value is None:
                problems.append(Problem(file, ("offsetTable", topic_group, qid),
                                        f"{file}: {topic_group} queue {queue_id}: offset "
                                        f"{_describe(offset)} is not a whole number in Java's "
                                        "long range"))
            else:
                entry[queue_id] = value
    return table, problems


def split_topic_group(key: str) -> tuple[str, str]:
    """ "topic@group" -> (topic, group). Topics cannot hold '@'; the first one separates."""
    topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
    return topic, group


def delay_offset_table(document, file: str = DELAY_OFFSET) -> tuple[dict[int, int], list[str]]:
    """``offsetTable`` of delayOffset.json: {delayLevel: next SCHEDULE_TOPIC_XXXX queue offset}
    (queue id = level - 1), and a sentence for every entry the broker would not write."""
    problems: list[str] = []
    table: dict[int, int] = {}
    if not isinstance(document, dict):
        return table, problems
    raw = document.get("offsetTable")
    if raw is None:
        return table, problems
    if not isinstance(raw, dict):
        problems.append(Problem(file, ("offsetTable",),
                                f"{file}: offsetTable is a {_type_name(raw)}, not an object"))
        return table, problems
    for level, offset in raw.items():
        key, value = int_key(level), long_value(offset)
        if key is None:
            problems.append(Problem(file, ("offsetTable", level),
                                    f"{file}: level {_describe(level)} is not an integer in "
                                    "Java's int range"))
        elif value is None:
            problems.append(Problem(file, ("offsetTable", level),
                                    f"{file}: level {key}: offset {_describe(offset)} is not a "
                                    "whole number in Java's long range"))
        else:
            table[key] = value
    return table, problems


def topic_names(document, file: str = TOPICS) -> tuple[set[str] | None, list[str]]:
    """Topic names of topics.json's ``topicConfigTable`` (None when there is no table)."""
    if not isinstance(document, dict):
        return None, []
    raw = document.get("topicConfigTable")
    if raw is None:
        return None, []
    if not isinstance(raw, dict):
        return None, [Problem(file, ("topicConfigTable",),
                              f"{file}: topicConfigTable is a {_type_name(raw)}, not an object")]
    return {str(k) for k in raw}, []


def group_names(document) -> set[str] | None:
    """Group names of subscriptionGroup.json (None when there is no table)."""
    if not isinstance(document, dict) or not isinstance(document.get("subscriptionGroupTable"),
                                                        dict):
        return None
    return {str(k) for k in document["subscriptionGroupTable"]}
