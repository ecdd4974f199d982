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

Wire form (JSON): ``{"zeros": int, "sum": float, "counts": {"<index>": int, ...}}``;
``from_wire`` refuses anything a ``to_wire`` could not have produced. A ``Distribution``
is not thread-safe on its own: its owner (``Breakdown``) holds the lock.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

__all__ = [
    "MAX_COUNT",
    "MAX_INDEX",
    "MIN_INDEX",
    "RELATIVE_ERROR",
    "SUB_BUCKETS",
    "Distribution",
    "bucket_index",
    "bucket_lower",
    "bucket_midpoint",
    "bucket_upper",
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


class Distribution:
    """Counts of values >= 0 in fixed log-spaced buckets; see the module docstring.

    ``zeros`` counts the zeros, ``counts`` maps a bucket index to its count (no zero
    counts kept), ``total`` is the float sum of the values added.
    """

    __slots__ = ("counts", "total", "zeros")

    def __init__(self) -> None:
        self.zeros = 0
        self.counts: dict[int, int] = {}
        self.total = 0.0

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
            self.zeros += 1
            return
        m, e = _frexp(v)
        index = e * 32 + _ceil(m * 64) - 33
        counts = self.counts
        counts[index] = counts.get(index, 0) + 1

    def merge(self, other: Distribution) -> None:
        """Add ``other``'s counts to these, bucket by bucket (exact)."""
        total = self.total + other.total
        if total == _INF:
            raise ValueError("the merged sum would overflow")
        self.total = total
        self.zeros += other.zeros
        counts = self.counts
        for index, n in list(other.counts.items()):
            counts[index] = counts.get(index, 0) + n

    @classmethod
    def merged(cls, parts: Iterable[Distribution]) -> Distribution:
        """A new distribution of everything in ``parts``."""
        result = cls()
        for part in parts:
            result.merge(part)
        return result

    def copy(self) -> Distribution:
        """An independent copy."""
        result = Distribution()
        result.zeros = self.zeros
        result.counts = dict(self.counts)
        result.total = self.total
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
        rank = max(math.ceil(Fraction(percentile).limit_denominator(1_000_000) * count / 100), 1)
        seen = self.zeros
        if rank <= seen:
            return 0.0
        counts = self.counts
        for index in sorted(counts):
            seen += counts[index]
            if rank <= seen:
                return bucket_midpoint(index)
        raise AssertionError("unreachable: rank <= count")  # pragma: no cover

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
        return {
            "zeros": self.zeros,
            "sum": self.total,
            "counts": {str(index): n for index, n in sorted(self.counts.items())},
        }

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> Distribution:
        """The distribution ``wire`` describes; ``ValueError`` for anything ``to_wire``
        could not have produced (it may come from another process, or anyone)."""
        if not isinstance(wire, Mapping):
            raise ValueError(f"a distribution must be a mapping, got {type(wire).__name__}")
        for key in ("zeros", "sum", "counts"):
            if key not in wire:
                raise ValueError(f"a distribution needs {key!r}")
        result = cls()
        result.zeros = _count(wire["zeros"], "zeros")
        total = wire["sum"]
        if (
            isinstance(total, bool)
            or not isinstance(total, int | float)
            or not (isinstance(total, int) or math.isfinite(total))
            or not 0 <= total <= _FLOAT_MAX
        ):
            raise ValueError(f"sum must be a finite number >= 0, got {total!r}")
        result.total = float(total)
        counts = wire["counts"]
        if not isinstance(counts, Mapping):
            raise ValueError(f"counts must be a mapping, got {type(counts).__name__}")
        parsed: dict[int, int] = {}
        for key, n in counts.items():
            if not isinstance(key, str) or not _INDEX_KEY.fullmatch(key):
                raise ValueError(f"a bucket index must be a decimal integer, got {key!r}")
            index = int(key)
            if not MIN_INDEX <= index <= MAX_INDEX:
                raise ValueError(f"bucket index {index} is outside [{MIN_INDEX}, {MAX_INDEX}]")
            if _count(n, f"the count of bucket {index}"):
                parsed[index] = n
        result.counts = parsed
        if result.count > MAX_COUNT:
            raise ValueError(f"a distribution may hold at most {MAX_COUNT} values")
        return result

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
