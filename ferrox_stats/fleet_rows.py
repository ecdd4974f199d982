"""How a heartbeat row keeps its state, and how ``v1/fleet`` reads and merges rows.

A row (``models.Instance``) stores the process's state document without its per-label
breakdown (``row_state``): JSON text in ``state``, its three latency distributions
(duration, TTFT, TPOT, full resolution, dense form D: counts from the lowest bucket
index ``offset`` up) with their counts packed apart, in ``latency_counts`` (``pack``):

- ``state["latency"][name]`` is ``{"zeros", "sum", "offset", "buckets"}``;
- ``latency_counts`` holds the three distributions' ``buckets`` counts one after the
  other (``LATENCY`` order), each a little-endian unsigned integer of the same width
  (a lane): the narrowest of 2 to 8 bytes whose top byte the row's largest count
  leaves free (2 bytes below 256, 3 below 65 536, ...). With that byte free, the counts
  of up to ``HEADROOM`` (256, ``fleet.MAX_INSTANCES``) rows add up lane by lane inside
  one Python integer without a carry crossing lanes: a fleet's merge is a few
  big-integer additions in C, not one Python addition per bucket. Narrow lanes keep
  the bytes PostgreSQL sends (hex) few;
- a row whose ``latency_counts`` is NULL keeps the counts in ``state`` as JSON lists
  (form D): the previous release's rows (state version 1), and a count of ``2**56`` or
  more (no lane holds it with headroom).

Why not ``jsonb`` with lists: PostgreSQL's ``jsonb`` output and the JSON decoding of
~60 000 bucket counts were most of a 12 ms read at 64 rows (``bench/fleet.py``).

``read_latency`` refuses (``ValueError``) anything ``pack`` could not have written, so a
hand-edited row is skipped and counted, never a crash or a huge allocation: indexes
outside a float's, a blob of the wrong length, a count without headroom.
"""

from __future__ import annotations

import json
import math
import sys
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate
from operator import add
from typing import Any, NamedTuple

from .core.distribution import MAX_COUNT, MAX_INDEX, MIN_INDEX, bucket_midpoint

__all__ = [
    "HEADROOM",
    "LANES",
    "LATENCY",
    "MAX_SPAN",
    "PERCENTILES",
    "Part",
    "dense",
    "merge_dense",
    "merge_parts",
    "merge_wires",
    "pack",
    "read_document",
    "read_latency",
    "row_state",
    "summary",
]

# The row's latency distributions and the breakdown fields they sum (state version 1).
LATENCY = {"duration_s": "duration", "ttft_s": "ttft", "tpot_s": "tpot"}
PERCENTILES = (50, 95, 99)
# Bucket indexes one distribution can span (every positive float): a row claiming more
# is not a distribution.
MAX_SPAN = MAX_INDEX - MIN_INDEX + 1
# Rows whose packed counts may be summed in one integer: a lane's top byte is free.
HEADROOM = 256
# Lane widths (bytes) a row may use.
LANES = range(2, 9)
# Width (bytes) -> array typecode of that width: lanes are widened to one to be read.
_TYPECODES = {4: "I", 8: "Q"}
assert all(array(code).itemsize == lane for lane, code in _TYPECODES.items())
_BIG_ENDIAN = sys.byteorder == "big"


def _relaned(data: bytes, lane: int, width: int) -> bytes:
    """Little-endian ``lane``-byte integers as ``width``-byte ones, by C-level slices
    (narrower: each loses its top bytes, which must be zero)."""
    if lane == width:
        return data
    out = bytearray(len(data) // lane * width)
    for k in range(min(lane, width)):
        out[k::width] = data[k::lane]
    return bytes(out)


def _full(lane: int) -> int:
    return 4 if lane <= 4 else 8


def _packed(values: Sequence[int], lane: int) -> bytes:
    """``values`` (each below ``2**(8 * lane)``) as little-endian ``lane``-byte lanes."""
    packed = array(_TYPECODES[_full(lane)], values)
    if _BIG_ENDIAN:
        packed.byteswap()
    return _relaned(packed.tobytes(), _full(lane), lane)


def _unpacked(data: bytes, lane: int) -> array[int]:
    """Little-endian ``lane``-byte lanes as integers."""
    values = array(_TYPECODES[_full(lane)], _relaned(data, lane, _full(lane)))
    if _BIG_ENDIAN:
        values.byteswap()
    return values


class Part(NamedTuple):
    """One distribution of one row, checked: ``buckets`` counts from index ``offset``,
    as ``lane``-byte little-endian lanes (``counts`` bytes) or a list (``lane`` 0)."""

    zeros: int
    offset: int
    buckets: int
    lane: int
    counts: bytes | list[int]


# -- writing --------------------------------------------------------------------------


def merge_wires(wires: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Distribution wires (``Distribution.to_wire``) summed bucket by bucket, on the
    wire: no ``Distribution`` is built per part. The result is checked once, when read
    (``Distribution.from_wire``)."""
    zeros = 0
    total = 0.0
    counts: dict[str, int] = {}
    get = counts.get
    for wire in wires:
        zeros += wire["zeros"]
        total += wire["sum"]
        for index, n in wire["counts"].items():
            counts[index] = get(index, 0) + n
    return {"zeros": zeros, "sum": total, "counts": counts}


def dense(wire: Mapping[str, Any]) -> dict[str, Any]:
    """A distribution wire in form D: the counts as one list from the lowest bucket
    index (``offset``) up."""
    counts = {int(index): n for index, n in wire["counts"].items() if n}
    if not counts:
        return {"zeros": wire["zeros"], "sum": wire["sum"], "offset": 0, "counts": []}
    low, high = min(counts), max(counts)
    values = [0] * (high - low + 1)
    for index, n in counts.items():
        values[index - low] = n
    return {"zeros": wire["zeros"], "sum": wire["sum"], "offset": low, "counts": values}


def row_state(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The document a heartbeat row stores: ``process_state``'s without its per-label
    breakdown, with ``"latency"``: the three time distributions merged across every
    cell, full resolution, form D.

    State version 2 carries ``"latency"`` itself; version 1 has only the full-resolution
    breakdown, whose cells are merged here. The fleet sums nothing per label, and a busy
    worker's breakdown is ~200 KiB of JSON (45 cells: bench/fleet.py); the per-label
    breakdown goes to the host file (``/metrics``) instead.
    """
    row = {key: value for key, value in doc.items() if key != "breakdown"}
    if "latency" not in doc:
        cells = doc["breakdown"]
        row["latency"] = {
            name: dense(merge_wires(cell[field] for cell in cells))
            for name, field in LATENCY.items()
        }
    return row


def pack(doc: Mapping[str, Any]) -> tuple[str, bytes | None]:
    """A state document as a row stores it: (``state`` JSON text, ``latency_counts``);
    see the module docstring. ``ValueError`` for a value JSON cannot carry (NaN)."""
    row = row_state(doc)
    latency = row["latency"]
    lists = [latency[name]["counts"] for name in LATENCY]
    top = max((max(counts) for counts in lists if counts), default=0)
    lane = max(2, (top.bit_length() + 7) // 8 + 1)  # one byte free above the largest
    if lane not in LANES:
        return _json(row), None
    blob = _packed([n for counts in lists for n in counts], lane)
    row["latency"] = {
        name: {
            "zeros": latency[name]["zeros"],
            "sum": latency[name]["sum"],
            "offset": latency[name]["offset"],
            "buckets": len(latency[name]["counts"]),
        }
        for name in LATENCY
    }
    return _json(row), blob


def _json(row: Mapping[str, Any]) -> str:
    return json.dumps(row, separators=(",", ":"), allow_nan=False)


# -- reading --------------------------------------------------------------------------


def _integer(value: Any, low: int, high: int, what: str) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{what} must be an integer from {low} to {high}, got {value!r}")
    return value


def _head(wire: Any, buckets: int) -> tuple[int, int]:
    """``(zeros, offset)`` of one distribution of a row, checked."""
    if not isinstance(wire, dict):
        raise ValueError("a distribution must be an object")
    zeros = _integer(wire["zeros"], 0, MAX_COUNT, "zeros")
    total = wire["sum"]
    if type(total) not in (int, float) or not 0 <= total < math.inf:
        raise ValueError(f"sum must be a finite number >= 0, got {total!r}")
    if not buckets:
        return zeros, 0
    offset = _integer(wire["offset"], MIN_INDEX, MAX_INDEX - buckets + 1, "offset")
    return zeros, offset


def read_latency(state: Any, latency_counts: bytes | memoryview | None) -> list[Part]:
    """The row's three distributions (``LATENCY`` order), checked: ``ValueError`` (or
    ``KeyError``, ``TypeError``) for anything ``pack`` could not have written."""
    latency = state["latency"]
    wires = [latency[name] for name in LATENCY]
    if latency_counts is None:
        parts = []
        for wire in wires:
            counts = wire["counts"]
            if type(counts) is not list:
                raise ValueError("counts must be a list")
            if counts and not (
                set(map(type, counts)) == {int} and min(counts) >= 0 and max(counts) <= MAX_COUNT
            ):
                raise ValueError(f"counts must be integers from 0 to {MAX_COUNT}")
            zeros, offset = _head(wire, len(counts))
            parts.append(Part(zeros, offset, len(counts), 0, counts))
        return parts
    blob = bytes(latency_counts)
    sizes = [_integer(wire["buckets"], 0, MAX_SPAN, "buckets") for wire in wires]
    total = sum(sizes)
    lane = len(blob) // total if total else 2
    if lane not in LANES or lane * total != len(blob):
        raise ValueError(f"{len(blob)} bytes of counts for {total} buckets")
    # Every lane's top byte must be free (the headroom that makes merging exact).
    if blob[lane - 1 :: lane].count(0) != total:
        raise ValueError(f"a count reaches 2**{8 * lane - 8}")
    parts = []
    start = 0
    for wire, buckets in zip(wires, sizes, strict=True):
        zeros, offset = _head(wire, buckets)
        end = start + buckets * lane
        parts.append(Part(zeros, offset, buckets, lane, blob[start:end]))
        start = end
    return parts


def _ints(part: Part) -> list[int]:
    if isinstance(part.counts, list):
        return part.counts
    return _unpacked(part.counts, part.lane).tolist()


def merge_parts(parts: Iterable[Part]) -> tuple[int, int, Sequence[int]]:
    """``(zeros, offset, counts)`` of the parts summed bucket by bucket (exact).

    Packed parts (the usual case) are summed as integers of lanes; a part kept as a
    list (an older row) puts every part through lists. ``ValueError`` if the parts'
    indexes span more than any distribution can (``read_latency`` keeps them within).
    """
    zeros = 0
    filled = []
    for part in parts:
        zeros += part.zeros
        if part.buckets:
            filled.append(part)
    if not filled:
        return zeros, 0, ()
    low = min(part.offset for part in filled)
    high = max(part.offset + part.buckets for part in filled)
    if high - low > MAX_SPAN:
        raise ValueError(f"bucket indexes span {high - low}, more than any distribution")
    lanes = {part.lane for part in filled}
    if 0 in lanes or len(filled) > HEADROOM:
        summed = [0] * (high - low)
        for part in filled:
            start = part.offset - low
            end = start + part.buckets
            summed[start:end] = map(add, summed[start:end], _ints(part))
        return zeros, low, summed
    lane = max(lanes)
    bits = 8 * lane
    total = 0
    for part in filled:
        assert isinstance(part.counts, bytes)
        # A row of narrower lanes among wider ones is widened (its top bytes stay free).
        counts = _relaned(part.counts, part.lane, lane)
        total += int.from_bytes(counts, "little") << ((part.offset - low) * bits)
    return zeros, low, _unpacked(total.to_bytes((high - low) * lane, "little"), lane)


def summary(zeros: int, offset: int, counts: Iterable[int]) -> dict[str, Any]:
    """Count and p50/p95/p99 of a merged distribution, as ``Distribution.quantile``
    gives them (nearest rank, a bucket's midpoint; ``None`` when empty)."""
    cumulative = list(accumulate(counts))
    count = zeros + (cumulative[-1] if cumulative else 0)
    result: dict[str, Any] = {"count": count}
    for p in PERCENTILES:
        if not count:
            result[f"p{p}"] = None
            continue
        rank = max(-(-p * count // 100), 1)  # ceil(p * count / 100), exactly
        if rank <= zeros:
            result[f"p{p}"] = 0.0
        else:
            result[f"p{p}"] = bucket_midpoint(offset + bisect_left(cumulative, rank - zeros))
    return result


def merge_dense(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Distributions in form D summed, as a ``Distribution`` wire (unchecked:
    ``Distribution.from_wire`` checks it once)."""
    zeros = 0
    total = 0.0
    checked = []
    for part in parts:
        zeros += part["zeros"]
        total += part["sum"]
        values = part["counts"]
        checked.append(Part(0, int(part["offset"]), len(values), 0, values))
    _, low, summed = merge_parts(checked)
    return {
        "zeros": zeros,
        "sum": total,
        "counts": {str(low + i): n for i, n in enumerate(summed) if n},
    }


def read_document(state: str, latency_counts: bytes | memoryview | None) -> dict[str, Any]:
    """A row's stored document with its latency counts back in ``state`` as lists
    (form D): what the admin shows. ``ValueError`` if it is not one ``pack`` wrote."""
    document = json.loads(state)
    if not isinstance(document, dict):
        raise ValueError("a state document must be an object")
    if latency_counts is not None:
        parts = read_latency(document, latency_counts)
        document["latency"] = {
            name: {
                "zeros": part.zeros,
                "sum": document["latency"][name]["sum"],
                "offset": part.offset,
                "counts": _ints(part),
            }
            for name, part in zip(LATENCY, parts, strict=True)
        }
    return document
