"""The JSON parser's nesting scan: brackets inside strings and escapes do not count."""

from __future__ import annotations

import json

import pytest
from rest_framework.exceptions import ParseError

from ferrox_stats.api.parsers import MAX_JSON_DEPTH, depth, loads


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"1", 0),
        (b"[]", 1),
        (b'{"records": [{"a": 1}, {"b": [2]}]}', 4),
        (b'{"a": "[[[[{{{{"}', 1),
        (b'["a\\"[[[", [[1]]]', 3),  # an escaped quote does not end the string
        (b'["a\\\\", [[1]]]', 3),  # an escaped backslash does not escape the quote
        ('["\u00e9[", {"\u4e16": ["x"]}]'.encode(), 3),
        (b'{"a": "[[[[', 1),  # unterminated: whatever follows the quote is not counted
        (b"[" * 5000, 5000),
    ],
)
def test_depth_counts_arrays_and_objects_outside_strings(text: bytes, expected: int) -> None:
    assert depth(text) == expected


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-32"])
def test_loads_reads_what_json_loads_reads(encoding: str) -> None:
    body = {"records": [{"error": "\u00e9 [[[["}], "x": float("nan")}
    parsed = loads(json.dumps(body).encode(encoding))
    assert parsed["records"] == body["records"]


@pytest.mark.parametrize(
    "body",
    [
        b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1),
        ("[" * 100_000).encode("utf-16"),
        b"\xff\xfe\x00",
        b'{"a": 1',
    ],
)
def test_loads_refuses_with_a_parse_error(body: bytes) -> None:
    with pytest.raises(ParseError):
        loads(body)


def test_loads_parses_up_to_the_cap() -> None:
    nested = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert loads(nested) == json.loads(nested)
