"""Usage over time from the rollups: ``usage`` — what the usage API and pages will call.

``usage(since, until, bucket=..., group_by=..., filters=...)`` reads the rollups of
``[since, until)`` (widened to whole buckets, UTC) and answers, per bucket and group,
requests, token sums, errors, aborts by reason, and the latency distributions merged
bucket by bucket (never averaged percentiles): each percentile is a bucket midpoint
within ``RELATIVE_ERROR`` (1/64) of the nearest-rank percentile of the values. Minute
buckets read the minute rollups, hour buckets the hour rollups, day buckets (UTC days)
the merged levels' day rows or every group's hour rows. It costs O(rollup rows in the
range), whatever the archive holds; and each step reads the coarsest rollup level that
keeps what it groups and filters by (``rollups.LEVELS``): an answer by one label (model,
key, replica, route or outcome), or by nothing, reads a row per value of it or per
bucket, not every group's, and at hour and day buckets their stored percentiles (no
distribution parsed), its totals' distributions merged from the range's whole days and
the hours at either end (``_merged_over``). Grouped or filtered by two labels or more,
it reads every group's rows, and merges their distributions in Python. Its counters
read the same level, or, priced (a price is a model's), the level that keeps the label
and the model (``rollups.COUNTED_LEVELS``): a row per (value, model), not every
group's. At minute and hour buckets they are read apart: the counters from the
label's level, the cost alone from the label and the model's.

Cost (``core.prices``): the database prices each rollup row's token sums at its model's
price in force at the row's bucket (a price takes effect on a whole hour, so every hour
row has one; a day bucket reads the hour rows of the days in which a price changes,
the day rows of the others), found by
a join to the price table (``_priced_sums``; the ORM's ``CASE`` on other databases);
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
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property, reduce
from operator import add, itemgetter
from typing import Any

from django.db import connections
from django.db.models import BigIntegerField, Case, F, FloatField, Min, Q, Sum, Value, When
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Greatest, Least

from ..core.distribution import RELATIVE_ERROR
from ..core.prices import PER_TOKENS, PriceBook
from ..core.rollup import KNOWN_ABORTS, TIMES, Tally, merge_stored
from .export import Echo
from .fold import fold_abandoned
from .rollups import ABORT_COLUMNS, COUNTED_LEVELS, COUNTERS, DAY, LEVELS, PERCENTILES
from .rows import at_ms_to_datetime

__all__ = [
    "BUCKETS",
    "CELL_INTS",
    "DIMENSIONS",
    "PERCENTILES",
    "TOP_METRICS",
    "Cells",
    "TooManyRows",
    "Usage",
    "UsageRow",
    "bucket_start",
    "csv_lines",
    "summaries",
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
_SUMMED = COUNTERS  # the counters loop below unpacks the sums in this order
_TIME_AT = {name: at for at, name in enumerate(TIMES)}  # in a stored percentiles text
SUMMARY_KEYS = ("count", *(f"p{p}" for p in PERCENTILES))
"""A latency summary's keys, in the wire's order."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class UsageRow(Tally):
    """One bucket of one group, and its sums (a ``core.rollup.Tally``, times in
    seconds; ``tally`` is the row itself): ``group`` holds the grouped dimensions'
    values (``None`` for a record that had none), ``errors`` and ``aborted`` the
    requests of those outcomes. What ``Usage.rows`` and ``Usage.totals`` give; an
    answer holds its cells as ``Cells`` (columns), and makes its rows when read."""

    __slots__ = ("bucket", "cost", "group", "percentiles", "replica_cost", "unpriced_requests")

    def __init__(self, bucket: datetime, group: dict[str, str | None]) -> None:
        super().__init__()
        self.bucket = bucket
        self.group = group
        self.cost: float | None = None
        self.unpriced_requests = 0
        self.replica_cost: float | None = None
        # The percentiles a merged level's row stored (``rollups.percentiles_text``),
        # given instead of the tally's: kept as text until read (a string is no object
        # the garbage collector walks; thousands of rows' parsed lists would be).
        self.percentiles: str | None = None

    @property
    def tally(self) -> Tally:
        """The row's sums: the row itself."""
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, UsageRow):
            return NotImplemented
        mine = (self.bucket, self.group, self.cost, self.unpriced_requests)
        theirs = (other.bucket, other.group, other.cost, other.unpriced_requests)
        return (
            mine == theirs
            and (self.replica_cost, self.percentiles) == (other.replica_cost, other.percentiles)
            and Tally.__eq__(self, other) is True
        )

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        return f"<UsageRow {self.bucket.isoformat()} {self.group} requests={self.requests}>"

    def add_row(self, other: UsageRow) -> None:
        """Sum ``other`` into this row (the group's total over several buckets)."""
        self.merge(other)
        self.unpriced_requests += other.unpriced_requests
        self.cost = _plus(self.cost, other.cost)
        self.replica_cost = _plus(self.replica_cost, other.replica_cost)

    def summaries(self, names: Iterable[str] = TIMES) -> list[tuple[float | int | None, ...]]:
        """Per distribution of ``names``: how many values, then its ``PERCENTILES`` in
        seconds (``None`` when it holds none)."""
        return _summaries(self.percentiles, self, names)

    def latency(self, names: Iterable[str] = TIMES) -> dict[str, dict[str, float | int | None]]:
        """Per distribution of ``names`` (as ``duration_s``, ``ttft_s``, ``tpot_s``): how
        many values, and ``p50``/``p95``/``p99`` in seconds (``None`` when it holds none)."""
        names = tuple(names)
        return {
            f"{name}_s": dict(zip(SUMMARY_KEYS, summary, strict=True))
            for name, summary in zip(names, self.summaries(names), strict=True)
        }

    def as_dict(self, latency: Iterable[str] = TIMES) -> dict[str, Any]:
        """The JSON-able form: bucket, group, counters, the ``latency`` distributions'
        percentiles."""
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
            "latency": self.latency(latency),
        }


def _summaries(
    percentiles: str | None, tally: Tally | None, names: Iterable[str]
) -> list[tuple[float | int | None, ...]]:
    """``UsageRow.summaries`` of a cell: its stored ``percentiles`` if any, else its
    ``tally``'s distributions (None: empty)."""
    stored = json.loads(percentiles) if percentiles else None
    result: list[tuple[float | int | None, ...]] = []
    for name in names:
        if stored is not None:
            result.append(tuple(stored[_TIME_AT[name]]))
        else:
            distribution = getattr(tally or Tally(), name)
            result.append((distribution.count, *distribution.quantiles(PERCENTILES)))
    return result


def summaries(
    cells: Cells, index: int, names: Iterable[str] = TIMES
) -> list[tuple[float | int | None, ...]]:
    """``UsageRow.summaries`` of cell ``index``."""
    return _summaries(cells.percentiles[index], cells.tallies[index], names)


def _plus(a: float | None, b: float | None) -> float | None:
    """A sum where None is "nothing priced", not 0."""
    if a is None:
        return b
    return a if b is None else a + b


CELL_INTS = (*COUNTERS[: -len(ABORT_COLUMNS)], "unpriced_requests")
"""A cell's integer sums (a rollup's counters but the known abort reasons, which are
in ``aborts``): ``Cells``' columns of ints, ``UsageRow``'s attributes."""
_CELL_COSTS = ("cost", "replica_cost")


class Cells:
    """An answer's cells as columns: a list per value, a cell's index the same in each
    (``at_s`` its bucket's start in epoch seconds, ``group`` its labels in the order
    grouped by, ``aborts`` its abort reasons or None, ``percentiles`` the text a merged
    level stored or None, ``tallies`` the distributions merged in Python or None).

    Not an object per cell: an answer of 3 600 cells made 3 600 objects the garbage
    collector tracks; they outlived two collections, so reached its oldest
    generation, which Python collects whole once it has grown by a quarter. About one
    answer in seven paid a full collection of the process, 40-70 ms (docs/benchmarks.md,
    "Usage API, seventh pass"). A list is one tracked object however long, and the
    ints, floats, strings, None and dicts of counts it holds are not tracked at all."""

    __slots__ = ("at_s", "group", *CELL_INTS, "aborts", *_CELL_COSTS, "percentiles", "tallies")

    def __init__(self) -> None:
        self.at_s: list[int] = []
        self.group: list[tuple[str | None, ...]] = []
        # CELL_INTS:
        self.requests: list[int] = []
        self.prompt_tokens: list[int] = []
        self.completion_tokens: list[int] = []
        self.cached_tokens: list[int] = []
        self.out_of_range: list[int] = []
        self.errors: list[int] = []
        self.aborted: list[int] = []
        self.unpriced_requests: list[int] = []
        self.aborts: list[dict[str, int] | None] = []
        self.cost: list[float | None] = []
        self.replica_cost: list[float | None] = []
        self.percentiles: list[str | None] = []
        self.tallies: list[Tally | None] = []

    def __len__(self) -> int:
        return len(self.at_s)

    def add(self, at_s: int, group: tuple[str | None, ...]) -> int:
        """A new cell, empty: its index."""
        # Each column by name (a loop of getattr was a third of an answer's cells' cost).
        self.at_s.append(at_s)
        self.group.append(group)
        self.requests.append(0)
        self.prompt_tokens.append(0)
        self.completion_tokens.append(0)
        self.cached_tokens.append(0)
        self.out_of_range.append(0)
        self.errors.append(0)
        self.aborted.append(0)
        self.unpriced_requests.append(0)
        self.aborts.append(None)
        self.cost.append(None)
        self.replica_cost.append(None)
        self.percentiles.append(None)
        self.tallies.append(None)
        return len(self.at_s) - 1

    def reasons(self, at: int) -> dict[str, int]:
        """Cell ``at``'s abort reasons, to count into."""
        aborts = self.aborts[at]
        if aborts is None:
            aborts = self.aborts[at] = {}
        return aborts

    def tally(self, at: int) -> Tally:
        """Cell ``at``'s distributions, to merge into (its counters are the columns')."""
        tally = self.tallies[at]
        if tally is None:
            tally = self.tallies[at] = Tally()
        return tally

    def ordered(self, order: list[int]) -> Cells:
        """The cells in ``order`` (their indices)."""
        ordered = Cells()
        for name in Cells.__slots__:
            column = getattr(self, name)
            setattr(ordered, name, [column[at] for at in order])
        return ordered

    def row(self, at: int, group_by: Iterable[str], moment: datetime) -> UsageRow:
        """Cell ``at`` as a ``UsageRow`` at ``moment`` (its bucket's start)."""
        row = UsageRow(moment, dict(zip(group_by, self.group[at], strict=True)))
        for name in (*CELL_INTS, *_CELL_COSTS, "percentiles"):
            setattr(row, name, getattr(self, name)[at])
        row.aborts = dict(self.aborts[at] or {})
        tally = self.tallies[at]
        if tally is not None:
            for name in TIMES:
                distribution = getattr(tally, f"_{name}", None)  # (only those it made)
                if distribution is not None:
                    setattr(row, name, distribution)
        return row

    @classmethod
    def of_rows(cls, rows: Iterable[UsageRow]) -> Cells:
        """``rows`` as cells (each row's distributions shared, not copied)."""
        cells = cls()
        for row in rows:
            at = cells.add(_seconds(row.bucket), tuple(row.group.values()))
            for name in (*CELL_INTS, *_CELL_COSTS, "percentiles"):
                getattr(cells, name)[at] = getattr(row, name)
            cells.aborts[at] = dict(row.aborts) if row.aborts else None
            if any(getattr(row, f"_{name}", None) is not None for name in TIMES):
                cells.tallies[at] = row
        return cells


@dataclass
class Usage:
    """A usage answer: the whole buckets ``[since, until)`` it covers, its ``cells``
    in order (by bucket, then group), read as ``UsageRow``s from ``rows``."""

    since: datetime
    until: datetime
    bucket: str
    group_by: tuple[str, ...]
    cells: Cells
    relative_error: float = RELATIVE_ERROR
    # Whether ``replica_cost`` was computed (grouped and filtered by replica at most).
    replica_costed: bool = False
    # The distributions merged (the others are empty).
    latency: tuple[str, ...] = ()
    # Per group, its ``latency`` distributions over the whole range, where ``usage``
    # read them so (the rows give stored percentiles, not distributions to merge).
    latency_totals: dict[tuple[str | None, ...], Tally] | None = None

    @cached_property
    def rows(self) -> list[UsageRow]:
        """The cells as rows, made when first read (an object each: the JSON and CSV
        answers write the cells instead)."""
        moments: dict[int, datetime] = {}
        rows = []
        for at, at_s in enumerate(self.cells.at_s):
            moment = moments.get(at_s)
            if moment is None:  # a bucket's groups share its datetime
                moment = moments[at_s] = bucket_start(at_s)
            rows.append(self.cells.row(at, self.group_by, moment))
        return rows

    def totals(self) -> list[UsageRow]:
        """Per group, its cells summed over the whole range (``bucket`` is ``since``),
        in the cells' group order: what ``UsageRow.add_row`` of each row in turn gives,
        summed a column at a time (C-level passes; per row it cost more than the sums).
        Their ``latency`` distributions are ``latency_totals``' where ``usage`` read
        those, else the cells' merged (the others stay empty, as in the rows)."""
        members: dict[tuple[str | None, ...], list[int]] = {}
        for at, group in enumerate(self.cells.group):
            indices = members.get(group)
            if indices is None:
                members[group] = [at]
            else:
                indices.append(at)
        merged = self.latency if self.latency_totals is None else ()
        totals = {
            group: _summed(self.since, self.group_by, self.cells, indices, merged)
            for group, indices in members.items()
        }
        for group, tally in (self.latency_totals or {}).items():
            if group in totals:
                for name in self.latency:
                    setattr(totals[group], name, getattr(tally, name))
        return [totals[group] for group in sorted(totals, key=_group_order)]


def _summed(
    since: datetime,
    group_by: tuple[str, ...],
    cells: Cells,
    indices: list[int],
    distributions: tuple[str, ...],
) -> UsageRow:
    """The cells ``indices`` (one group's) summed into one row at ``since``, as
    ``add_row`` of each in turn: integers by ``sum``, costs added in the cells' order
    (``None`` while none had one), abort reasons and the ``distributions`` merged in
    order."""
    total = UsageRow(since, dict(zip(group_by, cells.group[indices[0]], strict=True)))
    for name in CELL_INTS:
        setattr(total, name, sum(map(getattr(cells, name).__getitem__, indices)))
    for name in _CELL_COSTS:
        values = map(getattr(cells, name).__getitem__, indices)
        costs = [cost for cost in values if cost is not None]
        # reduce, not sum: the same additions in the same order as add_row (sum
        # compensates for rounding from Python 3.12 on).
        setattr(total, name, reduce(add, costs) if costs else None)
    aborts = total.aborts
    for reasons in map(cells.aborts.__getitem__, indices):
        if reasons:
            for reason, n in reasons.items():
                aborts[reason] = aborts.get(reason, 0) + n
    for name in distributions:
        into = getattr(total, name)
        for tally in map(cells.tallies.__getitem__, indices):
            if tally is not None:
                distribution = getattr(tally, name)
                if distribution.count:
                    into.merge(distribution)
    return total


def _epoch_sql(vendor: str, column: str = "bucket") -> str | None:
    """SQL reading a rollup's bucket (``column``) as epoch seconds, where this database
    has it."""
    if vendor == "postgresql":
        return f"CAST(EXTRACT(EPOCH FROM {column}) AS bigint)"
    if vendor == "sqlite":  # Django stores UTC text: 'YYYY-MM-DD HH:MM:SS'
        return f"CAST(strftime('%%s', {column}) AS INTEGER)"
    return None


def _abort_sums(texts: Any, names: list[str], vendor: str) -> Iterable[tuple[Any, ...]]:
    """``(*keys, reason, count)`` summed over the ``texts`` rows ``(*keys, aborts)``
    (the keys' columns ``names``: the bucket and the group, or the group alone): by the
    database's JSON functions on PostgreSQL and SQLite (a few rows per bucket come back,
    not one per aborted rollup row), elsewhere in Python."""
    # The sum cast back: PostgreSQL's sum of bigints is a numeric (a Decimal).
    if vendor == "postgresql":
        each, value, cast = "jsonb_each_text(t.aborts::jsonb)", "CAST(j.value AS bigint)", "bigint"
    elif vendor == "sqlite":
        each, value, cast = "json_each(t.aborts)", "CAST(j.value AS INTEGER)", "INTEGER"
    else:
        return _abort_sums_in_python(texts, len(names))
    sql, params = texts.query.sql_with_params()
    kept = "".join(f't."{name}", ' for name in names)
    statement = (
        f"SELECT {kept}j.key, CAST(SUM({value}) AS {cast}) FROM ({sql}) AS t "
        f"CROSS JOIN {each} AS j GROUP BY {kept}j.key"
    )
    with connections[texts.db].cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall()  # type: ignore[no-any-return]


def _abort_sums_in_python(texts: Any, n: int) -> Iterable[tuple[Any, ...]]:
    """``_abort_sums`` by parsing each distinct text once (``n`` key columns)."""
    read: dict[str, list[tuple[str, int]]] = {}
    for values in texts:
        text = values[-1]
        counts = read.get(text)
        if counts is None:
            stored = Tally()
            stored.merge_texts(text, "", "", "")
            counts = read[text] = list(stored.aborts.items())
        for reason, count in counts:
            yield (*values[:n], reason, count)


def _token_cost_sums(prices: PriceBook) -> dict[str, Any]:
    """Two sums that price each rollup row's tokens in the database (so that no answer
    is split by model to be priced in Python), as ORM expressions, for a database
    ``_priced_sums`` has no SQL for: ``cost``, NULL while no row summed had a
    price, and ``unpriced``, the requests of the rows that had none. A row's price is
    its model's in force at its bucket (a price starts on a whole hour: a minute or an
    hour row has one), applied to its token sums as ``ModelPrice.cost`` applies it."""
    prompt = Cast("prompt_tokens", FloatField())
    completion = Cast("completion_tokens", FloatField())
    cached = Least(Greatest(Cast("cached_tokens", FloatField()), Value(0.0)), prompt)
    costs, priced = [], []
    for model, from_ms, until_ms, price in prices.model_periods():
        when = Q(model=model, bucket__gte=at_ms_to_datetime(from_ms))
        if until_ms is not None:
            when &= Q(bucket__lt=at_ms_to_datetime(until_ms))
        cached_rate = price.input if price.cached is None else price.cached
        cost = (
            (prompt - cached) * Value(price.input)
            + cached * Value(cached_rate)
            + completion * Value(price.output)
        ) / Value(float(PER_TOKENS))
        costs.append(When(when, then=cost))
        priced.append(When(when, then=Value(0)))
    return {
        "cost": Sum(Case(*costs, default=Value(None), output_field=FloatField())),
        "unpriced": Cast(
            Sum(Case(*priced, default=F("requests"), output_field=BigIntegerField())),
            BigIntegerField(),
        ),
    }


# Per database: its names for a float and an integer, and the two-argument min and max.
_PRICED_SQL = {
    "postgresql": ("double precision", "bigint", "LEAST", "GREATEST"),
    "sqlite": ("REAL", "INTEGER", "MIN", "MAX"),
}
_NEVER = datetime(9999, 12, 31, tzinfo=UTC)  # the end of a price without a successor
_PRICED_COUNTERS = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens")


def _priced_sums(
    counted: Any,
    timed: list[str],
    keys: list[str],
    prices: PriceBook,
    *,
    cells: bool = False,
    counters: bool = True,
) -> list[tuple[Any, ...]]:
    """The counters of ``counted`` (rollup rows) summed per ``timed`` and ``keys``, as the
    ORM's sums with ``_token_cost_sums`` would give them, each row's price found by a
    join to the price table (a hash lookup per row, whatever the number of prices)
    instead of a ``CASE`` that tries every price in turn: with 50 priced models, 30
    days by key at day buckets took 878 ms by the ``CASE``. ``timed`` is ``["at_s"]``
    (then grouped by the stored bucket, its first epoch second given), ``["step"]`` or
    nothing. ``cells``: each row of ``counted`` is a cell of its own (grouped by the
    stored bucket and every label its level keeps), so each is priced and given as it
    is, not summed (the same values: the hash aggregate was most of the query's time).
    Without ``counters``, the cost and the unpriced requests alone."""
    connection = connections[counted.db]
    real, integer, least, greatest = _PRICED_SQL[connection.vendor]
    adapt = connection.ops.adapt_datetimefield_value
    read = COUNTERS if counters else _PRICED_COUNTERS
    inner, params = counted.values_list(
        *dict.fromkeys([*timed, "bucket", "model", *keys, *read])
    ).query.sql_with_params()
    keyed = [f'r."{key}"' for key in keys]
    if cells:
        lead, grouped = [f'r."{name}"' for name in timed], []
    elif timed == ["at_s"]:
        # The bucket's epoch read once per group, not per row and its minimum taken
        # (PostgreSQL's EXTRACT is a numeric: per row, a third of a 14 000-row sum).
        epoch = _epoch_sql(connection.vendor, 'r."bucket"')
        assert epoch is not None  # (``_PRICED_SQL``'s databases have it)
        lead, grouped = [epoch], ['r."bucket"', *keyed]
    else:
        lead = grouped = [f'r."{name}"' for name in timed]
        grouped = [*grouped, *keyed]
    prompt = f'CAST(r."prompt_tokens" AS {real})'
    cached = f'{least}({greatest}(CAST(r."cached_tokens" AS {real}), 0.0), {prompt})'
    completion = f'CAST(r."completion_tokens" AS {real})'
    cost = f"(({prompt} - {cached}) * p.input + {cached} * p.cached + {completion} * p.output)"
    unpriced = 'CASE WHEN p.model IS NULL THEN r."requests" ELSE 0 END'
    table: list[Any] = []
    for model, from_ms, until_ms, price in prices.model_periods():
        until = _NEVER if until_ms is None else at_ms_to_datetime(until_ms)
        cached_rate = price.input if price.cached is None else price.cached
        table += [model, adapt(at_ms_to_datetime(from_ms)), adapt(until)]
        table += [price.input, cached_rate, price.output]
    if connection.vendor == "postgresql":
        # Six arrays, one per column: a placeholder per price (a catalogue of 50 models
        # is 600) cost psycopg a Python step each to split the statement and bind it.
        priced = (
            "SELECT * FROM unnest(%s::text[], %s::timestamptz[], %s::timestamptz[], "
            "%s::float8[], %s::float8[], %s::float8[]) "
            "AS v(model, starts, ends, input, cached, output)"
        )
        table = [table[column::6] for column in range(6)]
    else:
        rows = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * (len(table) // 6))
        priced = (
            f"SELECT column1 AS model, column2 AS starts, column3 AS ends, CAST(column4 AS "
            f"{real}) AS input, CAST(column5 AS {real}) AS cached, CAST(column6 AS {real}) "
            f"AS output FROM (VALUES {rows}) AS v"
        )
    summed = "{}" if cells else "SUM({})"
    counted_columns = [f'r."{name}"' for name in COUNTERS] if counters else []
    selected = [
        *lead,
        *keyed,
        *(f"CAST({summed.format(column)} AS {integer})" for column in counted_columns),
        summed.format(f"{cost} / {float(PER_TOKENS)!r}"),
        f"CAST({summed.format(unpriced)} AS {integer})",
    ]
    statement = (
        f"SELECT {', '.join(selected)} FROM ({inner}) AS r LEFT JOIN ({priced}) AS p "
        f'ON p.model = r."model" AND r."bucket" >= p.starts AND r."bucket" < p.ends'
        + (f" GROUP BY {', '.join(grouped)}" if grouped else "")
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, [*params, *table])
        return cursor.fetchall()  # type: ignore[no-any-return]


def level_keeping(columns: Iterable[str], *, counters_only: bool = False) -> int:
    """The coarsest rollup level whose rows keep every one of the group ``columns``:
    of those that keep them all, the one that keeps the fewest labels (the fewest rows:
    the total, a label's own level, a label and the model, else every group's). The
    ``COUNTED_LEVELS`` only if ``counters_only`` is asked for: they keep no
    distributions."""
    needed = set(columns)
    return min(
        (len(kept), level)
        for level, kept in LEVELS.items()
        if needed <= set(kept) and (counters_only or level not in COUNTED_LEVELS)
    )[1]


def _fetch(queryset: Any, *, raw: bool) -> Iterable[tuple[Any, ...]]:
    """The queryset's rows as tuples: ``raw``, straight from the cursor, without
    Django's per-value converters (half the time of a large answer; the columns are
    text and integers, and the sums cast back to bigint)."""
    if not raw:
        return queryset  # type: ignore[no-any-return]
    sql, params = queryset.query.sql_with_params()
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()  # type: ignore[no-any-return]


def _int(value: Any) -> int:
    return int(value)


def _seconds(moment: datetime) -> int:
    return int((moment - _EPOCH).total_seconds())


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
    latency: Iterable[str] = (),
    using: str | None = None,
) -> Usage:
    """Usage over ``[since, until)`` (aware datetimes) per ``bucket`` (minute, hour,
    day) and per combination of the ``group_by`` dimensions (any of ``DIMENSIONS``),
    restricted to ``filters`` (dimension -> value, ``None`` for "had none"), priced
    by ``prices``. ``ValueError`` for anything else, and ``TooManyRows`` when the
    answer would hold more than ``max_rows`` rows. Rows are ordered by bucket, then
    group. ``per_bucket=False`` sums each group over the whole range instead (one row
    per group, its ``bucket`` the range's start). ``latency`` names the distributions
    to give (any of ``TIMES``; the others stay empty): by one label or by nothing at
    hour and day buckets they are read as the rows stored them; grouped or filtered by
    two labels or more (or at minute buckets) every group's distributions are parsed
    and merged in Python, which costs most (docs/benchmarks.md, "Usage API, fourth
    pass")."""
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
    # Deltas no writer is folding are folded first (archive/fold.py).
    fold_abandoned(using)
    labelled = Rollup.objects.all() if using is None else Rollup.objects.using(using)
    for name, value in filters.items():
        column = DIMENSIONS[name]
        labelled = labelled.filter(
            **({f"{column}__isnull": True} if value is None else {column: value})
        )
    rows = labelled.filter(bucket__gte=start, bucket__lt=end)

    book = prices = prices or PriceBook()

    def span_of(level: int, hourly: bool = False) -> int:
        # The merged levels keep day rows too: a day bucket reads them, unless its
        # replicas' hours are costed (``hourly``: each hour a replica served in).
        if width <= 3600:
            return width
        if level == 0 or hourly:
            return 3600
        return DAY

    def spans_of(level: int, priced: bool, hourly: bool) -> Q:
        # The rows ``span_of`` reads; priced at day buckets, the hour rows of the days
        # in which a price changes (a row is priced at its bucket's price, so a day
        # row only where one price holds all day), the day rows of the others.
        span = span_of(level, hourly)
        if span != DAY or not priced:
            return Q(span_s=span)
        changing = [
            at_ms_to_datetime(day_ms)
            for day_ms in book.days_changing(epoch_ms(start), epoch_ms(end))
        ]
        if not changing:
            return Q(span_s=DAY)
        spans = Q(span_s=DAY) & ~Q(bucket__in=changing)
        for day in changing:
            spans |= Q(span_s=3600, bucket__gte=day, bucket__lt=day + timedelta(days=1))
        return spans

    if max_rows is not None and per_bucket:
        buckets = (end - start).total_seconds() // width
        if buckets > max_rows:
            raise TooManyRows(int(buckets), max_rows)
    distributions = tuple(dict.fromkeys(latency))
    for name in distributions:
        if name not in TIMES:
            raise ValueError(f"latency takes {', '.join(TIMES)}, got {name!r}")
    replica_costed = prices.prices_replicas and {*grouped, *filters} <= {"replica"}
    columns = [DIMENSIONS[name] for name in grouped]
    n = len(columns)
    # Buckets are read as epoch seconds where the database can say so: a timestamp
    # read back costs more than the rest of a row (psycopg's time-zone-aware parse).
    epoch = _epoch_sql(connections[rows.db].vendor)
    if epoch is not None:
        rows = rows.annotate(at_s=RawSQL(epoch, ()))
    at = "at_s" if epoch is not None else "bucket"
    seconds = _int if epoch is not None else _seconds
    first = int((start - _EPOCH).total_seconds())
    table = Cells()
    cells: dict[tuple[int, tuple[str | None, ...]], int] = {}  # (bucket, group) -> index

    def cell(at_s: int, group: tuple[str | None, ...]) -> int:
        key = (at_s - (at_s - first) % width if per_bucket else first, group)
        at = cells.get(key)
        if at is None:
            if max_rows is not None and len(cells) >= max_rows:
                raise TooManyRows(len(cells) + 1, max_rows)
            at = cells[key] = table.add(*key)
        return at

    def merged(at_s: int, group: tuple[str | None, ...]) -> Tally:
        # The cell's distributions, to merge into.
        return table.tally(cell(at_s, group))

    by_model, by_replica = prices.prices_tokens, replica_costed
    # How the database keys the sums in time (the answer's buckets where it can, so
    # that it returns a row per answered cell): by nothing over the whole range
    # (``per_bucket=False``), by the answer's bucket where it is wider than the
    # rollups' (days of hour rows), else by the stored bucket. The replicas' hours are
    # costed per rollup bucket a replica served in, so then by the stored bucket.
    timed: list[str]
    at_of: Callable[[Any], int]
    if epoch is None:
        timed, at_of = [at], seconds
    elif not by_replica and not per_bucket:
        timed, at_of = [], _int  # (no time column: every row is at ``first``)
    elif not by_replica and width > 3600:
        # The buckets since the epoch (the answer's start is on one), the width
        # written out: the expression ``ferrox_rollup_day_groups`` keeps statistics of.
        rows = rows.annotate(step=RawSQL(f"({epoch}) / {width}", ()))
        timed, at_of = ["step"], lambda step: step * width
    else:
        timed, at_of = ["at_s"], _int
    lead = len(timed)

    # 1. The counters, summed by the database per bucket and group, errors and aborts
    # by the outcome, the tokens priced too (each row at its model's price:
    # ``_priced_sums``), per replica where its hours are costed.
    keys = [*columns, *(["replica"] if by_replica else [])]
    replica_at = lead + len(keys) - 1
    # Each (replica, rollup bucket) is costed once, however many groups it holds.
    replica_buckets: set[tuple[Any, int]] = set()
    share = 1.0 if width >= 3600 else width / 3600
    filtered = [DIMENSIONS[name] for name in filters]
    # What the answer's groups and filters need: the level for the abort reasons and
    # the latency; the counters' may need the replica too, the cost the model.
    grouped_level = level_keeping([*columns, *filtered])
    counted_level = level_keeping([*keys, *filtered], counters_only=True)
    priced_level = level_keeping([*keys, *filtered, "model"], counters_only=True)
    # Priced, by a label or none, and grouped by the stored bucket (a sort, then a
    # sum per group): the counters from that label's level, a row per cell, and the
    # cost alone from its level with the model (a row per model, each priced). The
    # ten counters summed over every model's rows were half such a query (by replica,
    # 30 days at hour buckets: 39 ms, against 6 + 27). Grouped otherwise (by the
    # answer's bucket, hashed), the second query costs more than it saves.
    costed_apart = by_model and priced_level != counted_level and timed == ["at_s"]
    priced_with_counters = by_model and not costed_apart
    if priced_with_counters:
        counted_level = priced_level
    counted = rows.filter(
        spans_of(counted_level, priced_with_counters, by_replica), level=counted_level
    ).order_by()
    summed: Any
    # Grouped by the stored bucket and every label the level keeps, each row is a cell:
    # read as it is (a sum per cell of one row was most of the database's time).
    row_per_cell = timed == ["at_s"] and set(keys) == set(LEVELS[counted_level])
    if priced_with_counters and epoch is not None:
        summed = _priced_sums(counted, timed, keys, prices, cells=row_per_cell)
    elif row_per_cell:
        summed = _fetch(counted.values_list(*timed, *keys, *_SUMMED), raw=True)
    else:
        sums = {f"sum_{name}": Cast(Sum(name), BigIntegerField()) for name in _SUMMED}
        if priced_with_counters:
            sums.update(_token_cost_sums(prices))
        if timed == ["at_s"]:
            # Grouped by the stored bucket, not by its epoch: the rows come in that
            # order (an index-only scan of ``ferrox_rollup_level_counters``), so no sort.
            assert epoch is not None
            first_s = Cast(Min(RawSQL(epoch, ())), BigIntegerField())
            summed = counted.values("bucket", *keys).annotate(first_s=first_s, **sums)
            summed = summed.values_list("first_s", *keys, *sums)
        else:
            summed = counted.values(*timed, *keys).annotate(**sums)
            summed = summed.values_list(*timed, *keys, *sums)
        summed = _fetch(summed, raw=epoch is not None)
    summed_at = lead + len(keys)
    cost_in, unpriced_in, replica_cost_in = table.cost, table.unpriced_requests, table.replica_cost

    def replica_hour(index: int, replica: str | None, at_s: int) -> None:
        # The replica's hourly cost for the rollup bucket at ``at_s``, once per replica
        # and bucket, however many groups it holds.
        if (replica, at_s) not in replica_buckets:
            replica_buckets.add((replica, at_s))
            hourly = prices.hourly(replica, (at_s - at_s % 3600) * 1000)
            if hourly is not None:
                replica_cost_in[index] = _plus(replica_cost_in[index], hourly * share)

    if row_per_cell and per_bucket and width <= 3600 and set(keys) == set(columns):
        # Each row is a cell of its own at its own bucket (keyed by the answer's groups
        # alone, not a replica's costed too): the columns are the rows' (transposed in
        # C), not built a cell at a time.
        if max_rows is not None and len(summed) > max_rows:
            raise TooManyRows(max_rows + 1, max_rows)
        _fill(table, summed, lead, n, summed_at, priced_with_counters, unpriced=not by_model)
        cells.update(zip(zip(table.at_s, table.group, strict=True), range(len(table)), strict=True))
        if by_replica:
            for index, values in enumerate(summed):
                replica_hour(index, values[replica_at], table.at_s[index])
    else:
        # The columns, named once (a cell is an index into each: ``Cells``).
        requests_in, prompt_in = table.requests, table.prompt_tokens
        completion_in, cached_in, out_of_range_in = (
            table.completion_tokens,
            table.cached_tokens,
            table.out_of_range,
        )
        errors_in, aborted_in = table.errors, table.aborted
        for values in summed:
            at_s = at_of(values[0]) if lead else first
            index = cell(at_s, values[lead : lead + n])
            requests, prompt, completion, cached, out_of_range, errors, aborted, *known = values[
                summed_at : summed_at + len(_SUMMED)
            ]
            if aborted:
                aborts = table.reasons(index)
                for reason, count in zip(KNOWN_ABORTS, known, strict=True):
                    if count:
                        aborts[reason] = aborts.get(reason, 0) + count
            requests_in[index] += requests
            prompt_in[index] += prompt
            completion_in[index] += completion
            cached_in[index] += cached
            out_of_range_in[index] += out_of_range
            errors_in[index] += errors
            aborted_in[index] += aborted
            if priced_with_counters:
                cost, unpriced = values[-2:]
                if cost is not None:
                    cost_in[index] = _plus(cost_in[index], cost)
                unpriced_in[index] += unpriced
            elif not by_model:
                unpriced_in[index] += requests
            if by_replica:
                replica_hour(index, values[replica_at], at_s)
    if costed_apart:
        costed = rows.filter(spans_of(priced_level, True, by_replica), level=priced_level)
        # (grouped by the stored bucket: a database ``_priced_sums`` has SQL for)
        costs = _priced_sums(costed.order_by(), timed, keys, prices, counters=False)
        for values in costs:
            index = cell(at_of(values[0]), values[1 : 1 + n])
            cost, unpriced = values[-2:]
            if cost is not None:
                cost_in[index] = _plus(cost_in[index], cost)
            unpriced_in[index] += unpriced
    # 2. Other abort reasons than the known ones (summed above), from the rows that
    # have any (rare: an engine's own reasons, reported through ingest; the partial
    # index ``ferrox_rollup_level_aborts`` holds those rows alone): summed by the
    # database out of their JSON where that returns
    # fewer rows than it reads (every group's); a merged level has a row per cell
    # already, so each distinct text is parsed once in Python (the database's sum
    # would cost its planner's guess of 100 reasons a row: a parallel, JIT-compiled
    # plan of 80 ms for 3 600 rows).
    rows = rows.filter(level=grouped_level, span_s=span_of(grouped_level))
    texts = rows.exclude(aborts="").order_by().values_list(*timed, *columns, "aborts")
    if epoch is not None and grouped_level == 0:
        reason_sums = _abort_sums(texts, [*timed, *columns], connections[rows.db].vendor)
    else:
        reason_sums = _abort_sums_in_python(_fetch(texts, raw=epoch is not None), lead + n)
    for values in reason_sums:
        at_s = at_of(values[0]) if lead else first
        aborts = table.reasons(cell(at_s, values[lead : lead + n]))
        reason, count = values[-2], values[-1]
        aborts[reason] = aborts.get(reason, 0) + count
    # 3. The latency distributions asked for. A merged level's row per cell stored
    # its percentiles (``rollups.percentiles_text``): read as they are, and the range's
    # totals merged from its whole days' rows and its hours at either end
    # (``_merged_over``). Elsewhere every group's row is parsed and merged, bucket by
    # bucket (what costs most).
    latency_totals = None
    if distributions and grouped_level > 0 and span_of(grouped_level) == width >= 3600:
        if per_bucket:
            unstored = False
            for values in _fetch(
                rows.order_by().values_list(at, *columns, "percentiles"), raw=epoch is not None
            ):
                # A row per cell, at the cell's own bucket (the span is the width): most
                # cells are the counters' already.
                at_s, group = seconds(values[0]), values[1 : 1 + n]
                found = cells.get((at_s, group))
                if values[-1]:
                    index = cell(at_s, group) if found is None else found
                    table.percentiles[index] = values[-1]
                else:
                    unstored = True  # written before migration 0017
            if unstored:
                _merge_into(
                    rows.filter(percentiles=""), at, columns, distributions, merged, seconds, epoch
                )
        latency_totals = _merged_over(
            labelled.filter(level=grouped_level), start, end, columns, distributions
        )
        if not per_bucket:
            for group, tally in latency_totals.items():
                for name in distributions:
                    setattr(merged(first, group), name, getattr(tally, name))
            latency_totals = None
    elif distributions:
        _merge_into(rows, at, columns, distributions, merged, seconds, epoch)
    # Each group ranked once (a few groups, thousands of cells), each cell's place in
    # the answer an int: by bucket, then by its group's rank.
    ranked = sorted(set(table.group), key=_group_order)
    rank = {group: at for at, group in enumerate(ranked)}
    at_groups = zip(table.at_s, table.group, strict=True)
    places = [at_s * len(rank) + rank[group] for at_s, group in at_groups]
    return Usage(
        start,
        end,
        bucket,
        grouped,
        table.ordered(sorted(range(len(table)), key=places.__getitem__)),
        replica_costed=replica_costed,
        latency=distributions,
        latency_totals=latency_totals,
    )


def _fill(
    table: Cells,
    rows: list[tuple[Any, ...]],
    lead: int,
    n: int,
    summed_at: int,
    priced: bool,
    *,
    unpriced: bool,
) -> None:
    """Add ``rows`` to the empty ``table``, a cell each, as ``usage``'s loop of sums
    would: the epoch second, then ``n`` labels from ``lead`` on, the ``_SUMMED`` from
    ``summed_at`` on, and, where ``priced``, the cost and the unpriced requests last;
    else every request ``unpriced`` or none."""
    if not rows:
        return
    # A column at a time (zip(*rows) would make an iterator per row, each tracked by
    # the collector: 46 000 of them reached its oldest generation).
    columns = [list(map(itemgetter(at), rows)) for at in range(len(rows[0]))]
    table.at_s += map(int, columns[0])
    table.group += map(itemgetter(slice(lead, lead + n)), rows)
    requests, prompt, completion, cached, out_of_range, errors, aborted, *known = columns[
        summed_at : summed_at + len(_SUMMED)
    ]
    table.requests += requests
    table.prompt_tokens += prompt
    table.completion_tokens += completion
    table.cached_tokens += cached
    table.out_of_range += out_of_range
    table.errors += errors
    table.aborted += aborted
    table.aborts += (
        {reason: count for reason, count in zip(KNOWN_ABORTS, counts, strict=True) if count}
        if any_aborted
        else None
        for any_aborted, counts in zip(aborted, zip(*known, strict=True), strict=True)
    )
    if priced:
        table.cost += columns[-2]
        table.unpriced_requests += columns[-1]
    else:
        table.cost += [None] * len(rows)
        table.unpriced_requests += requests if unpriced else [0] * len(rows)
    for column in (table.replica_cost, table.percentiles, table.tallies):
        column += [None] * len(rows)


def _merge_into(
    rows: Any,
    at: str,
    columns: list[str],
    distributions: tuple[str, ...],
    merged: Callable[[int, tuple[str | None, ...]], Tally],
    seconds: Callable[[Any], int],
    epoch: str | None,
) -> None:
    """Merge the ``distributions`` of ``rows`` into their cells' (``merged`` gives a
    cell's), row by row."""
    n = len(columns)
    texts = rows.order_by().values_list(at, *columns, *distributions)
    for values in _fetch(texts, raw=epoch is not None):
        tally = merged(seconds(values[0]), values[1 : 1 + n])
        for name, text in zip(distributions, values[1 + n :], strict=True):
            merge_stored(getattr(tally, name), text)


def _merged_over(
    rows: Any,
    start: datetime,
    end: datetime,
    columns: list[str],
    distributions: tuple[str, ...],
) -> dict[tuple[str | None, ...], Tally]:
    """Per group of ``columns``, the ``distributions`` of the whole hours ``[start,
    end)``: from the day rows of the whole UTC days inside it, and the hour rows of the
    hours at either end (``rows``: one merged level's)."""
    first_day, last_day = _ceil(start, DAY), _floor(end, DAY)
    if first_day < last_day:
        spans = (
            Q(span_s=DAY, bucket__gte=first_day, bucket__lt=last_day)
            | Q(span_s=3600, bucket__gte=start, bucket__lt=first_day)
            | Q(span_s=3600, bucket__gte=last_day, bucket__lt=end)
        )
    else:
        spans = Q(span_s=3600, bucket__gte=start, bucket__lt=end)
    n = len(columns)
    merged: dict[tuple[str | None, ...], Tally] = {}
    for values in rows.filter(spans).order_by().values_list(*columns, *distributions):
        group = values[:n]
        tally = merged.get(group)
        if tally is None:
            tally = merged[group] = Tally()
        for name, text in zip(distributions, values[n:], strict=True):
            merge_stored(getattr(tally, name), text)
    return merged


class TooManyRows(ValueError):
    """A usage answer would hold more rows than its cap."""

    def __init__(self, rows: int, most: int) -> None:
        super().__init__(
            f"the answer would hold more than {most} rows (buckets x groups; "
            f"{rows} reached): ask for a shorter range, a wider bucket or fewer groups"
        )


def bucket_start(at_s: int) -> datetime:
    """A cell's ``at_s`` (epoch seconds) as the aware UTC datetime of its bucket."""
    return _EPOCH + timedelta(seconds=at_s)


def epoch_ms(moment: datetime) -> int:
    """An aware datetime on a whole second as epoch milliseconds."""
    return int((moment - _EPOCH).total_seconds()) * 1000


def _group_order(group: tuple[str | None, ...]) -> tuple[Any, ...]:
    # NULL labels first, so the order is total.
    return tuple((value is not None, value or "") for value in group)


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


def csv_columns(group_by: Iterable[str], latency: Iterable[str] = TIMES) -> list[str]:
    """The header of ``csv_lines``: the bucket, the groups, the counters, then each
    ``latency`` distribution's count and percentiles (``duration_s_p50``...)."""
    latency = [
        f"{name}_s_{part}"
        for name in latency
        for part in ("count", *(f"p{p}" for p in PERCENTILES))
    ]
    return ["bucket", "bucket_ms", *group_by, *CSV_COUNTERS, *latency]


def csv_lines(answer: Usage) -> Iterator[str]:
    """The answer's cells as CSV, a header first: empty for None, the abort reasons as
    compact JSON, floats in their shortest round-trip form."""
    writer = csv.writer(Echo())
    yield writer.writerow(csv_columns(answer.group_by, answer.latency))
    cells = answer.cells
    moments: dict[int, tuple[str, int]] = {}  # a bucket's groups share its start's text
    for at_s in cells.at_s:
        if at_s not in moments:
            moments[at_s] = (bucket_start(at_s).isoformat(), at_s * 1000)
    for index, at_s in enumerate(cells.at_s):
        values: list[Any] = [
            *moments[at_s],
            *cells.group[index],
            # CSV_COUNTERS, in its order:
            cells.requests[index],
            cells.prompt_tokens[index],
            cells.completion_tokens[index],
            cells.cached_tokens[index],
            cells.out_of_range[index],
            cells.errors[index],
            cells.aborted[index],
            json.dumps(cells.aborts[index] or {}, sort_keys=True),
            cells.cost[index],
            cells.unpriced_requests[index],
            cells.replica_cost[index],
        ]
        for summary in summaries(cells, index, answer.latency):
            values.extend(summary)
        yield writer.writerow(["" if value is None else value for value in values])
