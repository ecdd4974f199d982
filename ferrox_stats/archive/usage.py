"""Usage over time from the rollups: ``usage`` — what the usage API and pages will call.

``usage(since, until, bucket=..., group_by=..., filters=...)`` reads the rollups of
``[since, until)`` (widened to whole buckets, UTC) and answers, per bucket and group,
requests, token sums, errors, aborts by reason, and the latency distributions merged
bucket by bucket (never averaged percentiles): each percentile is a bucket midpoint
within ``RELATIVE_ERROR`` (1/64) of the nearest-rank percentile of the values. Minute
buckets read the minute rollups; hour and day buckets read the hour rollups (a day is
a UTC day). It costs O(rollup rows in the range), whatever the archive holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ..core.distribution import RELATIVE_ERROR
from ..core.rollup import TIMES, Tally

__all__ = ["BUCKETS", "DIMENSIONS", "PERCENTILES", "Usage", "UsageRow", "usage"]

BUCKETS = {"minute": 60, "hour": 3600, "day": 86400}
"""Bucket name -> width in seconds."""
DIMENSIONS = {
    "key": "via_api_key",
    "model": "model",
    "replica": "replica",
    "route": "route",
    "outcome": "outcome",
}
"""What a usage answer may be grouped and filtered by -> the rollup column."""
PERCENTILES = (50, 95, 99)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class UsageRow:
    """One bucket of one group: ``group`` holds the grouped dimensions' values (``None``
    for a record that had none), ``tally`` the sums (``core.rollup.Tally``; times in
    seconds), ``errors`` and ``aborted`` the requests of those outcomes."""

    bucket: datetime
    group: dict[str, str | None]
    tally: Tally = field(default_factory=Tally)
    errors: int = 0
    aborted: int = 0

    def latency(self) -> dict[str, dict[str, float | int | None]]:
        """Per distribution: how many values, and ``p50``/``p95``/``p99`` in seconds
        (``None`` when it holds none)."""
        result: dict[str, dict[str, float | int | None]] = {}
        for name in TIMES:
            distribution = getattr(self.tally, name)
            summary: dict[str, float | int | None] = {"count": distribution.count}
            for p in PERCENTILES:
                summary[f"p{p}"] = distribution.quantile(p)
            result[name] = summary
        return result

    def as_dict(self) -> dict[str, Any]:
        """The JSON-able form: bucket, group, counters, latency percentiles."""
        return {
            "bucket": self.bucket.isoformat(),
            **self.group,
            **self.tally.wire(),
            "errors": self.errors,
            "aborted": self.aborted,
            "latency": self.latency(),
        }


@dataclass
class Usage:
    """A usage answer: the whole buckets ``[since, until)`` it covers, ordered rows."""

    since: datetime
    until: datetime
    bucket: str
    group_by: tuple[str, ...]
    rows: list[UsageRow]
    relative_error: float = RELATIVE_ERROR


def _floor(moment: datetime, width_s: int) -> datetime:
    seconds = int((moment - _EPOCH).total_seconds() // width_s * width_s)
    return _EPOCH + timedelta(seconds=seconds)


def _ceil(moment: datetime, width_s: int) -> datetime:
    floor = _floor(moment, width_s)
    return floor if floor == moment else floor + timedelta(seconds=width_s)


def usage(
    since: datetime,
    until: datetime,
    *,
    bucket: str = "hour",
    group_by: Iterable[str] = (),
    filters: Mapping[str, str | None] | None = None,
    using: str | None = None,
) -> Usage:
    """Usage over ``[since, until)`` (aware datetimes) per ``bucket`` (minute, hour,
    day) and per combination of the ``group_by`` dimensions (any of ``DIMENSIONS``),
    restricted to ``filters`` (dimension -> value, ``None`` for "had none").
    ``ValueError`` for anything else. Rows are ordered by bucket, then group."""
    from ..models import Rollup

    if bucket not in BUCKETS:
        raise ValueError(f"bucket must be one of {sorted(BUCKETS)}, got {bucket!r}")
    grouped = tuple(dict.fromkeys(group_by))
    filters = dict(filters or {})
    for name in (*grouped, *filters):
        if name not in DIMENSIONS:
            raise ValueError(f"cannot group or filter by {name!r}: one of {sorted(DIMENSIONS)}")
    if since.tzinfo is None or until.tzinfo is None:
        raise ValueError("since and until must be aware datetimes")
    width = BUCKETS[bucket]
    start, end = _floor(since, width), _ceil(until, width)
    if start >= end:
        raise ValueError("since must be before until")
    rows = Rollup.objects.all() if using is None else Rollup.objects.using(using)
    rows = rows.filter(span_s=min(width, 3600), bucket__gte=start, bucket__lt=end)
    for name, value in filters.items():
        column = DIMENSIONS[name]
        rows = rows.filter(**({f"{column}__isnull": True} if value is None else {column: value}))
    columns = [DIMENSIONS[name] for name in grouped]
    cells: dict[tuple[datetime, tuple[str | None, ...]], UsageRow] = {}
    for values in rows.order_by().values_list(
        "bucket",
        "outcome",
        "requests",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "out_of_range",
        "aborts",
        "duration",
        "ttft",
        "tpot",
        *columns,
    ):
        moment, outcome = values[0], values[1]
        key = (_floor(moment, width), tuple(values[11:]))
        row = cells.get(key)
        if row is None:
            row = cells[key] = UsageRow(key[0], dict(zip(grouped, key[1], strict=True)))
        stored = Tally.stored(values[2:7], values[7:11])
        row.tally.merge(stored)
        if outcome == "error":
            row.errors += stored.requests
        elif outcome == "aborted":
            row.aborted += stored.requests
    ordered = [cells[key] for key in sorted(cells, key=_order)]
    return Usage(start, end, bucket, grouped, ordered)


def _order(key: tuple[datetime, tuple[str | None, ...]]) -> tuple[Any, ...]:
    # NULL labels first within a bucket, so the order is total.
    return (key[0], tuple((value is not None, value or "") for value in key[1]))
