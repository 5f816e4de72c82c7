"""A store whose CommitLog is spread over several directories, forged through
:mod:`mqtool.writer` as RocketMQ's ``MultiPathMappedFileQueue`` lays it out: ``storePathCommitLog``
lists writable directories separated by ``,`` and file ``n`` is created in the ``(n % count)``-th
of them, sorted; ``readOnlyCommitLogStorePaths`` holds files an operator moved off (here the
oldest ones), which the broker loads but never writes. The store root keeps its ConsumeQueues,
IndexFiles and checkpoint, and no ``commitlog/``.

:func:`make_multipath_store` also writes the broker config naming those directories and returns
what it meant to write: the expectation the tests compare ``verify``/``dump``/``info`` with.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from .. import writer as w
from ..errors import StoreLayoutError
from .controller import _message, _uniq
from .mix import LOCK_CONTENT

BASE_TIME_MS = 1_795_500_000_000


def make_multipath_store(root: Path, dirs: list[Path], readonly_dir: Path | None = None, *,
                         messages: int = 60, file_size: int = 4096, readonly_files: int = 1,
                         config: Path | None = None) -> dict:
    """Write the store; ``config`` (default ``<root>/../broker.conf``) gets the broker config."""
    root = Path(root)
    dirs = [Path(d) for d in dirs]
    for path in [root, *dirs] + ([Path(readonly_dir)] if readonly_dir else []):
        if path.exists() and any(path.iterdir()):
            raise StoreLayoutError(f"{path}: exists and is not empty")
    store = w.StoreWriter(root, commitlog_file_size=file_size, broker_version=5,
                          cq_units_per_file=300, index_slots=1000, index_entries=4000,
                          commitlog_dirs=dirs)
    clock = BASE_TIME_MS
    offsets = []
    try:
        for i in range(messages):
            clock += 5
            offset, _size, _qo = store.put(_message(i, "TopicTest", _uniq(i), clock))
            offsets.append(offset)
        end = store.commitlog.offset
        store.write_checkpoint(clock, clock)
    finally:
        store.close()
    (root / "lock").write_bytes(LOCK_CONTENT)
    files = sorted((p for d in dirs for p in d.iterdir()), key=lambda p: p.name)
    moved = []
    if readonly_dir is not None:
        Path(readonly_dir).mkdir(parents=True, exist_ok=True)
        for path in files[:readonly_files]:
            shutil.move(str(path), str(Path(readonly_dir) / path.name))
            moved.append(path.name)
    config = Path(config) if config is not None else root.parent / "broker.conf"
    lines = [f"storePathRootDir={root.absolute()}",
             "storePathCommitLog=" + ",".join(str(d.absolute()) for d in dirs)]
    if readonly_dir is not None:
        lines.append(f"readOnlyCommitLogStorePaths={Path(readonly_dir).absolute()}")
    config.write_text("\n".join(lines) + "\n")
    layout = {str(d): sorted(p.name for p in d.iterdir())
              for d in dirs + ([Path(readonly_dir)] if readonly_dir else [])}
    return {"messages": messages, "offsets": offsets, "end_offset": end, "file_size": file_size,
            "files": layout, "readonly_files": moved, "config": str(config),
            "uniq_keys": [_uniq(i) for i in range(messages)]}
