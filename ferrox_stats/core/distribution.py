"""How values >= 0 are distributed, in fixed log-spaced buckets that merge exactly.

Every power of two ``[2**(e-1), 2**e]`` is split into ``SUB_BUCKETS`` (32) equal-width
buckets. Bucket ``i`` covers ``(lower(i), upper(i)]``: upper-inclusive like a Prometheus
``le`` bound, so every power of two (..., 0.25, 0.5, 1, 2, 4, ...) is an exact bound and
``count_at_most(2**k)`` is exact. A value is reported as its bucket's midpoint, off by
less than ``RELATIVE_ERROR`` (1/64, 1.5625 %) of itself. Zero is counted apart and
reported as exactly 0.

Because the buckets are the same in every process, two distributions merge by adding
their counts bucket by bucket: percentiles of a fleet come from merged distributions,
never from averaged percentiles. The index comes from ``math.frexp`` (no logarithm):

    m, e = frexp(v)          # v = m * 2**e, 0.5 <= m < 1
    i = e * 32 + ceil(m * 64) - 33

so bucket ``i = 32 * E + j`` (``0 <= j < 32``) covers
``(2**(E-1) * (32 + j) / 32, 2**(E-1) * (33 + j) / 32]``.

Three JSON forms, each read back by a checking constructor that refuses anything its
writer could not have produced:

- ``to_wire``/``from_wire``: ``{"zeros": int, "sum": float, "counts": {"<index>": int}}``;
- ``dense``/``from_dense``: ``{"zeros", "sum", "offset": int, "counts": [int, ...]}``,
  ``counts[i]`` the count of bucket ``offset + i`` (a JSON array decodes about 4 times
  faster than an object keyed by index);
- ``octaves``/``from_octaves``: the same shape, ``counts[i]`` the count of octave
  ``offset + i``: the values in ``(2**(offset+i-1), 2**(offset+i)]``, all the buckets
  ``b`` with ``b // 32 == offset + i``. Every power of two stays an exact bound (what a
  Prometheus exposition needs), each other bound is lost.

A ``Distribution`` is not thread-safe on its own: its owner (``Breakdown``) holds the lock.
"""

from __future__ import annotations

import math
import re
import sys
from array import array
from bisect import bisect_left, bisect_right

# The C tally behind ``Counter.update(iterable)``, into any dict (pure Python where the
# C module is missing): counts a batch's bucket indexes with no Python-level loop.
from collections import _count_elements  # type: ignore[attr-defined]
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from itertools import accumulate, repeat
from operator import add, rshift
from typing import Any

__all__ = [
    "MAX_COUNT",
    "MAX_INDEX",
    "MAX_OCTAVE",
    "MIN_INDEX",
    "MIN_OCTAVE",
    "RELATIVE_ERROR",
    "SUB_BUCKETS",
    "ZERO_INDEX",
    "Distribution",
    "bits_indices",
    "bucket_index",
    "bucket_lower",
    "bucket_midpoint",
    "bucket_upper",
    "checked_sorted",
    "int_indices",
    "sort_checked",
]

SUB_BUCKETS = 32
RELATIVE_ERROR = 1 / (2 * SUB_BUCKETS)
"""The most a reported value (its bucket's midpoint) is off, relative to the value."""

# The largest count one bucket (or ``zeros``) may claim on the wire: a producer's bug
# or an attack beyond it, not a measurement.
MAX_COUNT = 2**63 - 1

_frexp = math.frexp
_ceil = math.ceil
_INF = math.inf
_FLOAT_MAX = sys.float_info.max


def bucket_index(value: float) -> int:
    """The index of the bucket holding ``value`` (finite, > 0)."""
    m, e = _frexp(value)
    return e * 32 + _ceil(m * 64) - 33


MIN_INDEX = bucket_index(math.ulp(0.0))  # the smallest positive float (subnormal)
MAX_INDEX = bucket_index(_FLOAT_MAX)
MIN_OCTAVE = MIN_INDEX // SUB_BUCKETS
MAX_OCTAVE = MAX_INDEX // SUB_BUCKETS
_OCTAVE_SHIFT = 5  # index >> 5 == index // SUB_BUCKETS

_MIN_NORMAL = sys.float_info.min  # 2**-1022: below, a float has no implicit leading 1
# A normal float's IEEE 754 bits ``b`` (as an integer) hold its exponent and the first 5
# bits of its mantissa in ``b >> 47``: 32 equal steps per power of two, the lower bound
# included. Rounded up, ``(b + 2**47 - 1) >> 47`` includes the upper bound as a bucket
# does; the offset numbers it as ``bucket_index`` does (1.0 is in bucket 31).
_BITS_SHIFT = 47
_BITS_OFFSET = 2**47 - 1 - 32705 * 2**47
# From this many values on, the bits' C-level passes cost less than frexp on each.
_BITS_FROM = 16


def _sorted_indices(values: list[float]) -> list[int]:
    """``bucket_index`` of each of ``values`` (sorted, each > 0), ascending."""
    if len(values) >= _BITS_FROM and values[0] >= _MIN_NORMAL:
        bits = memoryview(array("d", values)).cast("B").cast("q")
        return list(map(rshift, map(add, bits, repeat(_BITS_OFFSET)), repeat(_BITS_SHIFT)))
    # bucket_index inlined: a function call per value would cost half as much again.
    return [e * 32 + _ceil(m * 64) - 33 for m, e in map(_frexp, values)]


ZERO_INDEX = (0 + _BITS_OFFSET) >> _BITS_SHIFT
"""What ``bits_indices`` gives for a zero (below any normal float's bucket)."""
_FIRST_NORMAL_INDEX = bucket_index(_MIN_NORMAL)


def bits_indices(values: list[float]) -> list[int] | None:
    """``bucket_index`` of each of ``values`` (each a number >= 0, in any order), in
    C-level passes over the floats' bits, ``ZERO_INDEX`` for a zero; None if one is
    subnormal or a -0.0 (for ``Distribution.add``, one at a time)."""
    if not values:
        return []
    bits = memoryview(array("d", values)).cast("B").cast("q")
    indices = list(map(rshift, map(add, bits, repeat(_BITS_OFFSET)), repeat(_BITS_SHIFT)))
    lowest = min(indices)
    if lowest < _FIRST_NORMAL_INDEX and (
        lowest != ZERO_INDEX or min(filter(None, values), default=_INF) < _MIN_NORMAL
    ):
        return None
    return indices


_SMALL_INTS = 2**15
_small_indices: list[int] = []


def int_indices(values: list[int]) -> list[int]:
    """``bits_indices`` of ints from 0 to 2**15 - 1 (the usual token counts), read from a
    table (about a quarter of the cost); ``IndexError`` for a larger one."""
    if not _small_indices:
        # The same int object for every value of a bucket: 256 KiB for the list.
        named: dict[int, int] = {}
        table = [named.setdefault(i, i) for i in bits_indices(list(range(_SMALL_INTS))) or ()]
        _small_indices[:] = table
    return list(map(_small_indices.__getitem__, values))


def _tally_octaves(octaves: dict[int, int], indices: list[int]) -> None:
    """Count ``indices`` (ascending, not empty) per octave in ``octaves``."""
    first, last = indices[0] >> _OCTAVE_SHIFT, indices[-1] >> _OCTAVE_SHIFT
    if first == last:
        octaves[first] = octaves.get(first, 0) + len(indices)
    elif len(indices) > 4 * (last - first):
        # Many values per octave: one binary search per octave.
        start = 0
        for octave in range(first, last + 1):
            end = bisect_left(indices, (octave + 1) << _OCTAVE_SHIFT, start)
            if end > start:
                octaves[octave] = octaves.get(octave, 0) + end - start
                start = end
    else:
        _count_elements(octaves, map(rshift, indices, repeat(_OCTAVE_SHIFT)))


def _octaves_of(counts: Mapping[int, int]) -> dict[int, int]:
    octaves: dict[int, int] = {}
    get = octaves.get
    for index, n in counts.items():
        octave = index // SUB_BUCKETS
        octaves[octave] = get(octave, 0) + n
    return octaves


def bucket_upper(index: int) -> float:
    """The bucket's upper bound (included); ``inf`` past the largest float."""
    octave, sub = divmod(index, SUB_BUCKETS)
    try:
        return math.ldexp(33 + sub, octave - 6)
    except OverflowError:
        return _INF


def bucket_lower(index: int) -> float:
    """The bucket's lower bound (excluded)."""
    octave, sub = divmod(index, SUB_BUCKETS)
    return math.ldexp(32 + sub, octave - 6)


def _rank(percentile: float, count: int) -> int:
    """The nearest rank of ``percentile`` among ``count`` values (at least 1), in exact
    arithmetic as ``summary.nearest_rank`` computes it (integers need no Fraction)."""
    if type(percentile) is int:
        return max(-(-percentile * count // 100), 1)
    return max(math.ceil(Fraction(percentile).limit_denominator(1_000_000) * count / 100), 1)


def bucket_midpoint(index: int) -> float:
    """The value reported for anything in the bucket."""
    octave, sub = divmod(index, SUB_BUCKETS)
    return math.ldexp(65 + 2 * sub, octave - 7)


# Canonical decimal integers only, so two keys never name one bucket ("01", "-0").
_INDEX_KEY = re.compile(r"0|-?[1-9][0-9]{0,5}")


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise ValueError(f"{what} must be an integer from 0 to {MAX_COUNT}, got {value!r}")
    return value


def checked_sorted(values: Iterable[float]) -> list[float]:
    """``values`` sorted, for ``Distribution.add_sorted``; ``ValueError`` unless each is a
    finite number >= 0 and their sum is finite."""
    try:
        ordered = list(values)
    except TypeError:
        raise ValueError("values must be finite numbers >= 0 with a finite sum") from None
    return sort_checked(ordered)


def sort_checked(ordered: list[float]) -> list[float]:
    """``checked_sorted`` for a list of one's own: sorted in place, and returned."""
    try:
        ordered.sort()
        # A NaN anywhere makes the sum NaN (and the sort meaningless); an infinity, or
        # an int too large for a float, makes it fail the comparison too.
        if ordered and not (ordered[0] >= 0 and float(sum(ordered)) < _INF):
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise ValueError("values must be finite numbers >= 0 with a finite sum") from None
    return ordered


def _parsed_counts(counts: Mapping[Any, Any]) -> dict[int, int]:
    """``counts`` of a wire form as ``{index: count}``, empty buckets left out."""
    keys = list(counts)
    values = list(counts.values())
    # The usual, well-formed case in C-level passes (a heartbeat carries thousands of
    # buckets, a scrape reads every process's); anything else is found, and named, below.
    try:
        indices = list(map(int, keys))
        well_formed = (
            # Canonical decimal strings only: int() also takes " 31", "+31", "3_1", 31.
            list(map(str, indices)) == keys
            and (not indices or (min(indices) >= MIN_INDEX and max(indices) <= MAX_INDEX))
            and set(map(type, values)) <= {int}
            and (not values or (min(values) >= 0 and max(values) <= MAX_COUNT))
        )
    except (TypeError, ValueError):
        well_formed = False
    if well_formed:
        parsed = dict(zip(indices, values, strict=True))
        return {i: n for i, n in parsed.items() if n} if 0 in values else parsed
    parsed = {}
    for key, n in counts.items():
        if not isinstance(key, str) or not _INDEX_KEY.fullmatch(key):
            raise ValueError(f"a bucket index must be a decimal integer, got {key!r}")
        index = int(key)
        if not MIN_INDEX <= index <= MAX_INDEX:
            raise ValueError(f"bucket index {index} is outside [{MIN_INDEX}, {MAX_INDEX}]")
        if _count(n, f"the count of bucket {index}"):
            parsed[index] = n
    return parsed


def _head(wire: Mapping[str, Any]) -> tuple[int, float]:
    """The checked ``zeros`` and ``sum`` of any of the forms."""
    if not isinstance(wire, Mapping):
        raise ValueError(f"a distribution must be a mapping, got {type(wire).__name__}")
    for key in ("zeros", "sum", "counts"):
        if key not in wire:
            raise ValueError(f"a distribution needs {key!r}")
    zeros = _count(wire["zeros"], "zeros")
    total = wire["sum"]
    if (
        isinstance(total, bool)
        or not isinstance(total, int | float)
        or not (isinstance(total, int) or math.isfinite(total))
        or not 0 <= total <= _FLOAT_MAX
    ):
        raise ValueError(f"sum must be a finite number >= 0, got {total!r}")
    return zeros, float(total)


def _listed(zeros: int, total: float, counts: Mapping[int, int]) -> dict[str, Any]:
    """The dense or octave form of ``counts`` (bucket or octave -> count)."""
    if not counts:
        return {"zeros": zeros, "sum": total, "offset": 0, "counts": []}
    low = min(counts)
    return {
        "zeros": zeros,
        "sum": total,
        "offset": low,
        "counts": list(map(counts.get, range(low, max(counts) + 1), repeat(0))),
    }


def _unlisted(
    wire: Mapping[str, Any], lowest: int, highest: int
) -> tuple[int, float, int, list[int]]:
    """The checked ``zeros``, ``sum``, ``offset`` and ``counts`` of a dense or octave
    form whose positions run from ``lowest`` to ``highest``."""
    zeros, total = _head(wire)
    offset, counts = wire.get("offset"), wire["counts"]
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise ValueError(f"offset must be an integer, got {offset!r}")
    if not isinstance(counts, list):
        raise ValueError(f"counts must be a list, got {type(counts).__name__}")
    if counts and not lowest <= offset <= offset + len(counts) - 1 <= highest:
        raise ValueError(
            f"counts from {offset}, {len(counts)} of them, leave [{lowest}, {highest}]"
        )
    # Well-formed in C-level passes; else the first bad count is found, and named.
    if counts and (set(map(type, counts)) != {int} or min(counts) < 0 or max(counts) > MAX_COUNT):
        for n in counts:
            _count(n, "a count")
    return zeros, total, offset, counts


class Distribution:
    """Counts of values >= 0 in fixed log-spaced buckets; see the module docstring.

    ``zeros`` counts the zeros, ``counts`` maps a bucket index to its count (no zero
    counts kept), ``total`` is the float sum of the values added. Change them through the
    methods only: a distribution keeps its counts per power of two too, once asked for
    them (``octaves``), so that a heartbeat reads them without a pass over every bucket.
    """

    __slots__ = ("_octaves", "_tee", "counts", "total", "zeros")

    def __init__(self) -> None:
        self.zeros = 0
        self.counts: dict[int, int] = {}
        self.total = 0.0
        # Counts per octave (bucket index // 32), kept from the first ``octaves()`` on.
        self._octaves: dict[int, int] | None = None
        self._tee: Distribution | None = None

    # -- feeding ---------------------------------------------------------------------

    def add(self, value: float) -> None:
        """Count ``value``: a finite number >= 0, else ``ValueError``."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"value must be a finite number >= 0, got {value!r}")
        try:
            v = float(value)
        except OverflowError:  # an int too large for a float
            raise ValueError(f"value must be a finite number >= 0, got {value!r}") from None
        if not 0.0 <= v < _INF:
            raise ValueError(f"value must be a finite number >= 0, got {value!r}")
        total = self.total + v
        if total == _INF:
            raise ValueError(f"the sum would overflow adding {value!r}")
        self.total = total
        if v == 0.0:
            self._tally(1, [])
            return
        self._tally(0, [bucket_index(v)])

    def add_many(self, values: Iterable[float]) -> None:
        """Count every one of ``values`` (each as ``add`` would), or none of them."""
        self.add_sorted(checked_sorted(values))

    def add_sorted(self, ordered: list[float]) -> None:
        """Count values that ``checked_sorted`` returned. Cheaper per value than ``add``
        for many at once: the bucket indexes come in C-level passes where there are
        enough of them, and are tallied in C."""
        n = len(ordered)
        if not n:
            return
        total = self.total + float(sum(ordered))
        if total == _INF:
            raise ValueError("the sum would overflow")
        self.total = total
        zeros = bisect_right(ordered, 0.0) if ordered[0] == 0 else 0
        self._tally(zeros, _sorted_indices(ordered[zeros:] if zeros else ordered))

    def add_counted(self, total: float, zeros: int, indices: list[int]) -> None:
        """Count values already bucketed: ``zeros`` zeros and one value in each bucket
        of ``indices`` (in any order; ``bits_indices`` gives them), whose sum is
        ``total``. What ``Breakdown`` folds a batch with: the indexes of all its cells'
        values come in one pass, each cell's slice counted here."""
        total = self.total + total
        if total == _INF:
            raise ValueError("the sum would overflow")
        self.total = total
        # _tally written out (the fold calls this per cell and distribution), and the
        # octaves by a C tally of the shifted indexes: they are not sorted.
        target: Distribution | None = self
        while target is not None:
            target.zeros += zeros
            _count_elements(target.counts, indices)
            if target._octaves is not None and indices:
                _count_elements(target._octaves, map(rshift, indices, repeat(_OCTAVE_SHIFT)))
            target = target._tee

    def _tally(self, zeros: int, indices: list[int]) -> None:
        """Count ``zeros`` zeros and a value in each bucket of ``indices`` (ascending;
        the sum is the caller's), here and in the distribution this one tees into."""
        self.zeros += zeros
        _count_elements(self.counts, indices)
        if self._octaves is not None and indices:
            _tally_octaves(self._octaves, indices)
        if self._tee is not None:
            self._tee._tally(zeros, indices)

    def tee(self, into: Distribution) -> None:
        """From now on, count whatever this distribution counts in ``into`` too (its
        zeros and buckets, not its sum), starting with what it holds now: how a
        ``Breakdown`` keeps its cells' time distributions merged without merging them
        again and again. Nothing to do if it already tees into ``into``; ``ValueError``
        if into another."""
        if self._tee is into:
            return
        if self._tee is not None:
            raise ValueError("this distribution already tees into another")
        target: Distribution | None = into
        while target is not None:
            if target is self:
                raise ValueError("a distribution cannot tee into itself")
            target = target._tee
        into._merge_counts(self)
        self._tee = into

    def merge(self, other: Distribution) -> None:
        """Add ``other``'s counts to these, bucket by bucket (exact)."""
        total = self.total + other.total
        if total == _INF:
            raise ValueError("the merged sum would overflow")
        self.total = total
        self._merge_counts(other)

    def _merge_counts(self, other: Distribution) -> None:
        if other is self:  # what is added, before adding it (the tee gets it too)
            other = other.copy()
        self.zeros += other.zeros
        counts = self.counts
        if not counts:
            self.counts = dict(other.counts)
        else:
            for index, n in list(other.counts.items()):
                counts[index] = counts.get(index, 0) + n
        if self._octaves is not None:
            if other._octaves is None:
                self._octaves = None  # counted again when next asked for
            else:
                octaves = self._octaves
                for octave, n in list(other._octaves.items()):
                    octaves[octave] = octaves.get(octave, 0) + n
        if self._tee is not None:
            self._tee._merge_counts(other)

    def merge_buckets(
        self, zeros: int, total: float, indices: Sequence[int], counts: Sequence[int]
    ) -> None:
        """Add ``zeros`` zeros and ``counts[i]`` values in each bucket ``indices[i]``
        (distinct), whose sum is ``total``: ``merge`` of a distribution that held them,
        without making one (``core.rollup.merge_stored``)."""
        merged_total = self.total + total
        if merged_total == _INF:
            raise ValueError("the merged sum would overflow")
        self.total = merged_total
        target: Distribution | None = self
        while target is not None:  # here, and where this one tees into
            target.zeros += zeros
            buckets = target.counts
            if not buckets:
                target.counts = dict(zip(indices, counts, strict=True))
            else:
                get = buckets.get
                for index, n in zip(indices, counts, strict=True):
                    buckets[index] = get(index, 0) + n
            target._octaves = None  # counted again when next asked for
            target = target._tee

    @classmethod
    def merged(cls, parts: Iterable[Distribution]) -> Distribution:
        """A new distribution of everything in ``parts``."""
        result = cls()
        for part in parts:
            result.merge(part)
        return result

    def copy(self) -> Distribution:
        """An independent copy (teeing into nothing)."""
        result = Distribution()
        result.zeros = self.zeros
        result.counts = dict(self.counts)
        result.total = self.total
        if self._octaves is not None:
            result._octaves = dict(self._octaves)
        return result

    # -- reading ---------------------------------------------------------------------

    @property
    def count(self) -> int:
        """How many values were added."""
        return self.zeros + sum(self.counts.values())

    def quantile(self, percentile: float) -> float | None:
        """The nearest-rank ``percentile`` (0 < p <= 100), as its bucket's midpoint.

        Within ``RELATIVE_ERROR`` of what ``core.summary.nearest_rank`` gives over the
        values themselves; ``None`` when nothing was added.
        """
        if not 0 < percentile <= 100:
            raise ValueError(f"percentile must be in (0, 100], got {percentile!r}")
        count = self.count
        if not count:
            return None
        # Exact arithmetic, as in ``summary.nearest_rank``.
        rank = _rank(percentile, count)
        seen = self.zeros
        if rank <= seen:
            return 0.0
        counts = self.counts
        for index in sorted(counts):
            seen += counts[index]
            if rank <= seen:
                return bucket_midpoint(index)
        raise AssertionError("unreachable: rank <= count")  # pragma: no cover

    def quantiles(self, percentiles: Sequence[float]) -> list[float | None]:
        """``quantile`` of each of ``percentiles``, from one pass over the buckets."""
        for percentile in percentiles:
            if not 0 < percentile <= 100:
                raise ValueError(f"percentile must be in (0, 100], got {percentile!r}")
        count = self.count
        if not count:
            return [None] * len(percentiles)
        zeros, counts = self.zeros, self.counts
        indices = sorted(counts)
        # The running count at each bucket (C-level passes), then each rank's bucket
        # by bisection: a few microseconds however many buckets are filled.
        running = list(accumulate(map(counts.__getitem__, indices), initial=zeros))
        result: list[float | None] = []
        for percentile in percentiles:
            at = bisect_left(running, _rank(percentile, count))
            result.append(0.0 if at == 0 else bucket_midpoint(indices[at - 1]))
        return result

    def count_at_most(self, bound: float) -> int:
        """How many values are in buckets whose upper bound is <= ``bound``.

        Exactly the values <= ``bound`` when it is a bucket bound, as every power of two
        is; for any other bound, the bucket it falls in is left out (never an overcount).
        """
        if math.isnan(bound):
            raise ValueError("bound must be a number, got nan")
        if bound < 0:
            return 0
        if bound >= _FLOAT_MAX:
            return self.count
        last = self.zeros
        if bound == 0:
            return last
        top = bucket_index(bound)
        if bucket_upper(top) != bound:
            top -= 1
        return last + sum(n for index, n in self.counts.items() if index <= top)

    def buckets(self) -> list[tuple[float, int]]:
        """``(upper bound, count)`` of each non-empty bucket, ascending; zeros as ``(0.0, n)``."""
        result = [(0.0, self.zeros)] if self.zeros else []
        result.extend((bucket_upper(i), self.counts[i]) for i in sorted(self.counts))
        return result

    # -- the wire --------------------------------------------------------------------

    def to_wire(self) -> dict[str, Any]:
        """The JSON-able form; ``from_wire`` reads it back."""
        indices = sorted(self.counts)
        return {
            "zeros": self.zeros,
            "sum": self.total,
            "counts": dict(
                zip(map(str, indices), map(self.counts.__getitem__, indices), strict=True)
            ),
        }

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> Distribution:
        """The distribution ``wire`` describes; ``ValueError`` for anything ``to_wire``
        could not have produced (it may come from another process, or anyone)."""
        result = cls()
        result.zeros, result.total = _head(wire)
        counts = wire["counts"]
        if not isinstance(counts, Mapping):
            raise ValueError(f"counts must be a mapping, got {type(counts).__name__}")
        result.counts = _parsed_counts(counts)
        result._check_count()
        return result

    def octaves(self) -> dict[str, Any]:
        """The octave form (module docstring): ``count``, ``total``, ``zeros`` and
        ``count_at_most(2**k)`` for every ``k`` as here; ``from_octaves`` reads it."""
        octaves = self._octaves
        if octaves is None:
            octaves = self._octaves = _octaves_of(self.counts)
        return _listed(self.zeros, self.total, octaves)

    def dense(self) -> dict[str, Any]:
        """The dense form (module docstring), at full resolution; ``from_dense`` reads it."""
        return _listed(self.zeros, self.total, self.counts)

    @classmethod
    def from_dense(cls, wire: Mapping[str, Any]) -> Distribution:
        """The distribution a ``dense()`` form describes; ``ValueError`` for anything
        ``dense`` could not have produced."""
        result = cls()
        result.zeros, result.total, offset, counts = _unlisted(wire, MIN_INDEX, MAX_INDEX)
        result.counts = {offset + i: n for i, n in enumerate(counts) if n}
        result._check_count()
        return result

    @classmethod
    def from_octaves(cls, wire: Mapping[str, Any]) -> Distribution:
        """The distribution an ``octaves()`` form describes, each octave's count in its
        last bucket (upper bound ``2**octave``); ``ValueError`` for anything ``octaves``
        could not have produced."""
        result = cls()
        result.zeros, result.total, offset, counts = _unlisted(wire, MIN_OCTAVE, MAX_OCTAVE)
        top = SUB_BUCKETS - 1
        result.counts = {(offset + i) * SUB_BUCKETS + top: n for i, n in enumerate(counts) if n}
        result._octaves = {offset + i: n for i, n in enumerate(counts) if n}
        result._check_count()
        return result

    def _check_count(self) -> None:
        if self.count > MAX_COUNT:
            raise ValueError(f"a distribution may hold at most {MAX_COUNT} values")

    # -- comparing -------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Distribution):
            return NotImplemented
        return (
            self.zeros == other.zeros and self.counts == other.counts and self.total == other.total
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"<Distribution count={self.count} sum={self.total!r}>"
