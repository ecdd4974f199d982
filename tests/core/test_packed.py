"""Packed blocks of records: every field back exactly, labels coded per block (SPEC §2 ring)."""

from __future__ import annotations

import enum
import math
import struct
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ferrox_stats.core.requests import RECORD_PACKING, Record

pack, unpack = RECORD_PACKING.pack, RECORD_PACKING.unpack


def exact(value: Any) -> tuple[type, Any]:
    """What must come back: the type, and a float's bits (NaN payloads, -0.0 included)."""
    if type(value) is float:
        return float, struct.pack("<d", value)
    return type(value), value


def assert_exact(got: Sequence[Record], expected: Sequence[Record]) -> None:
    assert len(got) == len(expected)
    for back, record in zip(got, expected, strict=True):
        assert type(back) is Record
        assert [exact(v) for v in back] == [exact(v) for v in record]


# Any text: lone surrogates, NUL, astral planes; a few values so labels repeat.
texts = st.one_of(st.none(), st.text(), st.sampled_from(["stop", "m", "", "\ud800", "\x00"]))
ints = st.one_of(st.none(), st.integers(), st.integers(-(2**200), 2**200), st.just(0))
floats = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True),
    st.integers(0, 2**64 - 1).map(lambda bits: struct.unpack("<d", struct.pack("<Q", bits))[0]),
)
records = st.builds(
    Record,
    request_id=texts,
    at_ms=ints,
    route=texts,
    model=texts,
    status=ints,
    stream=st.one_of(st.none(), st.booleans()),
    prompt_tokens=ints,
    completion_tokens=ints,
    cached_tokens=ints,
    ttft_ms=floats,
    duration_ms=floats,
    queue_ms=floats,
    decode_ms=floats,
    finish_reason=texts,
    aborted=texts,
    error=texts,
    client=texts,
    via_api_key=texts,
    replica=texts,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(records, min_size=1, max_size=40))
def test_every_field_comes_back_exactly(block: list[Record]) -> None:
    packed = pack(block)
    assert isinstance(packed, bytes)
    assert_exact(unpack(packed), block)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([0, 1, True, False, None, 1.0, 0.0, -0.0]), min_size=1))
def test_equal_values_of_other_types_stay_apart(values: list[Any]) -> None:
    # 1 == True == 1.0 and 0.0 == -0.0: coding by distinct value must not merge them.
    block = [Record(status=v, stream=v, model=v, ttft_ms=v) for v in values]
    assert_exact(unpack(pack(block) or b""), block)


def test_none_and_zero_and_empty_stay_distinct() -> None:
    block = [
        Record(prompt_tokens=0, model="", ttft_ms=0.0),
        Record(prompt_tokens=None, model=None, ttft_ms=None),
        Record(prompt_tokens=0, model="", ttft_ms=-0.0),
    ]
    assert_exact(unpack(pack(block) or b""), block)


def test_a_label_repeated_in_a_block_is_stored_once() -> None:
    model = "meta-llama/Llama-3.1-8B-Instruct-" + "x" * 100
    # Fresh equal strings, as parsed request bodies give.
    block = [Record(request_id=str(n), model="".join(model)) for n in range(200)]
    # Written once, and a byte per row: far less than once per row.
    assert len(pack(block) or b"") < len(model) + 200 * 30
    assert_exact(unpack(pack(block) or b""), block)


def test_more_distinct_labels_than_a_byte_codes_are_written_as_they_are() -> None:
    block = [Record(model=f"model-{n}", status=n) for n in range(300)]
    assert_exact(unpack(pack(block) or b""), block)


def test_nan_keeps_its_payload() -> None:
    nan = struct.unpack("<d", struct.pack("<Q", 0x7FF0_0000_0000_0ABC))[0]
    back = unpack(pack([Record(ttft_ms=nan)]) or b"")[0].ttft_ms
    assert back is not None and math.isnan(back)
    assert struct.pack("<d", back) == struct.pack("<d", nan)


class Reason(enum.StrEnum):
    STOP = "stop"


class Status(enum.IntEnum):
    OK = 200


def test_a_block_with_a_value_marshal_cannot_write_exactly_is_refused() -> None:
    # The ring then keeps that block as it is: a subclass never comes back as its base.
    assert pack([Record(finish_reason="stop"), Record(finish_reason=Reason.STOP)]) is None
    assert pack([Record(status=Status.OK)]) is None
    assert pack([Record(request_id=object())]) is None  # type: ignore[arg-type]
