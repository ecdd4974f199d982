"""``/metrics`` (``ferrox_stats.metrics``): names, labels, exact buckets, absent gauges,
the vLLM family, access, the database down, and Prometheus's own promtool."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test import Client
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from ferrox_stats import access, host_state, live, metrics, octave, tokens
from ferrox_stats.core.breakdown import OUTCOMES, Breakdown, Cell
from ferrox_stats.core.distribution import Distribution
from ferrox_stats.host_state import HostTotals, publish
from ferrox_stats.state import merge_states, process_state
from tests.api.conftest import PREFIX, TokenClient
from tests.conftest import FakeClock, grant
from tests.factories import make_record
from tests.faults import TokenDatabase
from tests.test_host_state import dead_pid, state

URL = PREFIX + "/metrics"

OTEL_HISTOGRAMS = {
    "gen_ai_server_request_duration_seconds",
    "gen_ai_server_time_to_first_token_seconds",
    "gen_ai_server_time_per_output_token_seconds",
    "gen_ai_client_token_usage",
}


@pytest.fixture(autouse=True)
def metrics_dir(settings: Any, tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "metrics"
    settings.FERROX_STATS = {**settings.FERROX_STATS, "METRICS_DIR": str(where)}
    host_state.reset()
    yield where
    host_state.reset()


def families(text: str | bytes) -> dict[str, Any]:
    if isinstance(text, bytes):
        text = text.decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def samples(text: str | bytes, name: str) -> list[Sample]:
    return [s for f in families(text).values() for s in f.samples if s.name == name]


def value(text: str | bytes, name: str, **labels: str) -> float:
    [sample] = [s for s in samples(text, name) if s.labels == labels]
    return float(sample.value)


def breakdown_wire(*records: Any) -> list[dict[str, Any]]:
    breakdown = Breakdown()
    for record in records:
        breakdown.observe(record)
    return breakdown.to_wire()


def totals_of(*records: Any, archive: bool = False, **gauges: float | None) -> HostTotals:
    """Host totals whose breakdown observed ``records``."""
    doc = state("w/1/a", completed=len(records), archive=archive)
    doc["breakdown"] = breakdown_wire(*records)
    return HostTotals(
        state=merge_states([doc]),
        cells=octave.merged([octave.of_document(doc)]),
        instances=1,
        pool_occupancy=gauges.get("pool_occupancy"),
        queue_depth=gauges.get("queue_depth"),
    )


def expose(totals: HostTotals, families: tuple[str, ...] = ("otel",), prefix: str = "vllm") -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(metrics.HostCollector(totals, families, prefix))
    return generate_latest(registry).decode()


def track(recorder: live.Recorder, clock: FakeClock, model: str = "m", **finish: Any) -> None:
    with recorder.track(route="/v1/chat/completions", model=model, stream=True) as t:
        clock.advance(0.25)
        t.started()
        t.tokens(prompt=40)
        t.tokens(completion=1)
        clock.advance(0.5)
        t.tokens(completion=4)
        t.finish(status=200, finish_reason="stop", **finish)


# -- names and labels ----------------------------------------------------------------------


def test_the_otel_names_with_bounded_labels() -> None:
    text = expose(totals_of(make_record(model="llama", route="/v1/chat/completions")))
    found = families(text)
    assert OTEL_HISTOGRAMS <= set(found)
    for name in OTEL_HISTOGRAMS:
        assert found[name].type == "histogram"
    labels = {"model": "llama", "route": "/v1/chat/completions", "outcome": "ok"}
    assert value(text, "gen_ai_server_request_duration_seconds_count", **labels) == 1
    assert value(text, "gen_ai_client_token_usage_sum", gen_ai_token_type="input", **labels) == 512
    assert value(text, "gen_ai_client_token_usage_sum", gen_ai_token_type="output", **labels) == 11
    assert value(text, "ferrox_stats_requests_total", **labels) == 1
    assert value(text, "ferrox_stats_requests_running") == 0
    assert value(text, "ferrox_stats_instances") == 1
    assert found["ferrox_stats_aborts"].type == "counter"


def test_outcomes_are_labelled() -> None:
    text = expose(
        totals_of(
            make_record(model="m", route="r"),
            make_record(model="m", route="r", aborted="client_disconnect"),
            make_record(model="m", route="r", error="upstream_error", status=502),
        )
    )
    for outcome in ("ok", "aborted", "error"):
        labels = {"model": "m", "route": "r", "outcome": outcome}
        assert value(text, "ferrox_stats_requests_total", **labels) == 1


def test_models_past_the_cap_are_other() -> None:
    records = [make_record(model=f"model-{i:02d}") for i in range(25)]
    text = expose(totals_of(*records))
    models = {s.labels["model"] for s in samples(text, "ferrox_stats_requests_total")}
    assert len(models) == 21 and "other" in models
    assert (
        value(
            text,
            "ferrox_stats_requests_total",
            model="other",
            route=records[0].route or "",
            outcome="ok",
        )
        == 5
    )


# -- histograms: cumulative, exact at the bounds ---------------------------------------------


def test_duration_buckets_are_cumulative_and_exact_at_powers_of_two() -> None:
    durations_s = [0.5, 1.0, 1.0000001, 1.5, 3.0, 200.0]
    text = expose(totals_of(*(make_record(duration_ms=d * 1000) for d in durations_s)))
    buckets = {
        s.labels["le"]: s.value
        for s in samples(text, "gen_ai_server_request_duration_seconds_bucket")
    }
    assert buckets["0.25"] == 0
    assert buckets["0.5"] == 1  # a value on a bound is in it: le means "at most"
    assert buckets["1.0"] == 2
    assert buckets["2.0"] == 4
    assert buckets["4.0"] == 5
    assert buckets["128.0"] == 5
    assert buckets["+Inf"] == 6
    counts = [buckets[le] for le in [*metrics._LE_DURATION, "+Inf"]]
    assert counts == sorted(counts)
    assert len(buckets) == len(metrics.DURATION_BOUNDS) + 1
    [total] = samples(text, "gen_ai_server_request_duration_seconds_sum")
    assert total.value == pytest.approx(sum(durations_s))
    [count] = samples(text, "gen_ai_server_request_duration_seconds_count")
    assert count.value == 6


def test_token_buckets_are_powers_of_four() -> None:
    text = expose(totals_of(make_record(prompt_tokens=4, completion_tokens=5)))
    buckets = {
        s.labels["le"]: s.value
        for s in samples(text, "gen_ai_client_token_usage_bucket")
        if s.labels["gen_ai_token_type"] == "input"
    }
    assert (buckets["1.0"], buckets["4.0"], buckets["16.0"], buckets["+Inf"]) == (0, 1, 1, 1)
    assert len(buckets) == len(metrics.TOKEN_BOUNDS) + 1


def test_a_value_never_measured_is_not_a_zero_in_the_histogram() -> None:
    text = expose(totals_of(make_record(ttft_ms=None, decode_ms=None)))
    assert [s.value for s in samples(text, "gen_ai_server_time_to_first_token_seconds_count")] == [
        0
    ]
    assert [s.value for s in samples(text, "gen_ai_server_request_duration_seconds_count")] == [1]


# -- absent, never zero --------------------------------------------------------------------


def test_unmeasured_gauges_and_an_archive_nobody_runs_are_absent() -> None:
    text = expose(totals_of(make_record()), ("otel", "vllm"))
    names = set(families(text))
    for absent in (
        "ferrox_stats_pool_occupancy",
        "ferrox_stats_queue_depth",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "ferrox_stats_archive_pending",
        "ferrox_stats_archive_persisted",
    ):
        assert absent not in names


def test_measured_gauges_and_the_archive_are_present() -> None:
    text = expose(
        totals_of(make_record(), archive=True, pool_occupancy=0.5, queue_depth=3), ("otel", "vllm")
    )
    assert value(text, "ferrox_stats_pool_occupancy") == 0.5
    assert value(text, "ferrox_stats_queue_depth") == 3
    assert value(text, "vllm:kv_cache_usage_perc") == 0.5
    assert value(text, "vllm:num_requests_waiting") == 3
    assert value(text, "ferrox_stats_archive_accepted_total") == 1
    assert value(text, "ferrox_stats_archive_pending") == 0
    assert value(text, "ferrox_stats_archive_lost_total") == 0


# -- the vLLM family -----------------------------------------------------------------------


def test_the_vllm_family_by_model_name_with_its_prefix() -> None:
    records = [
        make_record(model="a", route="r1", prompt_tokens=10, completion_tokens=3),
        make_record(model="a", route="r2", prompt_tokens=20, completion_tokens=4),
        make_record(model="b", route="r1", prompt_tokens=5, completion_tokens=2),
    ]
    text = expose(totals_of(*records), ("vllm",), "engine")
    names = set(families(text))
    assert not names & OTEL_HISTOGRAMS
    assert {
        "engine:e2e_request_latency_seconds",
        "engine:time_to_first_token_seconds",
        "engine:time_per_output_token_seconds",
        "engine:prompt_tokens",
        "engine:generation_tokens",
        "engine:num_requests_running",
    } <= names
    assert value(text, "engine:e2e_request_latency_seconds_count", model_name="a") == 2
    assert value(text, "engine:prompt_tokens_total", model_name="a") == 30
    assert value(text, "engine:generation_tokens_total", model_name="b") == 2


@pytest.mark.parametrize("chosen", [("otel",), ("vllm",), ("otel", "vllm")])
def test_the_written_histograms_are_what_prometheus_client_writes(
    settings: Any, chosen: tuple[str, ...]
) -> None:
    """``exposition`` writes the histograms itself (``_histogram_text``, for speed): the
    same families and samples as ``generate_latest`` over the collector, hostile label
    values included."""
    settings.FERROX_STATS = {
        **settings.FERROX_STATS,
        "METRICS_FAMILIES": list(chosen),
        "METRICS_VLLM_PREFIX": "engine",
    }
    records = [
        make_record(model='q"uote\\back\nline', route="/v1/chat/completions"),
        make_record(model="ünïcødé", route="r", duration_ms=0.0, ttft_ms=None),
        make_record(model="m", route="r", error="boom", completion_tokens=1_000_000),
        make_record(model="m", route="r", aborted="client_disconnect", decode_ms=None),
        make_record(model="m", route="r", duration_ms=123_456_789.5, prompt_tokens=0),
    ]
    totals = totals_of(*records, archive=True, pool_occupancy=0.5, queue_depth=3)

    def parsed(text: str | bytes) -> dict[str, list[tuple[str, list[tuple[str, str]], float]]]:
        return {
            name: sorted((s.name, sorted(s.labels.items()), s.value) for s in family.samples)
            for name, family in families(text).items()
        }

    written = metrics.exposition(totals)
    assert parsed(written) == parsed(expose(totals, chosen, "engine"))
    assert '="q\\"uote\\\\back\\nline"' in written.decode()


# -- the endpoint --------------------------------------------------------------------------


@pytest.fixture
def read_client(db: None) -> TokenClient:
    _, secret = tokens.issue("prometheus")
    return TokenClient(secret)


@pytest.mark.django_db
def test_a_scrape_is_the_whole_host_in_the_text_format(
    recorder: live.Recorder, clock: FakeClock, read_client: TokenClient, metrics_dir: Path
) -> None:
    track(recorder, clock)
    other = state("w/2/other", completed=4)
    other["breakdown"] = breakdown_wire(*[make_record(model="m")] * 4)
    publish(other)
    response = read_client.get(URL, HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = response.content
    assert value(text, "ferrox_stats_instances") == 2
    counts = samples(text, "gen_ai_server_request_duration_seconds_count")
    assert sum(s.value for s in counts) == 5
    # This worker published its own fresh state before it read the others'.
    assert (metrics_dir / host_state.file_name(recorder.instance)).exists()


@pytest.mark.django_db
def test_a_scrape_leaves_the_global_registry_alone(read_client: TokenClient) -> None:
    before = set(REGISTRY._names_to_collectors)
    assert read_client.get(URL).status_code == 200
    assert set(REGISTRY._names_to_collectors) == before


@pytest.mark.django_db
def test_host_counters_survive_a_worker_that_ended(
    recorder: live.Recorder, clock: FakeClock, read_client: TokenClient
) -> None:
    gone = dead_pid()
    ended = state(f"w/{gone}/x", pid=gone, completed=7, pending=2, archive=True)
    ended["breakdown"] = breakdown_wire(*[make_record(model="m")] * 7)
    publish(ended)
    first = read_client.get(URL).content
    second = read_client.get(URL).content
    for text in (first, second):
        assert sum(s.value for s in samples(text, "ferrox_stats_requests_total")) == 7
        assert value(text, "ferrox_stats_instances_lost_total") == 1


@pytest.mark.django_db
@pytest.mark.parametrize("accept", ["application/json", "text/html", "*/*", ""])
def test_the_body_is_text_whatever_accept_asks(read_client: TokenClient, accept: str) -> None:
    response = read_client.get(URL, HTTP_ACCEPT=accept)
    assert response.status_code == 200
    assert response["Content-Type"] == metrics.CONTENT_TYPE


@pytest.mark.django_db
def test_closed_by_default(client: Client, django_user_model: Any) -> None:
    response = client.get(URL)
    assert response.status_code in (401, 403)
    assert response.json()["error"]["status"] == response.status_code
    _, ingest_only = tokens.issue("engine", read=False, ingest=True, replica="gpu-1")
    assert TokenClient(ingest_only).get(URL).status_code == 403
    client.force_login(django_user_model.objects.create_user("staff", is_staff=True))
    assert client.get(URL).status_code == 403  # is_staff alone opens nothing


@pytest.mark.django_db
def test_a_session_with_the_dashboard_permission_reads_it(
    client: Client, django_user_model: Any
) -> None:
    user = grant(django_user_model.objects.create_user("ops"), access.DASHBOARD)
    client.force_login(user)
    assert client.get(URL).status_code == 200


@pytest.mark.django_db
def test_public_endpoints_can_open_it(settings: Any, client: Client) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "PUBLIC_ENDPOINTS": ["metrics"]}
    assert client.get(URL).status_code == 200


def refuse(self: BaseDatabaseWrapper) -> None:
    raise OperationalError("connection refused (the database is down)")


@pytest.mark.django_db
def test_a_known_token_scrapes_with_the_database_down(
    recorder: live.Recorder,
    clock: FakeClock,
    token_db: TokenDatabase,
    inline_probes: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, secret = tokens.issue("prometheus")
    client = TokenClient(secret)
    assert client.get(URL).status_code == 200  # the token, checked once
    track(recorder, clock)
    token_db.down = True
    # Every connection of every alias fails from now on, as with the server stopped.
    monkeypatch.setattr(BaseDatabaseWrapper, "ensure_connection", refuse)
    clock.advance(60)  # past TOKEN_CACHE_S: the token is due to be asked for again
    response = client.get(URL)
    assert response.status_code == 200
    assert sum(s.value for s in samples(response.content, "ferrox_stats_requests_total")) == 1


def test_a_public_scrape_needs_no_database_at_all(
    settings: Any, recorder: live.Recorder, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No django_db mark: pytest-django refuses any query, and every connection fails.
    monkeypatch.setattr(BaseDatabaseWrapper, "ensure_connection", refuse)
    settings.FERROX_STATS = {**settings.FERROX_STATS, "PUBLIC_ENDPOINTS": ["metrics"]}
    track(recorder, clock)
    response = Client().get(URL)
    assert response.status_code == 200
    assert sum(s.value for s in samples(response.content, "ferrox_stats_requests_total")) == 1


# -- Prometheus's own checker ----------------------------------------------------------------


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true checks /metrics with promtool, but it is not installed")
        pytest.skip("promtool is not installed (Debian's prometheus package; scripts/test.sh)")
    return found


def scrape_with_everything(settings: Any, recorder: live.Recorder, clock: FakeClock) -> bytes:
    settings.FERROX_STATS = {
        **settings.FERROX_STATS,
        "PUBLIC_ENDPOINTS": ["metrics"],
        "METRICS_FAMILIES": ["otel", "vllm"],
    }
    recorder.observe_gauges(pool_used=3, pool_total=4, queue_depth=2)
    track(recorder, clock, model='a "quoted"\\model\nname')
    track(recorder, clock, model="b")
    gone = dead_pid()
    ended = state(f"w/{gone}/x", pid=gone, completed=1, pending=1, aborts={"timeout": 1})
    ended["archive"]["dropped"] = {"queue_full": 2}
    publish(ended)  # an ended process: the archive's families, aborts, drops and losses
    return bytes(Client().get(URL).content)


def check_metrics(body: bytes) -> tuple[int, list[str]]:
    checked = subprocess.run(
        [promtool(), "check", "metrics"], input=body, capture_output=True, timeout=30
    )
    return checked.returncode, (checked.stdout + checked.stderr).decode().splitlines()


def test_promtool_accepts_a_real_scrape(
    settings: Any, recorder: live.Recorder, clock: FakeClock
) -> None:
    body = scrape_with_everything(settings, recorder, clock)
    settings.FERROX_STATS = {**settings.FERROX_STATS, "METRICS_FAMILIES": ["otel"]}
    otel = bytes(Client().get(URL).content)
    assert b"ferrox_stats_archive_lost_total 1.0" in otel
    assert b"ferrox_stats_pool_occupancy 0.75" in otel
    assert check_metrics(otel) == (0, [])
    # vLLM's own names carry a colon, which promtool's linter reserves for recording
    # rules (vLLM's /metrics draws the same remarks): that, and nothing else.
    assert b"vllm:kv_cache_usage_perc 0.75" in body
    assert b"vllm:num_requests_waiting 2.0" in body
    code, remarks = check_metrics(body)
    assert code == 3  # lint remarks, not a parse error (1)
    assert remarks
    assert all(r.startswith("vllm:") and r.endswith("should not contain ':'") for r in remarks)


# -- the example Grafana dashboard -------------------------------------------------------------

DASHBOARD = Path(__file__).resolve().parent.parent / "docs" / "grafana-dashboard.json"


def dashboard_queries() -> list[str]:
    document = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for panel in document["panels"] for t in panel["targets"]]
    queries += [v["query"]["query"] for v in document["templating"]["list"] if "definition" in v]
    return queries


def as_promql(query: str) -> str:
    """A panel's query as Prometheus sees it once Grafana fills in its variables."""
    for variable, value in (("$__rate_interval", "5m"), ("$job", ".*"), ("$model", ".*")):
        query = query.replace(variable, value)
    return query.replace("$route", ".*")


def test_the_dashboard_queries_only_names_a_scrape_has(
    settings: Any, recorder: live.Recorder, clock: FakeClock
) -> None:
    body = scrape_with_everything(settings, recorder, clock).decode()
    exposed = {s.name for f in text_string_to_metric_families(body) for s in f.samples}
    used = {
        name
        for query in dashboard_queries()
        for name in re.findall(r"\b(?:gen_ai|ferrox_stats)_[a-z_]+", query)
    }
    used.discard("gen_ai_token_type")  # a label
    assert used and used <= exposed, sorted(used - exposed)


def test_the_dashboard_queries_are_promql(tmp_path: Path) -> None:
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{n}", "expr": as_promql(query)}
                    for n, query in enumerate(dashboard_queries())
                    if not query.startswith("label_values(")
                ],
            }
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    checked = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, timeout=30
    )
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()


@given(st.lists(st.floats(min_value=0, max_value=1e9, allow_nan=False), max_size=300))
def test_the_buckets_are_count_at_most_at_every_bound(values: list[float]) -> None:
    dist = Distribution()
    for v in values:
        dist.add(v)
    cell = {"model": "m", "route": "r", "outcome": "ok", "requests": 1}
    cell |= {"input_tokens": 0, "output_tokens": 0}
    cell |= {name: dist.octaves() for name in ("duration", "ttft", "tpot", "input", "output")}
    merged = octave.merged([octave.checked([cell])])
    for name, bounds, at in (
        ("duration", metrics.DURATION_BOUNDS, metrics.DURATION),
        ("input", metrics.TOKEN_BOUNDS, metrics.TOKENS),
    ):
        [cumulative] = merged.cumulative[name]
        buckets = metrics._buckets(cumulative, merged.frames[name], at)
        expected = [dist.count_at_most(bound) for bound in bounds]
        assert [count for _, count in buckets] == [*expected, dist.count]
        assert expected == [sum(1 for v in values if v <= bound) for bound in bounds]
        assert [name for name, _ in buckets] == [*at.names, "+Inf"]


def test_a_scrape_never_counts_more_than_its_workers_file_holds(
    recorder: live.Recorder, clock: FakeClock
) -> None:
    """A scrape whose fresh state could not be written (this process's heartbeat thread
    was writing one it read earlier) reads its own file like any other worker's: had it
    counted the unwritten state, the next scrape, of another worker reading that file,
    would step back."""

    def requests(text: bytes) -> float:
        return sum(s.value for s in samples(text, "gen_ai_server_request_duration_seconds_count"))

    track(recorder, clock)
    assert publish(process_state(recorder))  # the heartbeat wrote: one request
    track(recorder, clock)  # a second, finished after that write
    with host_state._publish_lock:  # the heartbeat thread is writing again
        during = metrics.scrape()
    another_worker = metrics.exposition(host_state.host_totals())
    assert requests(during) == requests(another_worker) == 1
    assert requests(metrics.scrape()) == 2  # written now, so counted


# -- the octave form, merged by column, against Distributions merged one by one -------------

SECONDS = st.one_of(
    st.just(0.0),
    st.floats(min_value=1e-12, max_value=1e-3),  # below the lowest bound (2^-10)
    st.floats(min_value=1e-3, max_value=300.0),
    st.floats(min_value=300.0, max_value=1e9),  # above the highest (2^7)
)
TOKEN_COUNTS = st.integers(min_value=0, max_value=2**30)
CELL_KEYS = st.tuples(
    st.sampled_from(["a", "b", 'q"%d\\']), st.sampled_from(["r1", "r2"]), st.sampled_from(OUTCOMES)
)


@st.composite
def cells_of_a_part(draw: st.DrawFn) -> dict[tuple[str, str, str], Cell]:
    cells = {}
    for key in draw(st.lists(CELL_KEYS, max_size=5, unique=True)):
        cell = Cell()
        cell.requests = draw(st.integers(min_value=0, max_value=100))
        cell.input_tokens = draw(st.integers(min_value=0, max_value=10**6))
        cell.output_tokens = draw(st.integers(min_value=0, max_value=10**6))
        for name in ("duration", "ttft", "tpot"):
            getattr(cell, name).add_many(draw(st.lists(SECONDS, max_size=8)))
        for name in ("input", "output"):
            getattr(cell, name).add_many(draw(st.lists(TOKEN_COUNTS, max_size=8)))
        cells[key] = cell
    return cells


def reference_families(parts: list[dict[tuple[str, str, str], Cell]]) -> str:
    """The breakdown's families as the exposition wrote them from ``Distribution``s
    merged cell by cell (before the octave form): ``count_at_most`` at every bound."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

    merged: dict[tuple[str, str, str], Cell] = {}
    for part in parts:
        for key, cell in part.items():
            merged.setdefault(key, Cell()).merge(cell)

    def histogram(name: str, labels: list[str], series: Any, bounds: Any) -> Any:
        family = HistogramMetricFamily(name, "x", labels=labels)
        for values, dist in series:
            buckets = [(le, dist.count_at_most(b)) for le, b in zip(*bounds, strict=True)]
            family.add_metric(values, [*buckets, ("+Inf", dist.count)], dist.total)
        return family

    time_bounds = (metrics.DURATION.names, metrics.DURATION_BOUNDS)
    token_bounds = (metrics.TOKENS.names, metrics.TOKEN_BOUNDS)
    keys = sorted(merged)
    models = sorted({key[0] for key in keys})
    families = [
        histogram(name, LABELS, [(list(k), getattr(merged[k], kind)) for k in keys], time_bounds)
        for name, kind in TIME_FAMILIES.items()
    ]
    families.append(
        histogram(
            "gen_ai_client_token_usage",
            [*LABELS, "gen_ai_token_type"],
            [([*k, t], getattr(merged[k], t)) for k in keys for t in ("input", "output")],
            token_bounds,
        )
    )
    requests = CounterMetricFamily("ferrox_stats_requests", "x", labels=LABELS)
    for key in keys:
        requests.add_metric(list(key), merged[key].requests)
    families.append(requests)
    for name, kind in VLLM_FAMILIES.items():
        by_model = [
            ([m], Distribution.merged(getattr(merged[k], kind) for k in keys if k[0] == m))
            for m in models
        ]
        families.append(histogram(name, ["model_name"], by_model, time_bounds))
    for name, field in (
        ("vllm:prompt_tokens", "input_tokens"),
        ("vllm:generation_tokens", "output_tokens"),
    ):
        counter = CounterMetricFamily(name, "x", labels=["model_name"])
        for m in models:
            counter.add_metric([m], sum(getattr(merged[k], field) for k in keys if k[0] == m))
        families.append(counter)

    class Families:
        def collect(self) -> Any:
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Families())  # type: ignore[arg-type]
    return generate_latest(registry).decode()


LABELS = ["model", "route", "outcome"]
TIME_FAMILIES = {
    "gen_ai_server_request_duration_seconds": "duration",
    "gen_ai_server_time_to_first_token_seconds": "ttft",
    "gen_ai_server_time_per_output_token_seconds": "tpot",
}
VLLM_FAMILIES = {
    "vllm:e2e_request_latency_seconds": "duration",
    "vllm:time_to_first_token_seconds": "ttft",
    "vllm:time_per_output_token_seconds": "tpot",
}


def breakdown_samples(text: str | bytes) -> dict[str, list[tuple[str, list[tuple[str, str]], Any]]]:
    """The samples of the breakdown's families; sums approximately (their order of
    addition is the merge's)."""
    names = {*TIME_FAMILIES, *VLLM_FAMILIES, "gen_ai_client_token_usage", "ferrox_stats_requests"}
    names |= {"vllm:prompt_tokens", "vllm:generation_tokens"}
    return {
        name: sorted(
            (
                s.name,
                sorted(s.labels.items()),
                pytest.approx(s.value, rel=1e-12) if s.name.endswith("_sum") else s.value,
            )
            for s in family.samples
        )
        for name, family in families(text).items()
        if name in names
    }


@hypothesis_settings(deadline=None, max_examples=60)  # files on disk: slower, and uneven
@given(st.lists(st.tuples(cells_of_a_part(), st.booleans()), min_size=1, max_size=4))
def test_octave_files_merged_by_column_expose_what_distributions_merged_would(
    parts: list[tuple[dict[tuple[str, str, str], Cell], bool]],
) -> None:
    """Files of version 1 (keyed, full resolution) and 2 (the octave form, its breakdown
    by column as ``publish`` writes it), merged by column and written from templates,
    give the samples that the cells' distributions, merged one by one and written by
    ``generate_latest``, give."""
    from django.test import override_settings

    with (
        tempfile.TemporaryDirectory() as where,
        override_settings(
            FERROX_STATS={"METRICS_DIR": where, "METRICS_FAMILIES": ["otel", "vllm"]}
        ),
    ):
        for i, (cells, octave_form) in enumerate(parts):
            doc = state(f"w/{i}/x")
            doc["breakdown"] = [cell.to_wire(key) for key, cell in sorted(cells.items())]
            publish(host_state.octave_document(doc) if octave_form else doc)
            written = Path(where, host_state.file_name(doc["instance"])).read_text()
            assert type(json.loads(written)["breakdown"]) is (dict if octave_form else list)
        totals = host_state.host_totals()
        assert totals.skipped == 0
        written = metrics.exposition(totals)
    expected = reference_families([cells for cells, _ in parts])
    assert breakdown_samples(written) == breakdown_samples(expected)
