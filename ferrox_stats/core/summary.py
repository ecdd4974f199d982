"""Summaries over finished requests: nearest-rank percentiles and means of present values.

Both return ``None`` when there is nothing to summarise: zero is a measurement,
absence is not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction


def nearest_rank(sorted_values: Sequence[float], percentile: float) -> float | None:
    """The nearest-rank ``percentile`` (0 < p <= 100) of values sorted ascending.

    Nearest rank never interpolates: the answer is always a value that was observed.
    """
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile!r}")
    if not sorted_values:
        return None
    # Exact arithmetic: in floats 7 / 100 * 100 is 7.000000000000001, whose ceiling
    # would pick the 8th value for p7 of 100.
    rank = math.ceil(Fraction(percentile).limit_denominator(1_000_000) * len(sorted_values) / 100)
    return sorted_values[max(rank, 1) - 1]


def percentiles(
    values: Iterable[float | None], wanted: Sequence[float] = (50, 95, 99)
) -> dict[float, float | None]:
    """Nearest-rank percentiles of the values that are present (``None`` is skipped)."""
    present = sorted(v for v in values if v is not None)
    return {p: nearest_rank(present, p) for p in wanted}


def mean_present(values: Iterable[float | None]) -> float | None:
    """The mean of the values that are present; ``None`` when none is."""
    total = 0.0
    count = 0
    for value in values:
        if value is not None:
            total += value
            count += 1
    return total / count if count else None
