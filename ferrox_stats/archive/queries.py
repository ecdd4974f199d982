"""The queries every reader of the archive shares: admin, API, dashboard and commands.

Nobody else builds archive queries: time windows, filters, keyset pages in both
directions and aggregates all live here, on ``FinishedRequest.objects``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.models import (
    Aggregate,
    Avg,
    BooleanField,
    Count,
    Expression,
    F,
    FloatField,
    Max,
    Min,
    Q,
    QuerySet,
    Sum,
)

from ..core.summary import mean_present, percentiles
from .rows import COLUMNS, MAX_AT_MS, MIN_AT_MS, at_ms_to_datetime, datetime_to_at_ms, row_entry

CURSOR_SHAPE = re.compile(r"(?P<at_ms>-?[0-9]{1,19})\.(?P<id>[0-9]{1,19})")
COMMIT_CURSOR_SHAPE = re.compile(r"c(?P<seq>[0-9]{1,19})")
# The commit cursor before migration 0006: "c<transaction id>.<id>", refused by name.
OLD_COMMIT_CURSOR_SHAPE = re.compile(r"c[0-9]+\.[0-9]+")
MAX_ID = 2**63 - 1

# The columns a row's wire dict is built from.
ENTRY_COLUMNS = (*COLUMNS, "id")

FILTER_FIELDS = (
    "model",
    "route",
    "status",
    "outcome",
    "aborted",
    "finish_reason",
    "client",
    "replica",
    "via_api_key",
)


@dataclass(frozen=True)
class Cursor:
    """A keyset position: the (finished_at, id) of the last row a page returned."""

    at_ms: int
    id: int

    def encode(self) -> str:
        return f"{self.at_ms}.{self.id}"

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """Parse ``"<at_ms>.<id>"``; raise ``ValueError`` with a reason otherwise."""
        match = CURSOR_SHAPE.fullmatch(text)
        if match is None:
            raise ValueError("cursor must look like '<at_ms>.<id>'")
        at_ms, row_id = int(match["at_ms"]), int(match["id"])
        if not MIN_AT_MS <= at_ms <= MAX_AT_MS or row_id > MAX_ID:
            raise ValueError("cursor is out of range")
        return cls(at_ms, row_id)


@dataclass(frozen=True)
class CommitCursor:
    """A position in commit order: the ``commit_seq`` (the id on SQLite) of the last row."""

    seq: int

    def encode(self) -> str:
        return f"c{self.seq}"

    @classmethod
    def decode(cls, text: str) -> CommitCursor:
        """Parse ``"c<seq>"``; raise ``ValueError`` with a reason otherwise."""
        if OLD_COMMIT_CURSOR_SHAPE.fullmatch(text):
            raise ValueError(
                "this commit-order cursor is from an earlier version of the archive "
                "('c<xid>.<id>'); start again without a cursor"
            )
        match = COMMIT_CURSOR_SHAPE.fullmatch(text)
        if match is None:
            raise ValueError("cursor must look like 'c<seq>'")
        seq = int(match["seq"])
        if seq > MAX_ID:
            raise ValueError("cursor is out of range")
        return cls(seq)


@dataclass(frozen=True)
class KeysetPage:
    """Rows (wire dicts, each with ``id``) and the cursor to continue from, if any."""

    entries: list[dict[str, Any]]
    next_cursor: Cursor | CommitCursor | None


class KeysetBeyond(Expression):
    """``(finished_at, id) < (at, id)`` (or ``>``): the rows past a cursor, as ONE row
    comparison.

    PostgreSQL takes a row comparison as a single index condition on any index whose
    columns run ``..., finished_at, id`` after the filter's equality column (migration
    0011): a page then reads exactly its rows at any depth. The equivalent
    ``finished_at < at OR (finished_at = at AND id < id)`` is only a filter there, and
    its row estimate was so far off that deep pages of a rare filter were planned as
    a bitmap scan and a sort of every older matching row (docs/benchmarks.md,
    perf-history). SQLite reads row values too (3.15+).

    It resolves to two plain columns of the query's base table, not through ``F()``
    and ``Value()``: building a page's SQL is most of what a deep page costs beyond
    the first one, and the ORM's general path for four expressions doubled it.
    """

    conditional = True
    output_field = BooleanField()

    def __init__(self, operator: str, after: Cursor) -> None:
        if operator not in ("<", ">"):
            raise ValueError(f"operator must be '<' or '>', got {operator!r}")
        super().__init__()
        self.operator, self.after = operator, after
        self.columns: tuple[Any, Any] | None = None

    def resolve_expression(
        self,
        query: Any = None,
        allow_joins: bool = True,
        reuse: Any = None,
        summarize: bool = False,
        for_save: bool = False,
    ) -> KeysetBeyond:
        resolved = self.copy()
        alias = query.get_initial_alias()
        meta = query.model._meta
        resolved.columns = (
            meta.get_field("finished_at").get_col(alias),
            meta.get_field("id").get_col(alias),
        )
        return resolved

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        assert self.columns is not None, "KeysetBeyond is used unresolved"
        at, row_id = (compiler.compile(column)[0] for column in self.columns)
        moment = connection.ops.adapt_datetimefield_value(at_ms_to_datetime(self.after.at_ms))
        return f"({at}, {row_id}) {self.operator} (%s, %s)", [moment, self.after.id]


class PercentileDisc(Aggregate):
    """PostgreSQL's ``percentile_disc``: the nearest-rank percentile, computed in SQL."""

    function = "percentile_disc"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: Any, fraction: float, **extra: Any) -> None:
        super().__init__(expression, fraction=float(fraction), **extra)


class FinishedRequestQuerySet(QuerySet[Any]):
    def window(self, since: datetime | None = None, until: datetime | None = None) -> Any:
        """Rows finished at or after ``since`` and before ``until``."""
        qs = self
        if since is not None:
            qs = qs.filter(finished_at__gte=since)
        if until is not None:
            qs = qs.filter(finished_at__lt=until)
        return qs

    def matching(self, filters: Mapping[str, Any]) -> Any:
        """Rows whose fields equal the given values; a list/tuple value means any of them."""
        qs = self
        for name, value in filters.items():
            if name not in FILTER_FIELDS:
                raise ValueError(f"cannot filter on {name!r}; known: {', '.join(FILTER_FIELDS)}")
            if value is None:
                continue
            if isinstance(value, list | tuple | set | frozenset):
                qs = qs.filter(**{f"{name}__in": list(value)})
            else:
                qs = qs.filter(**{name: value})
        return qs

    def newest_first(self, after: Cursor | None, limit: int) -> KeysetPage:
        """A page of rows older than ``after`` (newest first)."""
        qs = self if after is None else self.filter(KeysetBeyond("<", after))
        return qs.order_by("-finished_at", "-id")._page(limit)

    def oldest_first(self, after: Cursor | None, limit: int) -> KeysetPage:
        """A page of rows newer than ``after`` (oldest first)."""
        qs = self if after is None else self.filter(KeysetBeyond(">", after))
        return qs.order_by("finished_at", "id")._page(limit)

    def committed_after(self, after: CommitCursor | None, limit: int) -> KeysetPage:
        """A page of rows in the order they became visible, after ``after``.

        A poller that follows ``next_cursor`` gets every archived row exactly once, in
        commit order, and never skips a row however late its batch commits; a row can
        be served as soon as it is committed. On PostgreSQL every insert allocates
        ``commit_seq`` under a transaction-scoped advisory lock (migration 0006), so no
        row can ever appear below a visible one: the rows are served in
        ``commit_seq`` order with no horizon, and nothing but the archive's own
        writers is waited for. SQLite commits one writer at a time, so id order is
        commit order there. ``next_cursor`` is where to poll next: the last row
        returned, or ``after`` itself when nothing new is visible yet.
        """
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit!r}")
        column = "commit_seq" if connections[self.db].vendor == "postgresql" else "id"
        qs = self.filter(**{f"{column}__isnull": False})
        if after is not None:
            qs = qs.filter(**{f"{column}__gt": after.seq})
        rows = list(qs.order_by(column).values(*ENTRY_COLUMNS, "commit_seq")[:limit])
        entries = [_entry_with_id(row) for row in rows]
        if not rows:
            return KeysetPage(entries, after)
        return KeysetPage(entries, CommitCursor(rows[-1][column]))

    def committed_newest(self, limit: int) -> KeysetPage:
        """The ``limit`` rows that became visible last, newest first, and the cursor a
        poller of ``committed_after`` continues from so that it gets every row after them
        (``None`` on an empty archive: it starts from the beginning, which is now)."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit!r}")
        column = "commit_seq" if connections[self.db].vendor == "postgresql" else "id"
        qs = self.filter(**{f"{column}__isnull": False})
        rows = list(qs.order_by(f"-{column}").values(*ENTRY_COLUMNS, "commit_seq")[:limit])
        entries = [_entry_with_id(row) for row in rows]
        return KeysetPage(entries, CommitCursor(rows[0][column]) if rows else None)

    def _page(self, limit: int) -> KeysetPage:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit!r}")
        rows = list(self.values(*ENTRY_COLUMNS)[: limit + 1])
        more = len(rows) > limit
        rows = rows[:limit]
        entries = [_entry_with_id(row) for row in rows]
        last = rows[-1] if rows and more else None
        cursor = Cursor(datetime_to_at_ms(last["finished_at"]), last["id"]) if last else None
        return KeysetPage(entries, cursor)

    def entries(self, chunk_size: int = 2000) -> Iterator[dict[str, Any]]:
        """Every row's wire dict, in the queryset's order, in constant memory."""
        for row in self.values(*ENTRY_COLUMNS).iterator(chunk_size=chunk_size):
            yield _entry_with_id(row)

    def by_request_id(self, request_id: str) -> list[dict[str, Any]]:
        """Every archived row with this ``request_id`` (one per replica that served it)."""
        return [
            _entry_with_id(r) for r in self.filter(request_id=request_id).values(*ENTRY_COLUMNS)
        ]

    def aggregates(self) -> dict[str, Any]:
        """Counts by outcome, token sums, and nearest-rank latency percentiles.

        Percentiles are computed in SQL on PostgreSQL and in Python elsewhere (the
        embedded default); a value nothing measured is ``None``.
        """
        totals = self.aggregate(
            requests=Count("id"),
            ok=Count("id", filter=Q(outcome="ok")),
            error=Count("id", filter=Q(outcome="error")),
            aborted=Count("id", filter=Q(outcome="aborted")),
            prompt_tokens=Sum("prompt_tokens"),
            completion_tokens=Sum("completion_tokens"),
            ttft_mean_ms=Avg("ttft_ms"),
            first_at=Min("finished_at"),
            last_at=Max("finished_at"),
        )
        result: dict[str, Any] = {
            "requests": totals["requests"],
            "outcomes": {k: totals[k] for k in ("ok", "error", "aborted")},
            "prompt_tokens": totals["prompt_tokens"],
            "completion_tokens": totals["completion_tokens"],
            "ttft_mean_ms": totals["ttft_mean_ms"],
            "first_at_ms": _at_ms_or_none(totals["first_at"]),
            "last_at_ms": _at_ms_or_none(totals["last_at"]),
        }
        for column in ("duration_ms", "ttft_ms"):
            for p, value in self._percentiles(column).items():
                result[f"{column[:-3]}_p{p}_ms"] = value
        return result

    def _percentiles(self, column: str) -> dict[int, float | None]:
        wanted = (50, 95, 99)
        if connections[self.db].vendor == "postgresql":
            found = self.filter(**{f"{column}__isnull": False}).aggregate(
                **{f"p{p}": PercentileDisc(F(column), p / 100) for p in wanted}
            )
            return {p: found[f"p{p}"] for p in wanted}
        values = self.values_list(column, flat=True).iterator(chunk_size=5000)
        return {int(p): v for p, v in percentiles(values, wanted).items()}


def _at_ms_or_none(moment: datetime | None) -> int | None:
    return None if moment is None else datetime_to_at_ms(moment)


def _entry_with_id(row: dict[str, Any]) -> dict[str, Any]:
    wire = row_entry(row)
    wire["id"] = row["id"]
    return wire


__all__ = ["Cursor", "FinishedRequestQuerySet", "KeysetPage", "mean_present"]
