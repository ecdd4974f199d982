"""JSON bodies parsed within stated bounds: a size (413) and a nesting depth (400).

``json.loads`` recurses once per level of arrays and objects and raises
``RecursionError`` somewhere near a thousand, wherever the caller's stack happens to
be; so the depth is measured on the text first, without recursion, and a body deeper
than ``MAX_JSON_DEPTH`` is refused before it is parsed.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from ..conf import conf
from . import errors

# Levels of arrays and objects a body may nest. An ingest batch needs 3
# ({"records": [{…}]}); the rest is room for producers, far below the recursion limit.
MAX_JSON_DEPTH = 32

# Escapes go first (an escaped quote ends no string); then every byte but quotes and
# brackets (ASCII never occurs inside a multi-byte UTF-8 character); then the strings.
# About 2 ms for a batch of 1000 records (json.loads takes 5).
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'"[]{}')))
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def depth(utf8: bytes) -> int:
    """The deepest nesting of arrays and objects in UTF-8 text, read without recursion.

    For text that is not JSON the figure means nothing in particular, which is enough:
    such a body is refused either way.
    """
    text = _ESCAPE.sub(b"", utf8) if b"\\" in utf8 else utf8
    # Quotes and brackets only; every other piece between quotes lies inside a string.
    brackets = b"".join(text.translate(None, _NOT_STRUCTURE).split(b'"')[::2])
    # Prefix sums of +1/-1, all in C: the running depth after each bracket.
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def loads(body: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``body`` parsed as JSON (NaN and Infinity included, so items can be refused).

    Raises ``ParseError`` for a body that is not JSON or nests deeper than ``max_depth``.
    """
    encoding = json.detect_encoding(body)
    try:
        # json.loads() reads UTF-16 and UTF-32 too; the scan needs UTF-8.
        utf8 = (
            body
            if encoding == "utf-8"
            else body.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
        )
    except UnicodeError:
        raise ParseError("The body is not valid JSON.") from None
    if depth(utf8) > max_depth:
        raise ParseError(
            f"The body is nested deeper than {max_depth} levels of arrays and objects."
        )
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        # RecursionError only for a body the depth scan misread; never a 500.
        raise ParseError("The body is not valid JSON.") from None


class BoundedJSONParser(BaseParser):
    """JSON with a hard body limit (413) and a nesting cap (400)."""

    media_type = "application/json"

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        limit = conf.INGEST_MAX_BODY_BYTES
        body = stream.read(limit + 1) if stream is not None else b""
        if len(body) > limit:
            raise errors.PayloadTooLarge(f"The body is larger than {limit} bytes.")
        return loads(body)


__all__ = ["MAX_JSON_DEPTH", "BoundedJSONParser", "depth", "loads"]
