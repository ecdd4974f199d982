"""Usage over time from the rollups: ``usage`` — what the usage API and pages will call.

``usage(since, until, bucket=..., group_by=..., filters=...)`` reads the rollups of
``[since, until)`` (widened to whole buckets, UTC) and answers, per bucket and group,
requests, token sums, errors, aborts by reason, and the latency distributions merged
bucket by bucket (never averaged percentiles): each percentile is a bucket midpoint
within ``RELATIVE_ERROR`` (1/64) of the nearest-rank percentile of the values. Minute
buckets read the minute rollups; hour and day buckets read the hour rollups (a day is
a UTC day). It costs O(rollup rows in the range), whatever the archive holds.

Cost (``core.prices``): each rollup row's token sums are priced at its model's price in
force at the row's bucket (a price takes effect on a whole hour, so every row has one);
a row whose model has no price adds its requests to ``unpriced_requests`` and nothing
to ``cost``, which stays ``None`` while no row of the group had a price. A request
archived without token counts adds no tokens to the sums it is priced by.
``replica_cost`` is what the replicas' hourly costs come to over the buckets in which
they archived at least one request (an hour each, or a minute's share of it at minute
buckets). It is a cost of the replicas, not of keys, models, routes or outcomes, so it
is given only when the answer is grouped and filtered by nothing but ``replica`` (and
``None`` otherwise, never a guessed share).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ..core.distribution import RELATIVE_ERROR
from ..core.prices import HOUR_MS, PriceBook
from ..core.rollup import TIMES, Tally
from .export import Echo

__all__ = [
    "BUCKETS",
    "DIMENSIONS",
    "PERCENTILES",
    "TOP_METRICS",
    "TooManyRows",
    "Usage",
    "UsageRow",
    "csv_lines",
    "top",
    "usage",
]

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
    cost: float | None = None
    unpriced_requests: int = 0
    replica_cost: float | None = None

    def add(self, other: UsageRow) -> None:
        """Sum ``other`` into this row (the group's total over several buckets)."""
        self.tally.merge(other.tally)
        self.errors += other.errors
        self.aborted += other.aborted
        self.unpriced_requests += other.unpriced_requests
        self.cost = _plus(self.cost, other.cost)
        self.replica_cost = _plus(self.replica_cost, other.replica_cost)

    def latency(self) -> dict[str, dict[str, float | int | None]]:
        """Per distribution (``duration_s``, ``ttft_s``, ``tpot_s``): how many values,
        and ``p50``/``p95``/``p99`` in seconds (``None`` when it holds none)."""
        result: dict[str, dict[str, float | int | None]] = {}
        for name in TIMES:
            distribution = getattr(self.tally, name)
            summary: dict[str, float | int | None] = {"count": distribution.count}
            for p in PERCENTILES:
                summary[f"p{p}"] = distribution.quantile(p)
            result[f"{name}_s"] = summary
        return result

    def as_dict(self) -> dict[str, Any]:
        """The JSON-able form: bucket, group, counters, latency percentiles."""
        return {
            "bucket": self.bucket.isoformat(),
            "bucket_ms": epoch_ms(self.bucket),
            **self.group,
            **self.tally.wire(),
            "errors": self.errors,
            "aborted": self.aborted,
            "cost": self.cost,
            "unpriced_requests": self.unpriced_requests,
            "replica_cost": self.replica_cost,
            "latency": self.latency(),
        }


def _plus(a: float | None, b: float | None) -> float | None:
    """A sum where None is "nothing priced", not 0."""
    if a is None:
        return b
    return a if b is None else a + b


@dataclass
class Usage:
    """A usage answer: the whole buckets ``[since, until)`` it covers, ordered rows."""

    since: datetime
    until: datetime
    bucket: str
    group_by: tuple[str, ...]
    rows: list[UsageRow]
    relative_error: float = RELATIVE_ERROR
    # Whether ``replica_cost`` was computed (grouped and filtered by replica at most).
    replica_costed: bool = False

    def totals(self) -> list[UsageRow]:
        """Per group, its rows summed over the whole range (``bucket`` is ``since``),
        in the rows' group order."""
        groups: dict[tuple[str | None, ...], UsageRow] = {}
        for row in self.rows:
            key = tuple(row.group.values())
            total = groups.get(key)
            if total is None:
                total = groups[key] = UsageRow(self.since, dict(row.group))
            total.add(row)
        return [groups[key] for key in sorted(groups, key=_group_order)]


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
    prices: PriceBook | None = None,
    max_rows: int | None = None,
    per_bucket: bool = True,
    using: str | None = None,
) -> Usage:
    """Usage over ``[since, until)`` (aware datetimes) per ``bucket`` (minute, hour,
    day) and per combination of the ``group_by`` dimensions (any of ``DIMENSIONS``),
    restricted to ``filters`` (dimension -> value, ``None`` for "had none"), priced
    by ``prices``. ``ValueError`` for anything else, and ``TooManyRows`` when the
    answer would hold more than ``max_rows`` rows. Rows are ordered by bucket, then
    group. ``per_bucket=False`` sums each group over the whole range instead (one row
    per group, its ``bucket`` the range's start)."""
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
    if max_rows is not None and per_bucket:
        buckets = (end - start).total_seconds() // width
        if buckets > max_rows:
            raise TooManyRows(int(buckets), max_rows)
    prices = prices or PriceBook()
    replica_costed = prices.prices_replicas and {*grouped, *filters} <= {"replica"}
    columns = [DIMENSIONS[name] for name in grouped]
    cells: dict[tuple[datetime, tuple[str | None, ...]], UsageRow] = {}
    # Each (replica, rollup bucket) is costed once, however many groups it holds.
    replica_buckets: set[tuple[str, datetime]] = set()
    share = 1.0 if width >= 3600 else width / 3600
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
        "model",
        "replica",
        *columns,
    ):
        moment, outcome, model, replica = values[0], values[1], values[11], values[12]
        key = (_floor(moment, width) if per_bucket else start, tuple(values[13:]))
        row = cells.get(key)
        if row is None:
            if max_rows is not None and len(cells) >= max_rows:
                raise TooManyRows(len(cells) + 1, max_rows)
            row = cells[key] = UsageRow(key[0], dict(zip(grouped, key[1], strict=True)))
        stored = Tally.stored(values[2:7], values[7:11])
        row.tally.merge(stored)
        if outcome == "error":
            row.errors += stored.requests
        elif outcome == "aborted":
            row.aborted += stored.requests
        at_ms = epoch_ms(moment)
        cost = prices.token_cost(
            model, at_ms, stored.prompt_tokens, stored.completion_tokens, stored.cached_tokens
        )
        if cost is None:
            row.unpriced_requests += stored.requests
        else:
            row.cost = _plus(row.cost, cost)
        if replica_costed and (replica, moment) not in replica_buckets:
            replica_buckets.add((replica, moment))
            hourly = prices.hourly(replica, at_ms - at_ms % HOUR_MS)
            if hourly is not None:
                row.replica_cost = _plus(row.replica_cost, hourly * share)
    ordered = [cells[key] for key in sorted(cells, key=_order)]
    return Usage(start, end, bucket, grouped, ordered, replica_costed=replica_costed)


class TooManyRows(ValueError):
    """A usage answer would hold more rows than its cap."""

    def __init__(self, rows: int, most: int) -> None:
        super().__init__(
            f"the answer would hold more than {most} rows (buckets x groups; "
            f"{rows} reached): ask for a shorter range, a wider bucket or fewer groups"
        )


def epoch_ms(moment: datetime) -> int:
    """An aware datetime on a whole second as epoch milliseconds."""
    return int((moment - _EPOCH).total_seconds()) * 1000


def _group_order(group: tuple[str | None, ...]) -> tuple[Any, ...]:
    # NULL labels first, so the order is total.
    return tuple((value is not None, value or "") for value in group)


def _order(key: tuple[datetime, tuple[str | None, ...]]) -> tuple[Any, ...]:
    return (key[0], _group_order(key[1]))


# -- the top groups and CSV ---------------------------------------------------------------

TOP_METRICS = (
    "requests",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "total_tokens",
    "errors",
    "aborted",
    "cost",
)
"""What ``top`` may rank groups by (``total_tokens`` is prompt plus completion)."""


def metric(row: UsageRow, name: str) -> float | int | None:
    """``row``'s value of one of ``TOP_METRICS``."""
    if name == "total_tokens":
        return row.tally.prompt_tokens + row.tally.completion_tokens
    if name in ("errors", "aborted", "cost"):
        value: float | int | None = getattr(row, name)
        return value
    tallied: int = getattr(row.tally, name)
    return tallied


def top(totals: list[UsageRow], by_metric: str, limit: int) -> list[UsageRow]:
    """The ``limit`` groups of ``totals`` with the most ``by_metric``, most first (a
    group without a value, such as no cost, after every group with one)."""
    if by_metric not in TOP_METRICS:
        raise ValueError(f"metric must be one of {', '.join(TOP_METRICS)}, got {by_metric!r}")
    ranked = sorted(
        totals,
        key=lambda row: (metric(row, by_metric) is None, -(metric(row, by_metric) or 0)),
    )
    return ranked[:limit]


CSV_COUNTERS = (
    "requests",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "out_of_range",
    "errors",
    "aborted",
    "aborts",
    "cost",
    "unpriced_requests",
    "replica_cost",
)


def csv_columns(group_by: Iterable[str]) -> list[str]:
    """The header of ``csv_lines``: the bucket, the groups, the counters, then each
    distribution's count and percentiles (``duration_s_p50``...)."""
    latency = [
        f"{name}_s_{part}" for name in TIMES for part in ("count", *(f"p{p}" for p in PERCENTILES))
    ]
    return ["bucket", "bucket_ms", *group_by, *CSV_COUNTERS, *latency]


def csv_lines(answer: Usage) -> Iterator[str]:
    """The answer's rows as CSV, a header first: empty for None, the abort reasons as
    compact JSON, floats in their shortest round-trip form."""
    writer = csv.writer(Echo())
    yield writer.writerow(csv_columns(answer.group_by))
    for row in answer.rows:
        wire = row.as_dict()
        cells: list[Any] = [wire["bucket"], wire["bucket_ms"], *row.group.values()]
        for name in CSV_COUNTERS:
            value = wire[name]
            cells.append(json.dumps(value, sort_keys=True) if name == "aborts" else value)
        for summary in wire["latency"].values():
            cells.extend(summary.values())
        yield writer.writerow(["" if value is None else value for value in cells])
