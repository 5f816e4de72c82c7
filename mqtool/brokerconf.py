"""Where a broker keeps its CommitLog, from its broker config (``broker.conf``, Java properties).

``MessageStoreConfig``: ``storePathCommitLog`` (default ``<storePathRootDir>/commitlog``) may list
several directories separated by ``,`` (``MixAll.MULTI_PATH_SPLITTER``; the system property
``rocketmq.broker.multiPathSplitter`` can change it); the CommitLog is then a
``MultiPathMappedFileQueue`` that loads the files of every listed directory and of
``readOnlyCommitLogStorePaths`` (also ``,``-separated, read only in multi-path mode) as one
queue, and creates file ``n`` in the ``n % count``-th of the sorted writable directories.
"""
from __future__ import annotations

from pathlib import Path

from .errors import MqtoolError
from .formats.dledger import parse_properties_text

MULTI_PATH_SPLITTER = ","
STORE_PATH_COMMITLOG = "storePathCommitLog"
READ_ONLY_PATHS = "readOnlyCommitLogStorePaths"


def split_paths(text: str) -> list[Path]:
    """A ``,``-separated path list (blank items dropped, duplicates once, as the broker's set)."""
    items = [item.strip() for item in text.strip().split(MULTI_PATH_SPLITTER)]
    return [Path(p) for p in dict.fromkeys(item for item in items if item)]


def commitlog_dirs_from_config(path: Path) -> list[Path] | None:
    """The CommitLog directories a broker config names; None when it names none (the store's
    own ``commitlog/``)."""
    try:
        text = Path(path).read_bytes().decode("utf-8", errors="replace")
    except OSError as err:
        raise MqtoolError(f"{path}: {err.strerror or err}") from None
    values = parse_properties_text(text)
    commitlog = values.get(STORE_PATH_COMMITLOG, "").strip()
    if not commitlog:
        return None
    if MULTI_PATH_SPLITTER not in commitlog:
        return [Path(commitlog)]            # one directory: readOnly paths are not read then
    return split_paths(commitlog) + [p for p in split_paths(values.get(READ_ONLY_PATHS, ""))
                                     if p not in split_paths(commitlog)]


def resolve_commitlog_dirs(commitlog_dirs: str | None, broker_config: Path | None
                           ) -> list[Path] | None:
    """``--commitlog-dirs A,B`` or ``--broker-config FILE`` as a directory list (None: neither)."""
    if commitlog_dirs is not None and broker_config is not None:
        raise MqtoolError("--commitlog-dirs and --broker-config name the CommitLog directories "
                          "twice; give one")
    if commitlog_dirs is not None:
        dirs = split_paths(commitlog_dirs)
        if not dirs:
            raise MqtoolError("--commitlog-dirs names no directory")
        return dirs
    if broker_config is not None:
        return commitlog_dirs_from_config(broker_config)
    return None
