"""A state document's breakdown in the octave form, checked and summed in C-level passes.

From version 2 on (``VERSION``) a state document carries each cell's five distributions
in the octave form::

    {"zeros": int, "sum": float, "offset": int, "counts": [int, ...]}

``counts[i]`` counts the values in ``(2**(offset+i-1), 2**(offset+i)]``: the 32 buckets
of that power of two (``Distribution`` bucket ``b`` is in octave ``b // 32``). Every
``le`` of ``/metrics`` is a power of two, so nothing finer is needed there, and each
``count_at_most(2**e)`` stays exact. Empty: ``offset`` 0, ``counts`` [].

A scrape reads every process's breakdown of its host and sums it: up to
``LABEL_MAX_MODELS`` x routes x 3 outcomes cells per process, five distributions each.
Built as ``Distribution`` objects, checked and merged bucket by bucket, that cost about
50 ms at 180 cells x 4 workers (``docs/benchmarks.md``). Here every check and every sum
is a pass of a C builtin (``map``, ``zip``, ``min``, ``accumulate``) over a whole column
of the document, never a Python step per bucket:

- ``checked(breakdown)``: a ``Part`` (the cells by column), or ``ValueError`` for
  anything a producer could not have written (types, negative counts, an unbounded span);
- ``columns(breakdown)``: the breakdown as the host files carry it, by column (one list
  per field instead of one object per cell: no key name repeated per cell, a tenth of
  the objects to decode), and ``of_columns`` reads that back into a ``Part``, checked
  exactly as ``checked`` checks cells;
- ``merged(parts)``: a ``Merged``: the cells summed key by key, each distribution as its
  cumulative counts at every power of two of its frame (the part of its ``FRAMES``
  entry its values reach), the count last: what the exposition writes, bound by bound.

``from_keyed`` reads a version 1 breakdown (``Distribution.to_wire`` keyed counts) into
this form, ``keyed`` writes one back, ``summed`` sums parts into octave-form cells (a
state document's), ``cells`` turns a part into ``Cell`` objects.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from functools import partial, reduce
from itertools import accumulate, chain, compress, repeat
from operator import add, itemgetter, mul, sub
from typing import Any, NamedTuple

from .core.breakdown import DISTRIBUTIONS, OUTCOMES, Cell, CellKey
from .core.distribution import MAX_COUNT, MAX_INDEX, MIN_INDEX, SUB_BUCKETS, Distribution

__all__ = [
    "COLUMNS",
    "FIELDS",
    "FRAMES",
    "MAX_OCTAVE",
    "MIN_OCTAVE",
    "TIMES",
    "TOKENS",
    "VERSION",
    "Frame",
    "Merged",
    "Part",
    "cells",
    "checked",
    "columns",
    "from_keyed",
    "keyed",
    "merged",
    "of_columns",
    "of_document",
    "summed",
]

VERSION = 2
"""The state document version whose breakdown is in the octave form."""

MIN_OCTAVE = MIN_INDEX // SUB_BUCKETS
MAX_OCTAVE = MAX_INDEX // SUB_BUCKETS
# A label longer than this is not one a breakdown keeps (Cell.from_wire's bound).
MAX_LABEL = 1000
_FLOAT_MAX = sys.float_info.max


class Frame(NamedTuple):
    """The powers of two a merged distribution keeps apart: its cumulative counts are
    ``count_at_most(2**e)`` for ``e`` from ``low`` to ``high`` (slot ``e - low``), then
    the count (the last slot). Below ``low`` nothing but zeros was counted, above
    ``high`` nothing more: ``slot`` clips."""

    low: int
    high: int

    @property
    def width(self) -> int:
        return self.high - self.low + 2

    def slot(self, exponent: int) -> int:
        """The slot holding ``count_at_most(2**exponent)``."""
        return min(max(exponent - self.low, 0), self.width - 1)


# The widest frames ``merged`` keeps: the exposition's bounds (2^-10 s .. 2^7 s, 4^0 ..
# 4^13 tokens) and one power of two below them. Each merge keeps only the part of its
# frame that the values reach (fewer slots to sum); a distribution that starts above
# ``low`` takes the fast path (a millisecond, or one token, is common; 2^-11 s rarely is).
TIMES = Frame(-11, 7)
TOKENS = Frame(-1, 26)
FRAMES: dict[str, Frame] = {
    "duration": TIMES,
    "ttft": TIMES,
    "tpot": TIMES,
    "input": TOKENS,
    "output": TOKENS,
}

COLUMNS = ("model", "route", "outcome", "requests", "input_tokens", "output_tokens")
FIELDS = ("zeros", "sum", "offset", "counts")
_CELL = itemgetter(*COLUMNS)
_DISTRIBUTIONS = itemgetter(*DISTRIBUTIONS)
_DISTRIBUTION = itemgetter(*FIELDS)
_OUTCOMES = frozenset(OUTCOMES)
_EMPTY: list[int] = []
_SHARED = {"input": ("input", "output"), "output": ("input", "output")}


class Part:
    """One document's breakdown, checked, by column: ``keys[i]`` is cell ``i``'s
    ``(model, route, outcome)``; ``requests``, ``input_tokens``, ``output_tokens`` its
    counts; per distribution name, ``zeros``, ``sums`` (floats), ``offsets`` and
    ``counts`` its octave form."""

    __slots__ = (
        "counts",
        "input_tokens",
        "keys",
        "offsets",
        "output_tokens",
        "requests",
        "sums",
        "zeros",
    )

    def __init__(
        self,
        keys: list[CellKey],
        requests: Sequence[int],
        input_tokens: Sequence[int],
        output_tokens: Sequence[int],
        zeros: dict[str, Sequence[int]],
        sums: dict[str, Sequence[float]],
        offsets: dict[str, Sequence[int]],
        counts: dict[str, Sequence[list[int]]],
    ) -> None:
        self.keys = keys
        self.requests = requests
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.zeros = zeros
        self.sums = sums
        self.offsets = offsets
        self.counts = counts

    @classmethod
    def empty(cls) -> Part:
        none: dict[str, Sequence[Any]] = dict.fromkeys(DISTRIBUTIONS, ())
        return cls([], (), (), (), none, dict(none), dict(none), dict(none))

    def aligned(self, keys: list[CellKey]) -> Part:
        """This part with a cell for each of ``keys`` (a superset of its own), in that
        order; a key it lacks has an empty cell."""
        index = dict(zip(self.keys, range(len(self.keys)), strict=True))
        at = list(map(index.get, keys))

        def column(values: Sequence[Any], empty: Any) -> list[Any]:
            return [empty if i is None else values[i] for i in at]

        return Part(
            list(keys),
            column(self.requests, 0),
            column(self.input_tokens, 0),
            column(self.output_tokens, 0),
            {name: column(values, 0) for name, values in self.zeros.items()},
            {name: column(values, 0.0) for name, values in self.sums.items()},
            {name: column(values, 0) for name, values in self.offsets.items()},
            {name: column(values, _EMPTY) for name, values in self.counts.items()},
        )


def _fail(what: str) -> ValueError:
    return ValueError(f"not a breakdown in the octave form: {what}")


def checked(breakdown: Any, *, trusted: bool = False) -> Part:
    """``breakdown`` (a list of octave-form cells) by column; ``ValueError`` for
    anything ``process_state`` could not have written. ``trusted`` skips the checks
    (this process's own document, built in memory)."""
    if type(breakdown) is not list:
        raise _fail("not a list of cells")
    if not breakdown:
        return Part.empty()
    n = len(breakdown)
    try:
        if not trusted and set(map(type, breakdown)) != {dict}:
            raise _fail("a cell is not an object")
        labels = list(zip(*map(_CELL, breakdown), strict=True))
        # Every distribution of every cell in one column: duration of each cell, then ttft...
        every = list(chain.from_iterable(zip(*map(_DISTRIBUTIONS, breakdown), strict=True)))
        if not trusted and set(map(type, every)) != {dict}:
            raise _fail("a distribution is not an object")
        zeros, sums, offsets, counts = zip(*map(_DISTRIBUTION, every), strict=True)
    except KeyError as exc:
        raise _fail(f"a cell or distribution lacks {exc}") from None
    models, routes, outcomes, requests, inputs, outputs = labels
    keys: list[CellKey] = list(zip(models, routes, outcomes, strict=True))
    if not trusted:
        _check(keys, outcomes, requests, inputs, outputs, zeros, sums, offsets, counts)
        if set(map(type, sums)) != {float}:
            sums = tuple(map(float, sums))

    def by_name(column: Sequence[Any]) -> dict[str, Sequence[Any]]:
        return {name: column[i * n : (i + 1) * n] for i, name in enumerate(DISTRIBUTIONS)}

    return Part(
        keys,
        requests,
        inputs,
        outputs,
        by_name(zeros),
        by_name(sums),
        by_name(offsets),
        by_name(counts),
    )


def columns(breakdown: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``breakdown`` (octave-form cells, ``process_state``'s) by column, as the host
    files carry it: ``{"model": [...], "route": [...], "outcome": [...], "requests":
    [...], "input_tokens": [...], "output_tokens": [...], "duration": {"zeros": [...],
    "sum": [...], "offset": [...], "counts": [[...], ...]}, ...}``, each list holding
    cell ``i``'s value at ``i`` (tuples: JSON writes them as lists). Transposed in C
    (``zip``), a few passes over the cells whatever their buckets."""
    if not breakdown:
        return {
            **{name: [] for name in COLUMNS},
            **{name: {field: [] for field in FIELDS} for name in DISTRIBUTIONS},
        }
    result: dict[str, Any] = dict(
        zip(COLUMNS, zip(*map(_CELL, breakdown), strict=True), strict=True)
    )
    for name, distributions in zip(
        DISTRIBUTIONS, zip(*map(_DISTRIBUTIONS, breakdown), strict=True), strict=True
    ):
        result[name] = dict(
            zip(FIELDS, zip(*map(_DISTRIBUTION, distributions), strict=True), strict=True)
        )
    return result


def of_columns(columns: Any) -> Part:
    """A breakdown by column (``columns``' form, read from a file) as a ``Part``;
    ``ValueError`` for anything ``columns`` could not have written: every check of
    ``checked``, and every column a list, all of one length. Keys beyond these are
    ignored (a later version's additions)."""
    if type(columns) is not dict:
        raise _fail("the columns are not an object")
    try:
        labels: list[Any] = list(map(columns.__getitem__, COLUMNS))
        distributions = list(map(columns.__getitem__, DISTRIBUTIONS))
        if set(map(type, distributions)) != {dict}:
            raise _fail("a distribution's columns are not an object")
        fields: list[list[Any]] = [list(map(d.__getitem__, FIELDS)) for d in distributions]
    except KeyError as exc:
        raise _fail(f"no column {exc}") from None
    every = labels + list(chain.from_iterable(fields))
    if set(map(type, every)) != {list}:
        raise _fail("a column is not a list")
    n = len(labels[0])
    if set(map(len, every)) != {n}:
        raise _fail("columns of different lengths")
    if not n:
        return Part.empty()
    models, routes, outcomes, requests, inputs, outputs = labels
    keys: list[CellKey] = list(zip(models, routes, outcomes, strict=True))
    zeros, sums, offsets, counts = (
        {name: field[i] for name, field in zip(DISTRIBUTIONS, fields, strict=True)}
        for i in range(len(FIELDS))
    )

    def column(by_name: dict[str, list[Any]]) -> list[Any]:
        # Every distribution's, one after another (aligned across the four).
        return list(chain.from_iterable(by_name.values()))

    _check(
        keys,
        outcomes,
        requests,
        inputs,
        outputs,
        column(zeros),
        column(sums),
        column(offsets),
        column(counts),
    )
    for name, values in sums.items():
        if set(map(type, values)) != {float}:
            sums[name] = list(map(float, values))
    return Part(keys, requests, inputs, outputs, zeros, sums, offsets, counts)


def _check(
    keys: list[CellKey],
    outcomes: Sequence[Any],
    requests: Sequence[Any],
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    zeros: Sequence[Any],
    sums: Sequence[Any],
    offsets: Sequence[Any],
    counts: Sequence[Any],
) -> None:
    # Each check a C-level pass over a column (bool is refused: its type is not int).
    labels = list(chain.from_iterable(keys))
    if set(map(type, labels)) != {str} or max(map(len, labels)) > MAX_LABEL:
        raise _fail(f"a model or route is not a string of at most {MAX_LABEL} characters")
    if not set(outcomes) <= _OUTCOMES:
        raise _fail(f"an outcome is not one of {OUTCOMES}")
    if len(set(keys)) != len(keys):
        raise _fail("a (model, route, outcome) is listed twice")
    counters = list(chain(requests, inputs, outputs, zeros))
    if set(map(type, counters)) != {int} or min(counters) < 0:
        raise _fail("a count is not an integer >= 0")
    if not set(map(type, sums)) <= {int, float} or not min(sums) >= 0:
        raise _fail("a sum is not a number >= 0")
    try:
        # NaN or infinity anywhere makes the total fail this too.
        if not float(sum(sums)) <= _FLOAT_MAX:
            raise _fail("a sum is not finite")
    except OverflowError:
        raise _fail("a sum is not finite") from None
    if set(map(type, offsets)) != {int} or min(offsets) < MIN_OCTAVE:
        raise _fail(f"an offset is not an integer >= {MIN_OCTAVE}")
    if set(map(type, counts)) != {list}:
        raise _fail("counts is not a list")
    flat = list(chain.from_iterable(counts))
    if flat and (set(map(type, flat)) != {int} or min(flat) < 0):
        raise _fail("a count is not an integer >= 0")
    if max(map(add, offsets, map(len, counts))) > MAX_OCTAVE + 1:
        raise _fail(f"counts reach past octave {MAX_OCTAVE}")
    if max(map(add, zeros, map(sum, counts))) > MAX_COUNT:
        raise _fail(f"a distribution holds more than {MAX_COUNT} values")


# -- summed for the exposition ------------------------------------------------------------


class Merged:
    """Cells summed key by key, for the exposition: ``keys`` sorted (``(model, route,
    outcome)``, or ``(model,)`` from ``by_model``), and per key its ``requests``,
    ``input_tokens``, ``output_tokens``; per distribution name, its ``frames`` entry
    (within ``FRAMES``'), each key's ``cumulative`` counts in that frame (the count
    last) and its ``sums``."""

    __slots__ = (
        "cumulative",
        "frames",
        "input_tokens",
        "keys",
        "output_tokens",
        "requests",
        "sums",
    )

    def __init__(
        self,
        keys: Sequence[tuple[str, ...]],
        requests: list[int],
        input_tokens: list[int],
        output_tokens: list[int],
        frames: dict[str, Frame],
        cumulative: dict[str, list[list[int]]],
        sums: dict[str, list[float]],
    ) -> None:
        self.keys = keys
        self.requests = requests
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.frames = frames
        self.cumulative = cumulative
        self.sums = sums

    def count_at_most(self, name: str, key: tuple[str, ...], exponent: int) -> int:
        """``count_at_most(2**exponent)`` of distribution ``name`` of cell ``key``, for
        an exponent within ``FRAMES[name]``."""
        widest = FRAMES[name]
        if not widest.low < exponent <= widest.high:
            raise ValueError(f"2**{exponent} is outside {name}'s frame {widest}")
        cumulative = self.cumulative[name][list(self.keys).index(key)]
        return cumulative[self.frames[name].slot(exponent)]

    def by_model(self) -> Merged:
        """These cells summed per model: keys ``(model,)``, sorted."""
        groups: dict[str, list[int]] = {}
        for i, key in enumerate(self.keys):
            groups.setdefault(key[0], []).append(i)
        at = list(groups.values())

        def summed(values: list[Any], start: Any = 0) -> list[Any]:
            # Left to right from ``start``, as merging the cells one after another does.
            return [reduce(add, map(values.__getitem__, i), start) for i in at]

        return Merged(
            [(model,) for model in groups],
            summed(self.requests),
            summed(self.input_tokens),
            summed(self.output_tokens),
            self.frames,
            {
                name: [
                    list(map(sum, zip(*map(cumulative.__getitem__, i), strict=True))) for i in at
                ]
                for name, cumulative in self.cumulative.items()
            },
            {name: summed(sums, 0.0) for name, sums in self.sums.items()},
        )


def _framed(zeros: int, offset: int, counts: list[int], frame: Frame) -> list[int]:
    """One distribution's counts per slot of ``frame`` (not cumulative): slot 0 all
    values <= 2**low, the last slot all values > 2**high."""
    low, high = frame
    width = frame.width
    n = len(counts)
    below = min(max(low + 1 - offset, 0), n)  # counts[:below] are in octaves <= low
    above = min(max(high + 1 - offset, 0), n)  # counts[above:] are in octaves > high
    slots = [0] * width
    slots[0] = zeros + sum(counts[:below])
    slots[-1] = sum(counts[above:])
    start = offset + below - low
    if below < above:
        slots[start : start + above - below] = counts[below:above]
    return slots


# Runs of zeros to pad a distribution's counts with, as lists (concatenated in C).
_ZEROS = [[0] * n for n in range(max(frame.width for frame in FRAMES.values()) + 1)]


def _slots(part: Part, name: str, frame: Frame) -> list[int]:
    """Every cell's distribution ``name`` per slot of ``frame`` (not cumulative), one
    cell after another: ``len(part.keys) * frame.width`` counts."""
    zeros, offsets, counts = part.zeros[name], part.offsets[name], part.counts[name]
    # The usual distribution lies within the frame: its zeros, 0 up to its first
    # octave, its counts, 0 up to the frame's top and for the slot above it, each
    # copied in as a list (a memcpy, where chaining them cost a step per count).
    lengths = list(map(len, counts))
    # (An empty one, whatever its offset, is its zeros and width - 1 zeros.)
    before = list(map(mul, map(sub, offsets, repeat(frame.low + 1)), map(bool, lengths)))
    after = list(map(sub, repeat(frame.width - 1), map(add, before, lengths)))
    slots: list[int] = []
    append, extend = slots.append, slots.extend
    if min(before) >= 0 and min(after) >= 1:
        for z, c, b, a in zip(zeros, counts, before, after, strict=True):
            append(z)
            extend(_ZEROS[b])
            extend(c)
            extend(_ZEROS[a])
        return slots
    # Values beyond the frame (a duration past 2^7 s is not rare): those cells framed
    # one by one.
    for z, o, c, b, a in zip(zeros, offsets, counts, before, after, strict=True):
        if b >= 0 and a >= 1:
            append(z)
            extend(_ZEROS[b])
            extend(c)
            extend(_ZEROS[a])
        else:
            extend(_framed(z, o, c, frame))
    return slots


def _frame(parts: list[Part], names: tuple[str, ...]) -> Frame:
    """The part of ``FRAMES[name]`` the parts' values of ``names`` reach: one octave
    below the lowest (counting nothing but the zeros), up to the highest."""
    widest = FRAMES[names[0]]
    lows: list[int] = []
    highs: list[int] = []
    for part in parts:
        for name in names:
            offsets, counts = part.offsets[name], part.counts[name]
            lengths = list(map(len, counts))
            if any(lengths):
                lows.append(min(compress(offsets, lengths)))
                highs.append(max(compress(map(add, offsets, lengths), lengths)))
    if not lows:
        return Frame(widest.low, widest.low)
    low = max(min(lows) - 1, widest.low)
    return Frame(low, max(min(max(highs) - 1, widest.high), low))


def _sum_columns(columns: list[Iterable[Any]]) -> list[Any]:
    # Left to right, as merging one part after another does: sums are floats.
    return list(reduce(partial(map, add), columns))


# Per (cells, width), the slices of each cell's slots in a column of them.
_cuts: dict[tuple[int, int], list[slice]] = {}


def _cut(n: int, width: int) -> list[slice]:
    cuts = _cuts.get((n, width))
    if cuts is None:
        if len(_cuts) > 64:
            _cuts.clear()
        cuts = _cuts[n, width] = [slice(i * width, (i + 1) * width) for i in range(n)]
    return cuts


def merged(parts: Sequence[Part]) -> Merged:
    """The parts summed key by key (keys sorted); see ``Merged``."""
    parts = [part for part in parts if part.keys]
    keys: list[CellKey] = sorted(set().union(*(part.keys for part in parts)))
    parts = [part if part.keys == keys else part.aligned(keys) for part in parts]
    if not parts:
        none: dict[str, list[Any]] = {name: [] for name in DISTRIBUTIONS}
        return Merged([], [], [], [], dict(FRAMES), dict(none), dict(none))
    frames: dict[str, Frame] = {}
    cumulative: dict[str, list[list[int]]] = {}
    for name in DISTRIBUTIONS:
        # Every part's slots, one cell after another, summed in one pass; then each
        # cell's run of them accumulated.
        if name not in frames:
            # The token distributions share one: the exposition writes them as one family.
            shared = _SHARED.get(name, (name,))
            frames.update(dict.fromkeys(shared, _frame(parts, shared)))
        frame = frames[name]
        summed = _sum_columns([_slots(part, name, frame) for part in parts])
        cuts = _cut(len(keys), frame.width)
        cumulative[name] = list(map(list, map(accumulate, map(summed.__getitem__, cuts))))
    return Merged(
        keys,
        _sum_columns([part.requests for part in parts]),
        _sum_columns([part.input_tokens for part in parts]),
        _sum_columns([part.output_tokens for part in parts]),
        frames,
        cumulative,
        {name: _sum_columns([part.sums[name] for part in parts]) for name in DISTRIBUTIONS},
    )


# -- octave-form documents ----------------------------------------------------------------


def _gathered(wire: Mapping[str, Any]) -> dict[str, Any]:
    # A keyed distribution of our own making (sorted canonical indexes) per power of two.
    per: dict[int, int] = {}
    for index, n in wire["counts"].items():
        octave = int(index) // SUB_BUCKETS
        per[octave] = per.get(octave, 0) + n
    if not per:
        return {"zeros": wire["zeros"], "sum": wire["sum"], "offset": 0, "counts": []}
    low = min(per)
    values = [0] * (max(per) - low + 1)
    for octave, n in per.items():
        values[octave - low] = n
    return {"zeros": wire["zeros"], "sum": wire["sum"], "offset": low, "counts": values}


def from_keyed(breakdown: Any, *, trusted: bool = False) -> list[dict[str, Any]]:
    """A version 1 breakdown (``Cell.to_wire``'s keyed counts) in the octave form;
    ``ValueError`` for anything ``Cell.from_wire`` refuses. ``trusted`` (this process's
    own, built in memory) skips those checks."""
    if type(breakdown) is not list:
        raise ValueError("a breakdown must be a list of cells")
    if trusted:
        return [
            {**wire, **{name: _gathered(wire[name]) for name in DISTRIBUTIONS}}
            for wire in breakdown
        ]
    result = []
    for wire in breakdown:
        (model, route, outcome), cell = Cell.from_wire(wire)
        result.append(
            {
                "model": model,
                "route": route,
                "outcome": outcome,
                "requests": cell.requests,
                "input_tokens": cell.input_tokens,
                "output_tokens": cell.output_tokens,
                **{name: getattr(cell, name).octaves() for name in DISTRIBUTIONS},
            }
        )
    return result


def _keyed(zeros: int, total: float, offset: int, counts: list[int]) -> dict[str, Any]:
    top = SUB_BUCKETS - 1
    return {
        "zeros": zeros,
        "sum": total,
        "counts": {str((offset + i) * SUB_BUCKETS + top): n for i, n in enumerate(counts) if n},
    }


def keyed(breakdown: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Octave-form cells in version 1's form (``Cell.to_wire``), each power of two's
    values in its last bucket (upper bound exactly that power): what a reader of
    version 1 reads, every power-of-two bound exact."""
    return [
        {
            **cell,
            **{
                name: _keyed(d["zeros"], d["sum"], d["offset"], d["counts"])
                for name in DISTRIBUTIONS
                for d in (cell[name],)
            },
        }
        for cell in breakdown
    ]


def _add_octaves(into: dict[str, Any], offset: int, counts: list[int]) -> None:
    if not counts:
        return
    mine = into["counts"]
    if not mine:
        into["offset"], into["counts"] = offset, list(counts)
        return
    low = min(into["offset"], offset)
    high = max(into["offset"] + len(mine), offset + len(counts))
    summed = [0] * (high - low)
    for start, values in ((into["offset"] - low, mine), (offset - low, counts)):
        summed[start : start + len(values)] = map(add, summed[start : start + len(values)], values)
    into["offset"], into["counts"] = low, summed


def summed(parts: Iterable[Part]) -> list[dict[str, Any]]:
    """The parts' cells summed key by key, as octave-form cells sorted by key (a state
    document's breakdown)."""
    result: dict[CellKey, dict[str, Any]] = {}
    for part in parts:
        for i, key in enumerate(part.keys):
            cell = result.get(key)
            if cell is None:
                cell = result[key] = {
                    "model": key[0],
                    "route": key[1],
                    "outcome": key[2],
                    "requests": 0,
                    "input_tokens": 0,
                    "output_tokens": 0,
                    **{
                        name: {"zeros": 0, "sum": 0.0, "offset": 0, "counts": []}
                        for name in DISTRIBUTIONS
                    },
                }
            cell["requests"] += part.requests[i]
            cell["input_tokens"] += part.input_tokens[i]
            cell["output_tokens"] += part.output_tokens[i]
            for name in DISTRIBUTIONS:
                into = cell[name]
                into["zeros"] += part.zeros[name][i]
                into["sum"] += part.sums[name][i]
                _add_octaves(into, part.offsets[name][i], part.counts[name][i])
    return [result[key] for key in sorted(result)]


def cells(part: Part) -> dict[CellKey, Cell]:
    """The part's cells as ``Cell`` objects, each power of two's values in its last
    bucket: ``count_at_most(2**e)``, counts and sums as the part has them."""
    top = SUB_BUCKETS - 1
    result: dict[CellKey, Cell] = {}
    for i, key in enumerate(part.keys):
        cell = Cell()
        cell.requests = part.requests[i]
        cell.input_tokens = part.input_tokens[i]
        cell.output_tokens = part.output_tokens[i]
        for name in DISTRIBUTIONS:
            distribution = Distribution()
            distribution.zeros = part.zeros[name][i]
            distribution.total = float(part.sums[name][i])
            offset = part.offsets[name][i]
            distribution.counts = {
                (offset + j) * SUB_BUCKETS + top: n for j, n in enumerate(part.counts[name][i]) if n
            }
            setattr(cell, name, distribution)
        result[key] = cell
    return result


def of_document(doc: Mapping[str, Any], *, trusted: bool = False) -> Part:
    """The breakdown of a state document of version 1 or ``VERSION``, checked: cells
    (``process_state``'s) or columns (a host file's, ``columns``), a version 1
    breakdown read into the octave form first."""
    if doc.get("version") == VERSION:
        breakdown = doc["breakdown"]
        if type(breakdown) is dict:
            return of_columns(breakdown)
        return checked(breakdown, trusted=trusted)
    return checked(from_keyed(doc["breakdown"]), trusted=True)
