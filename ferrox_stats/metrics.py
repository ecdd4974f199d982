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

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from . import host_state, live
from .conf import conf
from .core.breakdown import Cell
from .core.distribution import Distribution, bucket_index, bucket_upper
from .host_state import HostTotals
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


def _exact(bounds: tuple[float, ...]) -> list[int]:
    """The bucket each bound is the upper bound of (powers of two always are one)."""
    tops = [bucket_index(bound) for bound in bounds]
    assert all(bucket_upper(t) == b for t, b in zip(tops, bounds, strict=True))
    return tops


# As every Prometheus client writes a bound ("0.5", "1.0", "6.7108864e+07").
_LE_DURATION: list[str] = [floatToGoString(b) for b in DURATION_BOUNDS]  # type: ignore[no-untyped-call]
_LE_TOKENS: list[str] = [floatToGoString(b) for b in TOKEN_BOUNDS]  # type: ignore[no-untyped-call]
DURATION = (_exact(DURATION_BOUNDS), _LE_DURATION)
TOKENS = (_exact(TOKEN_BOUNDS), _LE_TOKENS)


def _buckets(dist: Distribution, tops: list[int], names: list[str]) -> list[tuple[str, float]]:
    """Cumulative ``le`` buckets, ``+Inf`` last (the count): ``count_at_most`` at every
    bound (each the upper bound of bucket ``tops[i]``), in one pass over the counts."""
    items = sorted(dist.counts.items())
    end = len(items)
    seen, i = dist.zeros, 0
    buckets: list[tuple[str, float]] = []
    for top, name in zip(tops, names, strict=True):
        while i < end and items[i][0] <= top:
            seen += items[i][1]
            i += 1
        buckets.append((name, seen))
    buckets.append(("+Inf", dist.count))
    return buckets


Series = Iterable[tuple[list[str], Distribution]]


def _histogram(
    name: str,
    documentation: str,
    unit_bounds: tuple[list[int], list[str]],
    labels: list[str],
    series: Series,
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation, labels=labels)
    tops, names = unit_bounds
    for values, dist in series:
        family.add_metric(values, _buckets(dist, tops, names), dist.total)
    return family


def _histogram_text(
    name: str,
    documentation: str,
    unit_bounds: tuple[list[int], list[str]],
    labels: list[str],
    series: Series,
) -> str:
    """The family ``_histogram`` builds, in the text format ``generate_latest`` writes.

    Written here because the histograms are nearly every sample of a scrape, and
    ``generate_latest`` formats each sample on its own (its labels escaped, its value
    through ``floatToGoString``): about 7 µs a sample, 45 ms for a host of 30 cells.
    Here a series' labels are escaped once and its buckets joined. A test holds this to
    what ``generate_latest`` writes for the same family, sample by sample.
    """
    tops, names = unit_bounds
    help_text = documentation.replace("\\", r"\\").replace("\n", r"\n")
    out = [f"# HELP {name} {help_text}\n# TYPE {name} histogram\n"]
    for values, dist in series:
        labelled = ",".join(
            f'{label}="{_label_value(value)}"' for label, value in zip(labels, values, strict=True)
        )
        bucket = f'{name}_bucket{{{labelled},le="'
        out.extend([f'{bucket}{le}"}} {count}\n' for le, count in _buckets(dist, tops, names)])
        out.append(f"{name}_count{{{labelled}}} {dist.count}\n")
        out.append(f"{name}_sum{{{labelled}}} {floatToGoString(dist.total)}\n")  # type: ignore[no-untyped-call]
    return "".join(out)


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
        histograms_as_text: list[str] | None = None,
    ) -> None:
        self.totals = totals
        self.families = frozenset(families)
        self.prefix = prefix
        # Given a list, the histogram families are written into it as text (see
        # ``_histogram_text``) instead of collected.
        self.histograms_as_text = histograms_as_text

    def _histogram(
        self,
        name: str,
        documentation: str,
        unit_bounds: tuple[list[int], list[str]],
        labels: list[str],
        series: Series,
    ) -> Iterator[Metric]:
        if self.histograms_as_text is None:
            yield _histogram(name, documentation, unit_bounds, labels, series)
        else:
            self.histograms_as_text.append(
                _histogram_text(name, documentation, unit_bounds, labels, series)
            )

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

    def _otel(
        self, state: Mapping[str, Any], cells: Mapping[tuple[str, str, str], Cell]
    ) -> Iterator[Metric]:
        keys = sorted(cells)
        yield from self._histogram(
            "gen_ai_server_request_duration_seconds",
            "Time from the request to its last byte "
            "(OpenTelemetry gen_ai.server.request.duration).",
            DURATION,
            LABELS,
            ((list(key), cells[key].duration) for key in keys),
        )
        yield from self._histogram(
            "gen_ai_server_time_to_first_token_seconds",
            "Time to the first output token (OpenTelemetry gen_ai.server.time_to_first_token).",
            DURATION,
            LABELS,
            ((list(key), cells[key].ttft) for key in keys),
        )
        yield from self._histogram(
            "gen_ai_server_time_per_output_token_seconds",
            "Decode time per output token after the first "
            "(OpenTelemetry gen_ai.server.time_per_output_token).",
            DURATION,
            LABELS,
            ((list(key), cells[key].tpot) for key in keys),
        )
        yield from self._histogram(
            "gen_ai_client_token_usage",
            "Tokens per request by type, input or output "
            "(OpenTelemetry gen_ai.client.token.usage).",
            TOKENS,
            [*LABELS, TOKEN_TYPE],
            (
                ([*key, kind], dist)
                for key in keys
                for kind, dist in (("input", cells[key].input), ("output", cells[key].output))
            ),
        )

        requests = CounterMetricFamily("ferrox_stats_requests", "Finished requests.", labels=LABELS)
        for key in keys:
            requests.add_metric(list(key), cells[key].requests)
        yield requests

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

    def _vllm(
        self, state: Mapping[str, Any], cells: Mapping[tuple[str, str, str], Cell]
    ) -> Iterator[Metric]:
        p = self.prefix
        by_model: dict[str, list[Cell]] = {}
        for (model, _route, _outcome), cell in cells.items():
            by_model.setdefault(model, []).append(cell)
        models = sorted(by_model)
        label = ["model_name"]
        merged = {
            kind: {m: Distribution.merged(getattr(c, kind) for c in by_model[m]) for m in models}
            for kind in ("duration", "ttft", "tpot")
        }
        for name, kind, text in (
            ("e2e_request_latency_seconds", "duration", "End-to-end request latency."),
            ("time_to_first_token_seconds", "ttft", "Time to the first token."),
            ("time_per_output_token_seconds", "tpot", "Time per output token after the first."),
        ):
            yield from self._histogram(
                f"{p}:{name}", text, DURATION, label, (([m], merged[kind][m]) for m in models)
            )
        for name, field, text in (
            ("prompt_tokens", "input_tokens", "Prefill tokens processed."),
            ("generation_tokens", "output_tokens", "Generation tokens processed."),
        ):
            counter = CounterMetricFamily(f"{p}:{name}", text, labels=label)
            for m in models:
                counter.add_metric([m], sum(getattr(c, field) for c in by_model[m]))
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
    histograms: list[str] = []
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        HostCollector(
            totals,
            conf.METRICS_FAMILIES,
            conf.METRICS_VLLM_PREFIX,
            histograms_as_text=histograms,
        )
    )
    rest = generate_latest(registry)  # collects: fills ``histograms`` on the way
    return "".join(histograms).encode() + rest


def scrape() -> bytes:
    """This host's metrics now: this process's fresh state is published first, so a
    scrape never reads this worker older than the others.

    A scrape counts only what the host's files hold once it answers: when its fresh
    state was not written (the heartbeat thread of this process was writing one it read
    earlier, or a newer one is there already), this process is read from its file like
    every other worker. Counting the unwritten state would let the next scrape, of
    another worker, read that file and step back by the requests in between.
    """
    doc = host_state.by_octave(process_state(live.get_recorder()))
    written = host_state.publish(doc, wait=False)
    own = doc if written or not host_state.usable() else None
    return exposition(host_state.host_totals(own, now_ms=int(doc["at_ms"])))
