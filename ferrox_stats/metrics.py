"""``/metrics``: this host's telemetry in Prometheus's text format (the view is
``api.metrics.MetricsView``).

Read at scrape time from ``host_state`` (every process of the host, and those that
ended): nothing is added to the request path, and nothing asks the database. Exposed
through ``prometheus_client`` with a collector on a private ``CollectorRegistry`` (the
global ``REGISTRY`` is the host project's).

Families (``METRICS_FAMILIES``):

- ``otel``: the OpenTelemetry GenAI semantic conventions in Prometheus form, labelled
  ``model``, ``route``, ``outcome`` (the breakdown's bounded labels: past its caps a
  model or route is ``other``), plus ``ferrox_stats_*``;
- ``vllm``: vLLM's names (``<METRICS_VLLM_PREFIX>:e2e_request_latency_seconds``, …),
  labelled ``model_name``, for the dashboards already built on them.

Histogram bounds are powers of two, where the distributions count exactly. A gauge
nothing measured is absent, never 0.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain, compress, repeat
from operator import add, ge, is_, itemgetter
from typing import Any, NamedTuple

from prometheus_client import generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from . import host_state, live, octave
from .conf import conf
from .host_state import HostTotals
from .octave import Frame, Merged
from .state import process_state

__all__ = [
    "CONTENT_TYPE",
    "DURATION_BOUNDS",
    "TOKEN_BOUNDS",
    "HostCollector",
    "exposition",
    "scrape",
]

# The classic text format (what every Prometheus and promtool reads), whatever
# prometheus_client's CONTENT_TYPE_LATEST names in its version.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds: 2^-10 (about 1 ms) .. 2^7 (128 s), each a bound the distributions count exactly.
DURATION_BOUNDS = tuple(2.0**e for e in range(-10, 8))
# Tokens per request: 4^0 .. 4^13, OpenTelemetry's advice for gen_ai.client.token.usage.
TOKEN_BOUNDS = tuple(4.0**e for e in range(14))

LABELS = ["model", "route", "outcome"]
TOKEN_TYPE = "gen_ai_token_type"


class Bounds(NamedTuple):
    """A histogram's ``le`` bounds: their exponents (each a power of two, where the
    distributions count exactly) and their names as every Prometheus client writes them
    (``"0.5"``, ``"1.0"``, ``"6.7108864e+07"``)."""

    exponents: tuple[int, ...]
    names: tuple[str, ...]


def _bounds(bounds: tuple[float, ...], frame: Frame) -> Bounds:
    """Powers of two within ``frame`` (where ``octave.merged`` keeps them apart)."""
    exponents = tuple(round(math.log2(bound)) for bound in bounds)
    assert [2.0**e for e in exponents] == list(bounds)
    assert all(frame.low < e <= frame.high for e in exponents)
    return Bounds(
        exponents,
        tuple(floatToGoString(bound) for bound in bounds),  # type: ignore[no-untyped-call]
    )


DURATION = _bounds(DURATION_BOUNDS, octave.TIMES)
TOKENS = _bounds(TOKEN_BOUNDS, octave.TOKENS)
_LE_DURATION = list(DURATION.names)
_LE_TOKENS = list(TOKENS.names)

_pickers: dict[tuple[Frame, tuple[int, ...]], itemgetter[Any]] = {}


def _picker(frame: Frame, bounds: Bounds) -> itemgetter[Any]:
    """What picks, from a cumulative count in ``frame``, the count at each bound, then
    the count twice (the ``+Inf`` bucket and ``_count``)."""
    picker = _pickers.get((frame, bounds.exponents))
    if picker is None:
        if len(_pickers) > 256:
            _pickers.clear()
        last = frame.width - 1
        slots = [frame.slot(e) for e in bounds.exponents]
        picker = _pickers[frame, bounds.exponents] = itemgetter(*slots, last, last)
    return picker


def _buckets(cumulative: list[int], frame: Frame, bounds: Bounds) -> list[tuple[str, float]]:
    """Cumulative ``le`` buckets, ``+Inf`` last (the count)."""
    *counts, total, _ = _picker(frame, bounds)(cumulative)
    return [*zip(bounds.names, counts, strict=True), ("+Inf", total)]


def go_strings(values: Sequence[float]) -> list[str]:
    """``floatToGoString`` of each value (finite, >= 0): its ``repr``, except from 1e6
    to 1e16 where Go switches to an exponent sooner."""
    strings = list(map(repr, values))
    for i in compress(itertools.count(), map(ge, values, repeat(1e6))):
        strings[i] = floatToGoString(values[i])  # type: ignore[no-untyped-call]
    return strings


class Series(NamedTuple):
    """The series of one histogram family: each one's label values, cumulative counts
    (in ``frame``: ``octave.Merged``) and sum."""

    frame: Frame
    labels: Sequence[Sequence[str]]
    cumulative: Sequence[list[int]]
    sums: Sequence[float]


def _histogram(
    name: str, documentation: str, bounds: Bounds, labels: list[str], series: Series
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation, labels=labels)
    for values, cumulative, total in zip(
        series.labels, series.cumulative, series.sums, strict=True
    ):
        family.add_metric(list(values), _buckets(cumulative, series.frame, bounds), total)
    return family


# Per family name, the last text template written and what it was written for: a
# series' label string is escaped once while the labels stay (LABEL_MAX_MODELS bounds them).
_templates: dict[str, tuple[tuple[Any, ...], bytes]] = {}
MAX_TEMPLATES = 64


def _template(
    kind: str,
    name: str,
    documentation: str,
    les: tuple[str, ...] | None,
    labels: list[str],
    values: Sequence[Sequence[str]],
) -> bytes:
    """The family's text (UTF-8) with a ``%d`` for each count and a ``%s`` for each sum."""
    identity = (kind, documentation, les, tuple(labels), tuple(map(tuple, values)))
    cached = _templates.get(name)
    if cached is not None and cached[0] == identity:
        return cached[1]
    # Text around the placeholders with every "%" doubled (a label value may hold one).
    help_text = _percent(documentation.replace("\\", r"\\").replace("\n", r"\n"))
    sample = _percent(name if kind == "histogram" else f"{name}_total")
    plain = _percent(name)
    out = [f"# HELP {sample} {help_text}\n# TYPE {sample} {kind}\n"]
    for series in values:
        labelled = _percent(
            ",".join(
                f'{label}="{_label_value(value)}"'
                for label, value in zip(labels, series, strict=True)
            )
        )
        if les is None:
            out.append(f"{sample}{{{labelled}}} %d\n")
            continue
        bucket = f'{plain}_bucket{{{labelled},le="'
        out.extend([f'{bucket}{le}"}} %d\n' for le in (*les, "+Inf")])
        out.append(f"{plain}_count{{{labelled}}} %d\n")
        out.append(f"{plain}_sum{{{labelled}}} %s\n")
    template = "".join(out).encode()
    if len(_templates) >= MAX_TEMPLATES:
        _templates.clear()
    _templates[name] = (identity, template)
    return template


class Text(NamedTuple):
    """A family's text: its template (``_template``) and the values that fill it."""

    template: bytes
    values: Iterable[Any]


def _histogram_text(
    name: str, documentation: str, bounds: Bounds, labels: list[str], series: Series
) -> Text:
    """The family ``_histogram`` builds, in the text format ``generate_latest`` writes:
    a template and the values that fill it.

    Written here because the histograms are nearly every sample of a scrape, and
    ``generate_latest`` formats each sample on its own (its labels escaped, its value
    through ``floatToGoString``): about 7 µs a sample, 125 ms for a host of 180 cells.
    Here the family's text is a template kept across scrapes (its labels escaped once)
    filled with every count in one ``%`` (``exposition``). A test holds this to what
    ``generate_latest`` writes for the same family, sample by sample.
    """
    template = _template("histogram", name, documentation, bounds.names, labels, series.labels)
    values = chain.from_iterable(
        map(
            add,
            map(_picker(series.frame, bounds), series.cumulative),
            zip(map(str.encode, go_strings(series.sums))),
        )
    )
    return Text(template, values)


def _counter_text(
    name: str,
    documentation: str,
    labels: list[str],
    values: Sequence[Sequence[str]],
    counts: list[int],
) -> Text:
    """A labelled counter family of integer counts, as ``generate_latest`` writes it."""
    return Text(_template("counter", name, documentation, None, labels, values), counts)


# The last templates joined into one, and what they were joined from (held, so an
# identity compares them).
_joined: tuple[tuple[bytes, ...], bytes] = ((), b"%b")


def _joined_template(templates: tuple[bytes, ...]) -> bytes:
    """``templates`` as one, then a ``%b`` for the rest of the text."""
    global _joined
    seen, joined = _joined
    if len(seen) != len(templates) or not all(map(is_, seen, templates)):
        joined = b"".join(templates) + b"%b"
        _joined = (templates, joined)
    return joined


def _percent(text: str) -> str:
    return text.replace("%", "%%")


def _label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class HostCollector(Collector):
    """The families of one ``HostTotals`` (read before: ``collect`` does no I/O)."""

    def __init__(
        self,
        totals: HostTotals,
        families: Iterable[str] = ("otel",),
        prefix: str = "vllm",
        *,
        as_text: list[Text] | None = None,
    ) -> None:
        self.totals = totals
        self.families = frozenset(families)
        self.prefix = prefix
        # Given a list, the histogram families and the per-cell request counter (nearly
        # every sample) are written into it as text (see ``_histogram_text``) instead
        # of collected.
        self.as_text = as_text

    def _histogram(
        self, name: str, documentation: str, bounds: Bounds, labels: list[str], series: Series
    ) -> Iterator[Metric]:
        if self.as_text is None:
            yield _histogram(name, documentation, bounds, labels, series)
        else:
            self.as_text.append(_histogram_text(name, documentation, bounds, labels, series))

    def _counter(
        self,
        name: str,
        documentation: str,
        labels: list[str],
        values: Sequence[Sequence[str]],
        counts: list[int],
    ) -> Iterator[Metric]:
        if self.as_text is not None:
            self.as_text.append(_counter_text(name, documentation, labels, values, counts))
            return
        family = CounterMetricFamily(name, documentation, labels=labels)
        for series, n in zip(values, counts, strict=True):
            family.add_metric(list(series), n)
        yield family

    def describe(self) -> Iterable[Metric]:
        # Names only, no data: registration never reads the host's state.
        return []

    def collect(self) -> Iterator[Metric]:
        state, cells = self.totals.state, self.totals.cells
        if "otel" in self.families:
            yield from self._otel(state, cells)
        if "vllm" in self.families:
            yield from self._vllm(state, cells)

    # -- OpenTelemetry GenAI, and ours ----------------------------------------------------

    def _otel(self, state: Mapping[str, Any], cells: Merged) -> Iterator[Metric]:
        keys = cells.keys
        for name, kind, text in (
            (
                "gen_ai_server_request_duration_seconds",
                "duration",
                "Time from the request to its last byte "
                "(OpenTelemetry gen_ai.server.request.duration).",
            ),
            (
                "gen_ai_server_time_to_first_token_seconds",
                "ttft",
                "Time to the first output token (OpenTelemetry gen_ai.server.time_to_first_token).",
            ),
            (
                "gen_ai_server_time_per_output_token_seconds",
                "tpot",
                "Decode time per output token after the first "
                "(OpenTelemetry gen_ai.server.time_per_output_token).",
            ),
        ):
            yield from self._histogram(
                name,
                text,
                DURATION,
                LABELS,
                Series(cells.frames[kind], keys, cells.cumulative[kind], cells.sums[kind]),
            )
        # Per cell its input tokens, then its output tokens.
        yield from self._histogram(
            "gen_ai_client_token_usage",
            "Tokens per request by type, input or output "
            "(OpenTelemetry gen_ai.client.token.usage).",
            TOKENS,
            [*LABELS, TOKEN_TYPE],
            Series(
                cells.frames["input"],  # the output's too
                [(*key, kind) for key in keys for kind in ("input", "output")],
                list(
                    chain.from_iterable(
                        zip(cells.cumulative["input"], cells.cumulative["output"], strict=True)
                    )
                ),
                list(
                    chain.from_iterable(zip(cells.sums["input"], cells.sums["output"], strict=True))
                ),
            ),
        )
        yield from self._counter(
            "ferrox_stats_requests", "Finished requests.", LABELS, keys, cells.requests
        )

        serving = state.get("serving") or {}
        tokens = CounterMetricFamily(
            "ferrox_stats_tokens", "Tokens of finished requests, by type.", labels=[TOKEN_TYPE]
        )
        tokens.add_metric(["input"], serving.get("prompt_tokens_total", 0))
        tokens.add_metric(["output"], serving.get("completion_tokens_total", 0))
        yield tokens
        yield GaugeMetricFamily(
            "ferrox_stats_requests_running",
            "Requests in flight on this host's processes.",
            value=serving.get("active", 0),
        )
        aborts = CounterMetricFamily(
            "ferrox_stats_aborts", "Requests that ended aborted, by reason.", labels=["reason"]
        )
        for reason, count in sorted((serving.get("aborts") or {}).items()):
            aborts.add_metric([reason], count)
        yield aborts

        yield GaugeMetricFamily(
            "ferrox_stats_instances",
            "Processes of this host publishing their state (running now).",
            value=self.totals.instances,
        )
        yield CounterMetricFamily(
            "ferrox_stats_instances_lost",
            "Processes of this host that ended without the clean-shutdown mark (killed, crashed).",
            value=self.totals.lost["instances"],
        )
        yield GaugeMetricFamily(
            "ferrox_stats_metrics_files_skipped",
            "State files in METRICS_DIR this scrape could not read (see the log).",
            value=self.totals.skipped,
        )
        yield from _measured(
            "ferrox_stats_pool_occupancy",
            "The engine's KV pool in use, 0 to 1: the freshest report (absent: none).",
            self.totals.pool_occupancy,
        )
        yield from _measured(
            "ferrox_stats_queue_depth",
            "Requests the engine queues: the freshest report (absent: none).",
            self.totals.queue_depth,
        )
        yield from self._archive(state.get("archive"))

    def _archive(self, archive: Mapping[str, Any] | None) -> Iterator[Metric]:
        if archive is None:
            return  # no process archives: nothing to count, and no zeros pretending to
        for field, text in (
            ("accepted", "Records handed to the archive."),
            ("persisted", "Records the archive committed."),
            ("duplicates", "Records the archive already held (idempotent ingest)."),
            ("dead_lettered", "Records the archive could never write (dead-lettered)."),
        ):
            yield CounterMetricFamily(
                f"ferrox_stats_archive_{field}", text, value=archive.get(field, 0)
            )
        yield GaugeMetricFamily(
            "ferrox_stats_archive_pending",
            "Records waiting to be archived on this host's running processes.",
            value=archive.get("pending", 0),
        )
        dropped = CounterMetricFamily(
            "ferrox_stats_archive_dropped", "Records never archived, by reason.", labels=["reason"]
        )
        for reason, count in sorted((archive.get("dropped") or {}).items()):
            dropped.add_metric([reason], count)
        yield dropped
        yield CounterMetricFamily(
            "ferrox_stats_archive_lost",
            "Records pending in the last state of processes that ended without the "
            "clean-shutdown mark: up to this many were never archived.",
            value=self.totals.lost["pending"],
        )

    # -- vLLM's names ---------------------------------------------------------------------

    def _vllm(self, state: Mapping[str, Any], cells: Merged) -> Iterator[Metric]:
        p = self.prefix
        by_model = cells.by_model()
        label = ["model_name"]
        for name, kind, text in (
            ("e2e_request_latency_seconds", "duration", "End-to-end request latency."),
            ("time_to_first_token_seconds", "ttft", "Time to the first token."),
            ("time_per_output_token_seconds", "tpot", "Time per output token after the first."),
        ):
            yield from self._histogram(
                f"{p}:{name}",
                text,
                DURATION,
                label,
                Series(
                    by_model.frames[kind],
                    by_model.keys,
                    by_model.cumulative[kind],
                    by_model.sums[kind],
                ),
            )
        for name, counts, text in (
            ("prompt_tokens", by_model.input_tokens, "Prefill tokens processed."),
            ("generation_tokens", by_model.output_tokens, "Generation tokens processed."),
        ):
            counter = CounterMetricFamily(f"{p}:{name}", text, labels=label)
            for (model,), n in zip(by_model.keys, counts, strict=True):
                counter.add_metric([model], n)
            yield counter
        serving = state.get("serving") or {}
        # Host-wide, no model_name: the state counts requests in flight, not their models.
        yield GaugeMetricFamily(
            f"{p}:num_requests_running",
            "Requests in flight on this host.",
            value=serving.get("active", 0),
        )
        yield from _measured(
            f"{p}:num_requests_waiting",
            "Requests the engine queues (absent: never reported).",
            self.totals.queue_depth,
        )
        yield from _measured(
            f"{p}:kv_cache_usage_perc",
            "KV-cache usage, 1 is 100 percent (absent: never reported).",
            self.totals.pool_occupancy,
        )


def _measured(name: str, documentation: str, value: float | None) -> Iterator[Metric]:
    """A gauge only when something measured it (rule 1: absent, never a made-up 0)."""
    if value is not None:
        yield GaugeMetricFamily(name, documentation, value=value)


def exposition(totals: HostTotals) -> bytes:
    """``totals`` in the text format, in the families the settings name."""
    text: list[Text] = []
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        HostCollector(totals, conf.METRICS_FAMILIES, conf.METRICS_VLLM_PREFIX, as_text=text)
    )
    rest = generate_latest(registry)  # collects: fills ``text`` on the way
    # One ``%`` over every family written here, the rest last: the body (megabytes at
    # a few hundred cells) is built once, never copied again to be joined.
    template = _joined_template(tuple(part.template for part in text))
    return template % (*chain.from_iterable(part.values for part in text), rest)


def scrape() -> bytes:
    """This host's metrics now: this process's fresh state is published first, so a
    scrape never reads this worker older than the others.

    A scrape counts only what the host's files hold once it answers: when its fresh
    state was not written (the heartbeat thread of this process was writing one it read
    earlier, or a newer one is there already), this process is read from its file like
    every other worker. Counting the unwritten state would let the next scrape, of
    another worker, read that file and step back by the requests in between.
    """
    doc = process_state(live.get_recorder())  # state version 2: the octave form
    written = host_state.publish(doc, wait=False)
    own = doc if written or not host_state.usable() else None
    return exposition(host_state.host_totals(own, now_ms=int(doc["at_ms"])))
