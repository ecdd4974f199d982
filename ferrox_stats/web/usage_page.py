"""What the usage page shows: totals, top keys and models, and charts over a range.

Every number comes from ``archive.usage.usage`` (the rollups, never the archive's
rows), in four calls whatever the range: the range per bucket (totals and the
request, token, rate and cost charts), the totals per key, per model, and per bucket
and model with the latency distributions (the costliest: asked once).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.http import QueryDict
from django.utils import timezone
from django.utils.translation import gettext, ngettext

from ..archive import usage as rollups
from ..conf import conf
from . import display
from .usage_charts import PALETTE_SIZE, Chart, Series, bars, lines

__all__ = ["RANGES", "TOP_GROUPS", "Range", "UsagePage", "build", "money"]


@dataclass(frozen=True)
class Range:
    length: timedelta
    bucket: str  # one of archive.usage.BUCKETS


RANGES = {
    "24h": Range(timedelta(hours=24), "hour"),
    "7d": Range(timedelta(days=7), "hour"),
    "30d": Range(timedelta(days=30), "day"),
}
DEFAULT_RANGE = "24h"
# Rows in each of the key and model tables, ranked by total tokens.
TOP_GROUPS = 10
# The latency charts draw the models with the most tokens, one colour each.
LATENCY_MODELS = PALETTE_SIZE
# About this many time labels under a chart's axis.
TICKS = 6
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def span(name: str, now_ms: int) -> tuple[datetime, datetime, str]:
    """``[since, until)`` and the bucket of range ``name``: whole buckets, the last one
    the bucket ``now`` is in (so 24 hours, 168 hours or 30 UTC days)."""
    chosen = RANGES[name]
    width = rollups.BUCKETS[chosen.bucket]
    now_s = now_ms // 1000
    until = _EPOCH + timedelta(seconds=now_s - now_s % width + width)
    return until - chosen.length, until, chosen.bucket


def money(value: float | None) -> str:
    """A cost: "—" when nothing was priced (never 0), else cents, or finer below one."""
    number = display.finite(value)
    if number is None:
        return display.EMPTY
    if abs(number) >= 1 or number == 0:
        return f"{number:,.2f}"
    return f"{number:.4f}" if abs(number) >= 0.01 else f"{number:.6f}"


def _local(moment: datetime) -> datetime:
    return timezone.localtime(moment)


def bucket_label(moment: datetime, bucket: str) -> str:
    """An hour in the zone the page shows times in; a day as the UTC day it sums."""
    if bucket == "day":
        return moment.strftime("%Y-%m-%d")
    return _local(moment).strftime("%Y-%m-%d %H:%M")


def _tick_label(moment: datetime, bucket: str) -> str:
    return moment.strftime("%m-%d") if bucket == "day" else _local(moment).strftime("%m-%d %H:%M")


@dataclass
class Figure:
    key: str
    chart: Chart
    unit: str
    empty_text: str


@dataclass
class Group:
    """One row of the key or model table: its totals, formatted, and where it leads."""

    label: str
    requests: str
    prompt_tokens: str
    completion_tokens: str
    cached_tokens: str
    errors: str
    aborted: str
    cost: str
    usage_query: str  # this page narrowed to the group ("" when it has no value)
    history_query: str  # the history filtered to it ("" when history cannot filter so)


@dataclass
class GroupTable:
    rows: list[Group]
    refused: str = ""  # why there are no rows: the answer would exceed USAGE_MAX_ROWS


@dataclass
class UsagePage:
    range_name: str
    bucket: str
    since: datetime
    until: datetime
    since_text: str
    until_text: str
    totals: list[tuple[str, str, str]]  # label, value, note
    history_query: str  # the range's requests in the history, under the page's filters
    keys: GroupTable
    models: GroupTable
    figures: list[Figure] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _ask(
    since: datetime,
    until: datetime,
    bucket: str,
    filters: Mapping[str, str],
    **options: Any,
) -> rollups.Usage | str:
    """One usage answer, or the reason it was refused (more rows than USAGE_MAX_ROWS)."""
    try:
        return rollups.usage(
            since,
            until,
            bucket=bucket,
            filters=filters,
            prices=conf.PRICE_BOOK,
            max_rows=conf.USAGE_MAX_ROWS,
            using=conf.ARCHIVE_DATABASE,
            **options,
        )
    except rollups.TooManyRows as exc:
        return f"{str(exc).capitalize()}."


def _history_query(
    since: datetime, until: datetime, filters: Mapping[str, str], **more: str
) -> str:
    """The history's query string for the range, in its own parameters: it reads
    From/Until in the active zone, and filters by model and replica but not by key."""
    query = QueryDict(mutable=True)
    query["since"] = _local(since).strftime("%Y-%m-%dT%H:%M:%S")
    query["until"] = _local(until).strftime("%Y-%m-%dT%H:%M:%S")
    for name in ("model", "replica"):
        value = more.get(name) or filters.get(name)
        if value:
            query[name] = value
    return query.urlencode()


def _usage_query(range_name: str, filters: Mapping[str, str], **more: str) -> str:
    query = QueryDict(mutable=True)
    query["range"] = range_name
    for name, value in {**filters, **more}.items():
        query[name] = value
    return query.urlencode()


def _groups(
    answer: rollups.Usage | str,
    dimension: str,
    range_name: str,
    filters: Mapping[str, str],
) -> GroupTable:
    if isinstance(answer, str):
        return GroupTable([], answer)
    ranked = rollups.top(answer.totals(), "total_tokens", TOP_GROUPS)
    rows = []
    for row in ranked:
        value = row.group[dimension]
        tally = row.tally
        history = ""
        # History has no key filter (HistoryForm's MATCHED): a key's row links to this
        # page narrowed to the key instead, and a model's row to both.
        if value is not None and dimension == "model":
            history = _history_query(answer.since, answer.until, filters, model=value)
        rows.append(
            Group(
                label=display.text(value),
                requests=display.count(tally.requests),
                prompt_tokens=display.count(tally.prompt_tokens),
                completion_tokens=display.count(tally.completion_tokens),
                cached_tokens=display.count(tally.cached_tokens),
                errors=display.count(row.errors),
                aborted=display.count(row.aborted),
                cost=money(row.cost),
                usage_query=""
                if value is None
                else _usage_query(range_name, filters, **{dimension: value}),
                history_query=history,
            )
        )
    return GroupTable(rows)


def _totals(answer: rollups.Usage) -> list[tuple[str, str, str]]:
    (total,) = answer.totals() or [rollups.UsageRow(answer.since, {})]
    tally = total.tally
    if total.cost is None:
        cost_note = gettext("no price") if tally.requests else gettext("no requests")
    elif total.unpriced_requests:
        cost_note = ngettext(
            "%(n)s request without a price not included",
            "%(n)s requests without a price not included",
            total.unpriced_requests,
        ) % {"n": display.count(total.unpriced_requests)}
    else:
        cost_note = conf.CURRENCY
    cost = gettext("Cost (%(currency)s)") % {"currency": conf.CURRENCY}
    return [
        (gettext("Requests"), display.count(tally.requests), ""),
        (gettext("Prompt tokens"), display.count(tally.prompt_tokens), ""),
        (gettext("Completion tokens"), display.count(tally.completion_tokens), ""),
        (gettext("Cached tokens"), display.count(tally.cached_tokens), ""),
        (gettext("Errors"), display.count(total.errors), _share(total.errors, tally.requests)),
        (gettext("Aborted"), display.count(total.aborted), _share(total.aborted, tally.requests)),
        (cost, money(total.cost), cost_note),
    ]


def _share(part: int, whole: int) -> str:
    return "" if not whole else f"{display.percent(part / whole)} %"


def _rate(part: int, whole: int) -> float | None:
    """A share of the bucket's requests; nothing measured when it had none."""
    return part / whole if whole else None


def _per_bucket(answer: rollups.Usage, starts: Sequence[datetime]) -> list[rollups.UsageRow | None]:
    by_bucket = {row.bucket: row for row in answer.rows}
    return [by_bucket.get(moment) for moment in starts]


@dataclass(frozen=True)
class Axis:
    """The buckets a chart spans: each one's name (in tooltips) and the named ticks."""

    labels: list[str]
    ticks: list[tuple[int, str]]

    @classmethod
    def of(cls, starts: Sequence[datetime], bucket: str) -> Axis:
        step = max(1, len(starts) // TICKS)
        ticks = [(i, _tick_label(starts[i], bucket)) for i in range(0, len(starts), step)]
        return cls([bucket_label(moment, bucket) for moment in starts], ticks)

    def describe(self, title: str) -> str:
        """What a screen reader hears for the chart (its values are in the tooltips)."""
        if not self.labels:
            return title
        return gettext("%(title)s, one value per bucket from %(first)s to %(last)s.") % {
            "title": title,
            "first": self.labels[0],
            "last": self.labels[-1],
        }


def _bars(
    axis: Axis, key: str, title: str, unit: str, series: list[Series], fmt: Any, empty: str
) -> Figure:
    chart = bars(title, axis.describe(title), axis.labels, axis.ticks, series, fmt)
    return Figure(key, chart, unit, empty)


def _lines(
    axis: Axis, key: str, title: str, unit: str, series: list[Series], fmt: Any, empty: str
) -> Figure:
    chart = lines(title, axis.describe(title), axis.labels, axis.ticks, series, fmt)
    return Figure(key, chart, unit, empty)


def _percent(value: float) -> str:
    return f"{display.percent(value)} %"


def _traffic_figures(answer: rollups.Usage, axis: Axis, starts: Sequence[datetime]) -> list[Figure]:
    """Requests (by outcome), tokens, error and abort rates, and cost, per bucket."""
    rows = _per_bucket(answer, starts)
    requests = [row.tally.requests if row else 0 for row in rows]
    errors = [row.errors if row else 0 for row in rows]
    aborted = [row.aborted if row else 0 for row in rows]
    ok = [r - e - a for r, e, a in zip(requests, errors, aborted, strict=True)]
    prompt = [row.tally.prompt_tokens if row else 0 for row in rows]
    completion = [row.tally.completion_tokens if row else 0 for row in rows]
    # A bucket without requests has no rate: the line breaks there.
    error_rate = [_rate(e, r) for e, r in zip(errors, requests, strict=True)]
    abort_rate = [_rate(a, r) for a, r in zip(aborted, requests, strict=True)]
    nothing = gettext("No requests in this range.")
    unpriced = gettext("No price for these requests (PRICES).") if any(requests) else nothing
    return [
        _bars(
            axis,
            "requests",
            gettext("Requests"),
            gettext("per bucket, by outcome"),
            [
                Series(gettext("ok"), ok, 4),
                Series(gettext("errors"), errors, 3),
                Series(gettext("aborted"), aborted, 2),
            ],
            display.count,
            nothing,
        ),
        _bars(
            axis,
            "tokens",
            gettext("Tokens"),
            gettext("per bucket"),
            [Series(gettext("prompt"), prompt, 0), Series(gettext("completion"), completion, 1)],
            display.count,
            nothing,
        ),
        _lines(
            axis,
            "rates",
            gettext("Error and abort rate"),
            gettext("% of the bucket's requests"),
            [Series(gettext("errors"), error_rate, 3), Series(gettext("aborted"), abort_rate, 2)],
            _percent,
            nothing,
        ),
        _bars(
            axis,
            "cost",
            gettext("Cost"),
            gettext("%(currency)s per bucket") % {"currency": conf.CURRENCY},
            [Series(gettext("cost"), [row.cost if row else None for row in rows], 5)],
            money,
            unpriced,
        ),
    ]


def _latency_figures(
    answer: rollups.Usage, axis: Axis, starts: Sequence[datetime], models: list[str | None]
) -> list[Figure]:
    """TTFT and duration p50 (dashed) and p95 per bucket, one colour per model."""
    cells = {(row.bucket, row.group["model"]): row for row in answer.rows}
    figures = []
    for key, distribution, title in (
        ("ttft", "ttft", gettext("Time to first token")),
        ("duration", "duration", gettext("Duration")),
    ):
        series = []
        for colour, model in enumerate(models):
            name = display.text(model)
            for p, dashed in (("p50", True), ("p95", False)):
                values: list[float | None] = []
                for moment in starts:
                    row = cells.get((moment, model))
                    seconds = None if row is None else row.latency([distribution])
                    value = None if seconds is None else seconds[f"{distribution}_s"][p]
                    values.append(None if value is None else float(value) * 1000)
                series.append(Series(f"{name} {p}", values, colour, dashed))
        figures.append(
            _lines(
                axis,
                key,
                title,
                gettext("ms, p50 (dashed) and p95 per model"),
                series,
                display.decimal,
                gettext("Nothing measured in this range."),
            )
        )
    return figures


def build(range_name: str, filters: Mapping[str, str], now_ms: int) -> UsagePage:
    """The page for range ``range_name`` ending at ``now_ms`` (the recorder's clock),
    under ``filters`` (key, model, replica)."""
    since, until, bucket = span(range_name, now_ms)
    width = timedelta(seconds=rollups.BUCKETS[bucket])
    starts = [since + width * i for i in range(int((until - since) / width))]
    axis = Axis.of(starts, bucket)
    traffic = _ask(since, until, bucket, filters)
    by_key = _ask(since, until, bucket, filters, group_by=["key"], per_bucket=False)
    by_model = _ask(since, until, bucket, filters, group_by=["model"], per_bucket=False)
    models: list[str | None] = []
    if not isinstance(by_model, str):
        ranked = rollups.top(by_model.totals(), "total_tokens", LATENCY_MODELS)
        models = [row.group["model"] for row in ranked]
    latency = _ask(since, until, bucket, filters, group_by=["model"], latency=["duration", "ttft"])
    figures: list[Figure] = []
    if not isinstance(traffic, str):
        figures.extend(_traffic_figures(traffic, axis, starts))
    if not isinstance(latency, str):
        figures.extend(_latency_figures(latency, axis, starts, models))
    return UsagePage(
        range_name=range_name,
        bucket=bucket,
        since=since,
        until=until,
        since_text=_range_end(since, bucket),
        until_text=_range_end(until, bucket),
        # No totals rather than zeros when the answer was refused (rule 1).
        totals=[] if isinstance(traffic, str) else _totals(traffic),
        history_query=_history_query(since, until, filters),
        keys=_groups(by_key, "key", range_name, filters),
        models=_groups(by_model, "model", range_name, filters),
        figures=figures,
        problems=list(dict.fromkeys(t for t in (traffic, latency) if isinstance(t, str))),
    )


def _range_end(moment: datetime, bucket: str) -> str:
    if bucket == "day":
        return moment.strftime("%Y-%m-%d %H:%M UTC")
    return _local(moment).strftime("%Y-%m-%d %H:%M")
