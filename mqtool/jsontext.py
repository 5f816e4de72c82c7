"""JSON text for documents that hold file system paths.

Linux paths are bytes. Python gives a name that is not UTF-8 as a str with lone surrogates
(``os.fsdecode``: byte 0xff becomes U+DCFF), which UTF-8 cannot encode. mqtool writes such a
character as its JSON escape (``"st\\udcffore"``): the text stays valid UTF-8, and reading it back
with Python's ``json`` gives the same str, so ``os.fsencode(json.loads(text)["store"])`` is the
path's bytes again. Every other character is written as itself (``ensure_ascii=False``).
"""
from __future__ import annotations

import json
import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    return f"\\u{ord(match.group()):04x}"


def dumps(obj, **options) -> str:
    """``json.dumps(obj, ensure_ascii=False, **options)`` with lone surrogates escaped."""
    text = json.dumps(obj, ensure_ascii=False, **options)
    # a surrogate can only stand inside a string literal, where its escape means the same
    return text if text.isascii() else _SURROGATE.sub(_escape, text)


__all__ = ["dumps"]
