"""The load generator (``loadgen``, in the repository) and ``manage.py ferrox_stats_loadgen``."""

from __future__ import annotations

import asyncio
import os
import random
import re
import socket
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

import loadgen
from ferrox_stats import live, tokens
from ferrox_stats.core.requests import Record
from ferrox_stats.ingest import validate_item
from ferrox_stats.models import ApiToken, FinishedRequest
from ferrox_stats.proxy.clients import aclose_clients
from loadgen import ABORTED, ERROR, MODELS, OK, REFUSED, plan_request
from loadgen.engine import SeenRequest, SimulatedEngine
from loadgen.openai_client import (
    CAP,
    EMBEDDINGS,
    FAIL_STATUS,
    MAX_TOKENS,
    OpenAIClient,
    plan_call,
)
from tests.asgi_server import serve, wait_for
from tests.proxy.conftest import LoopCapture

INGEST_PATH = "/control/telemetry/v1/ingest"
SIM_MODELS = ("sim-a", "sim-b")


@pytest.fixture
def live_recorder() -> Iterator[live.Recorder]:
    """This process's recorder on the real clock: the load generator really waits."""
    yield live.reset()
    live.reset()


def run(*args: str) -> str:
    out = StringIO()
    call_command("ferrox_stats_loadgen", *args, stdout=out)
    return out.getvalue()


def outcome(row: Record | FinishedRequest) -> str:
    if row.aborted is not None:
        return ABORTED
    if row.error is not None:
        return ERROR
    return REFUSED if row.status is not None and row.status >= 400 else OK


def summary(rows: Iterable[Record | FinishedRequest], in_process: int, ingest: int) -> str:
    counts = Counter(outcome(row) for row in rows)
    return (
        f"{in_process + ingest} requests: ok {counts[OK]}, aborted {counts[ABORTED]}, "
        f"error {counts[ERROR]}, refused {counts[REFUSED]}; in-process {in_process}, "
        f"ingest {ingest} (accepted {ingest}, duplicate 0, rejected 0, unsent 0)\n"
    )


def ring(recorder: live.Recorder) -> list[Record]:
    return [record for _, record in recorder.stats.since(0, 256).rows]


# -- the traffic model ----------------------------------------------------------------------


def test_the_plan_mixes_models_streams_and_outcomes_at_plausible_rates() -> None:
    rng = random.Random(20240601)
    plans = [plan_request(rng) for _ in range(5000)]
    models = Counter(p.model for p in plans)
    total_weight = sum(m.weight for m in MODELS)
    for model in MODELS:
        assert abs(models[model.name] / 5000 - model.weight / total_weight) < 0.03
    assert 0.6 < sum(p.stream for p in plans) / 5000 < 0.7
    assert {p.route for p in plans} == {loadgen.CHAT, loadgen.COMPLETIONS}
    outcomes = Counter(p.outcome for p in plans)
    assert 0.03 < outcomes[ABORTED] / 5000 < 0.05
    assert 0.013 < outcomes[ERROR] / 5000 < 0.027
    assert 0.012 < outcomes[REFUSED] / 5000 < 0.028
    assert {p.status for p in plans if p.outcome == REFUSED} == {400, 429}
    assert {p.error for p in plans if p.outcome == ERROR} == {"EngineError", "EngineTimeout"}
    assert {p.finish_reason for p in plans if p.outcome == OK} == {"stop", "length"}
    assert {p.finish_reason for p in plans if p.outcome != OK} == {None}

    served = [p for p in plans if p.outcome != REFUSED]
    assert all(8 <= (p.prompt_tokens or 0) <= 16_000 for p in served)
    assert all(0 <= (p.cached_tokens or 0) <= (p.prompt_tokens or 0) for p in served)
    assert all(p.duration_s > 0 for p in plans)
    assert all(
        p.queue_s == p.prefill_s == 0 and p.duration_s < 0.01 for p in plans if p.outcome == REFUSED
    )
    for model in MODELS:
        mine = [p for p in served if p.model == model.name and p.ttft_s is not None]
        ttft = statistics.median(p.ttft_s or 0 for p in mine)
        # Median TTFT: tens to hundreds of ms, slower for bigger models.
        assert 0.5 * model.prefill_ms / 1000 < ttft < 3 * model.prefill_ms / 1000
        tps = [p.decode_tps for p in mine]
        assert 0.9 * model.decode_tps < statistics.median(tps) < 1.1 * model.decode_tps
        assert 0.5 * model.decode_tps < min(tps) and max(tps) < 2 * model.decode_tps
    by_speed = sorted(MODELS, key=lambda m: m.decode_tps)
    assert by_speed[0].prefill_ms == max(m.prefill_ms for m in MODELS)


def test_the_same_seed_draws_the_same_plans() -> None:
    first = [plan_request(random.Random(7)) for _ in range(3)]
    again = [plan_request(random.Random(7)) for _ in range(3)]
    assert first == again
    rng = random.Random(7)
    assert len({plan_request(rng).request_id for _ in range(1000)}) == 1000


def test_a_cut_plan_is_a_client_abort_with_what_was_produced_by_then() -> None:
    rng = random.Random(3)
    plan = next(p for p in iter(lambda: plan_request(rng), None) if p.outcome == OK and p.stream)
    assert plan.cut(plan.duration_s + 1) is plan
    during_queue = plan.cut(plan.queue_s / 2)
    assert (during_queue.outcome, during_queue.completion_tokens) == (ABORTED, 0)
    assert during_queue.duration_s == pytest.approx(plan.queue_s / 2)
    at = plan.queue_s + plan.prefill_s + 0.5 * plan.decode_s
    halfway = plan.cut(at)
    assert halfway.duration_s == pytest.approx(at)
    assert 0 < halfway.completion_tokens < plan.completion_tokens
    assert (halfway.finish_reason, halfway.status, halfway.ttft_s) == (None, 200, plan.ttft_s)


@pytest.mark.django_db
def test_every_planned_record_passes_ingest_validation() -> None:
    rng = random.Random(11)
    now_ms = time.time_ns() // 1_000_000
    for seq in range(2000):
        plan = plan_request(rng)
        record = validate_item(loadgen.ingest_record(plan, now_ms, seq), now_ms)
        assert isinstance(record, Record), record
        assert outcome(record) == plan.outcome
        assert record.duration_ms == pytest.approx(plan.duration_s * 1000, abs=0.001)


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8000/x", "http://localhost/x", "https://[::1]:8443/x", "http://127.0.0.2/"],
)
def test_local_urls_are_targets(url: str) -> None:
    assert loadgen.check_local_url(url) == url


@pytest.mark.parametrize(
    "url",
    ["http://example.com/v1/ingest", "http://10.0.0.1/", "ftp://127.0.0.1/", "127.0.0.1:8000"],
)
def test_other_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        loadgen.check_local_url(url)


# -- the in-process feeder ------------------------------------------------------------------


def test_a_counted_run_records_exactly_that_many_requests_and_ends_them_all(
    live_recorder: live.Recorder,
) -> None:
    output = run(
        "--requests", "50", "--speed", "1000", "--concurrency", "8", "--seed", "5", "--quiet"
    )
    rows = ring(live_recorder)
    assert output == summary(rows, in_process=50, ingest=0)
    snapshot = live_recorder.snapshot()
    counts = Counter(outcome(row) for row in rows)
    assert (snapshot.recorded_total, snapshot.serving.active) == (50, 0)
    assert snapshot.serving.completed == 50 - counts[ABORTED]
    assert snapshot.serving.aborts.get("client_disconnect", 0) == counts[ABORTED]
    assert snapshot.serving.aborts.get("error", 0) == counts[ERROR]
    assert counts[ABORTED] + counts[ERROR] > 0  # seed 5 draws some of each
    assert {row.model for row in rows} >= {"llama-3.1-8b-instruct", "qwen2.5-14b-instruct"}
    assert {row.stream for row in rows} == {True, False}
    assert snapshot.pool_occupancy is not None  # every fifth request reports the pool


def test_a_timed_run_stops_by_itself_at_its_deadline(live_recorder: live.Recorder) -> None:
    started = time.monotonic()
    output = run("--duration", "0.5", "--speed", "50", "--seed", "1", "--quiet")
    assert 0.4 < time.monotonic() - started < 3
    snapshot = live_recorder.snapshot()
    assert snapshot.serving.active == 0 and snapshot.recorded_total > 0
    assert output == summary(ring(live_recorder), in_process=snapshot.recorded_total, ingest=0)


def test_stopping_a_run_ends_what_is_in_flight_as_client_aborts(
    live_recorder: live.Recorder,
) -> None:
    generator = loadgen.LoadGenerator(requests=1000, concurrency=6, seed=2, think_s=0)
    timer = threading.Timer(0.3, generator.stop)
    timer.start()
    report = generator.run()
    timer.join()
    snapshot = live_recorder.snapshot()
    assert snapshot.serving.active == 0
    assert report.total == snapshot.recorded_total < 1000
    assert report.outcomes[ABORTED] > 0  # what was in flight at the stop
    assert snapshot.serving.aborts["client_disconnect"] == report.outcomes[ABORTED]


# -- the ingest feeder, over HTTP -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_ingest_run_posts_batches_that_are_all_accepted(
    live_server: Any, live_recorder: live.Recorder
) -> None:
    url = live_server.url + INGEST_PATH
    output = run(
        "--requests", "50", "--speed", "1000", "--seed", "9", "--quiet",
        "--ingest-url", url, "--ingest-replica", "engine-7", "--ingest-share", "1",
    )  # fmt: skip
    rows = FinishedRequest.objects.all()
    assert output == summary(rows, in_process=0, ingest=50)
    assert rows.count() == 50 and {row.replica for row in rows} == {"engine-7"}
    assert {row.instance for row in rows} == {f"loadgen-{os.getpid()}"}
    # The server process (this one) counted them and heard a pool report.
    snapshot = live_recorder.snapshot()
    assert snapshot.recorded_total == 50 and snapshot.pool_occupancy is not None
    token = ApiToken.objects.get()  # issued for the run, revoked after it
    assert token.replica == "engine-7" and token.can_ingest and not token.can_read
    assert token.revoked_at is not None


@pytest.mark.django_db(transaction=True)
def test_a_mixed_run_feeds_both_and_never_prints_a_secret(
    live_server: Any, live_recorder: live.Recorder
) -> None:
    _, secret = tokens.issue("engine", read=False, ingest=True, replica="gpu-2")
    url = live_server.url + INGEST_PATH
    lines = run(
        "--requests", "40", "--speed", "1000", "--seed", "4", "--concurrency", "6",
        "--ingest-url", url, "--ingest-token", secret,
    ).splitlines()  # fmt: skip
    assert secret not in "".join(lines)
    assert lines[0] == (
        f"Playing traffic for at most 40 requests, 6 at a time, 50% over ingest to {url}."
    )
    ingested = FinishedRequest.objects.filter(replica="gpu-2").count()
    in_process = [row for row in ring(live_recorder) if row.replica == "test-replica"]
    assert 0 < ingested < 40 and len(in_process) == 40 - ingested
    rows = [*in_process, *FinishedRequest.objects.all()]
    assert lines[-1] + "\n" == summary(rows, in_process=len(in_process), ingest=ingested)


@pytest.mark.django_db(transaction=True)
def test_a_refused_token_stops_the_run_with_an_error(
    live_server: Any, live_recorder: live.Recorder
) -> None:
    out = StringIO()
    with pytest.raises(CommandError, match="answered 401"):
        call_command(
            "ferrox_stats_loadgen", "--requests", "20", "--speed", "1000", "--quiet",
            "--ingest-url", live_server.url + INGEST_PATH, "--ingest-token", "fxs_not-a-token",
            "--ingest-share", "1", stdout=out,
        )  # fmt: skip
    # Nothing was accepted, and every record the run made is accounted for as unsent.
    assert re.fullmatch(
        r"(\d+) requests: .*; in-process 0, ingest \1 "
        r"\(accepted 0, duplicate 0, rejected 0, unsent \1\)\n",
        out.getvalue(),
    )
    assert FinishedRequest.objects.count() == 0


def test_an_unreachable_endpoint_leaves_records_counted_as_unsent(
    live_recorder: live.Recorder,
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    output = run(
        "--requests", "5", "--speed", "1000", "--seed", "1", "--quiet", "--ingest-share", "1",
        "--ingest-url", f"http://127.0.0.1:{port}/v1/ingest", "--ingest-token", "fxs_unused",
    )  # fmt: skip
    assert output.endswith("ingest 5 (accepted 0, duplicate 0, rejected 0, unsent 5)\n")


# -- the pass-through feeder: OpenAI calls ------------------------------------------------


def test_the_call_plan_mixes_routes_streams_failures_and_departures() -> None:
    rng = random.Random(20240602)
    calls = [plan_call(rng, SIM_MODELS) for _ in range(5000)]
    routes = Counter(c.route for c in calls)
    assert abs(routes[loadgen.CHAT] / 5000 - 0.7) < 0.03
    assert abs(routes[loadgen.COMPLETIONS] / 5000 - 0.2) < 0.03
    assert abs(routes[EMBEDDINGS] / 5000 - 0.1) < 0.02
    assert {c.model for c in calls} == set(SIM_MODELS)
    generations = [c for c in calls if c.route != EMBEDDINGS]
    assert 0.55 < sum(c.stream for c in generations) / len(generations) < 0.65
    assert not any(c.stream or c.leave_after for c in calls if c.route == EMBEDDINGS)
    assert 0.02 < sum(c.fail == FAIL_STATUS for c in calls) / 5000 < 0.04
    assert {c.fail for c in calls} == {None, FAIL_STATUS}
    assert all(1 <= c.tokens <= MAX_TOKENS for c in generations)
    assert {c.max_tokens for c in generations} == {None, CAP}
    leaving = [c for c in calls if c.leave_after is not None]
    assert 0.04 < len(leaving) / sum(c.stream for c in calls) < 0.1
    # A client leaves a stream that has started and not ended, and one the engine serves.
    assert all(
        c.stream and c.fail is None and 1 <= c.leave_after < min(c.tokens, c.max_tokens or c.tokens)
        for c in leaving
        if c.leave_after is not None
    )
    assert all(3 <= len(c.prompt.split()) <= 2000 for c in calls)


@pytest.mark.parametrize(
    ("route", "keys"),
    [
        (loadgen.CHAT, {"model", "messages", "stream", "sim"}),
        (loadgen.COMPLETIONS, {"model", "prompt", "stream", "sim"}),
        (EMBEDDINGS, {"model", "input"}),
    ],
)
def test_a_call_body_is_the_routes_and_asks_the_engine_for_its_length(
    route: str, keys: set[str]
) -> None:
    rng = random.Random(1)
    call = next(c for c in iter(lambda: plan_call(rng, SIM_MODELS), None) if c.route == route)
    body = call.body()
    assert set(body) - {"max_tokens", "sim"} == keys - {"sim"}
    if route != EMBEDDINGS:
        assert body["sim"]["tokens"] == call.tokens and body["stream"] is call.stream
    failing = next(c for c in iter(lambda: plan_call(rng, SIM_MODELS), None) if c.fail)
    assert failing.body()["sim"]["fail"] == FAIL_STATUS


def test_the_same_seed_draws_the_same_calls() -> None:
    first = [plan_call(random.Random(5), SIM_MODELS) for _ in range(3)]
    assert first == [plan_call(random.Random(5), SIM_MODELS) for _ in range(3)]


@pytest.mark.parametrize("url", ["http://example.com/v1", "http://10.1.2.3:8000/v1"])
def test_the_openai_client_only_targets_this_machine(url: str) -> None:
    with pytest.raises(ValueError, match="only targets this machine"):
        OpenAIClient(url, "fxs_x", SIM_MODELS)


def test_a_pass_through_share_needs_a_client_with_models_and_room() -> None:
    with pytest.raises(ValueError, match="knows its models"):
        loadgen.LoadGenerator(requests=1, openai_share=0.5)
    client = OpenAIClient("http://127.0.0.1:9/v1", "fxs_x", SIM_MODELS)
    ingest = loadgen.IngestClient("http://127.0.0.1:9/v1/ingest", "fxs_x")
    with pytest.raises(ValueError, match="add up to more than 1"):
        loadgen.LoadGenerator(
            requests=1, openai_share=0.6, openai=client, ingest_share=0.6, ingest=ingest
        )
    client.close()


def calls_seen(engine: SimulatedEngine) -> list[SeenRequest]:
    return [seen for seen in engine.requests if seen.method == "POST"]


def test_an_openai_run_sends_every_call_and_counts_how_each_ended(
    live_recorder: live.Recorder,
) -> None:
    engine = SimulatedEngine(tokens_per_s=200, models=SIM_MODELS)
    with serve(engine) as url:
        output = run(
            "--requests", "60", "--seed", "3", "--concurrency", "6", "--quiet",
            "--openai-url", f"{url}/v1", "--openai-token", "fxs_direct", "--openai-share", "1",
        )  # fmt: skip
    # One model list first, then the calls, each with the run's key.
    assert [(seen.method, seen.path) for seen in engine.requests[:1]] == [("GET", "/v1/models")]
    calls = calls_seen(engine)
    assert len(calls) == 60 and len(engine.requests) == 61
    assert {seen.headers["authorization"] for seen in engine.requests} == {"Bearer fxs_direct"}
    assert {seen.path for seen in calls} == {loadgen.CHAT, loadgen.COMPLETIONS, EMBEDDINGS}
    assert {seen.body["model"] for seen in calls} == set(SIM_MODELS)
    failed = sum((seen.body.get("sim") or {}).get("fail") == FAIL_STATUS for seen in calls)
    streamed = sum(seen.body.get("stream") is True for seen in calls)
    match = re.fullmatch(
        r"60 requests: ok (\d+), aborted (\d+), error (\d+), refused 0; in-process 0, ingest 0 "
        r"\(accepted 0, duplicate 0, rejected 0, unsent 0\), "
        r"pass-through 60 \(streamed (\d+), tokens (\d+), unreachable 0\)\n",
        output,
    )
    assert match is not None, output
    ok, aborted, error, reported_streams, received = map(int, match.groups())
    assert (error, reported_streams) == (failed, streamed) and failed > 0
    assert aborted > 0 and ok == 60 - aborted - error  # seed 3 leaves some streams early
    assert received > 0
    assert live_recorder.snapshot().recorded_total == 0  # nothing played in this process


@pytest.mark.django_db(transaction=True)
def test_an_openai_run_through_the_pass_through_is_recorded_under_its_token(
    settings: Any, live_recorder: live.Recorder
) -> None:
    engine = SimulatedEngine(tokens_per_s=200, models=SIM_MODELS)
    app = LoopCapture()
    with serve(engine) as engine_url:
        upstream = {"sim": {"BASE_URL": f"{engine_url}/v1", "API_KEY": None}}
        settings.FERROX_STATS = {**settings.FERROX_STATS, "PROXY_UPSTREAMS": upstream}
        with serve(app) as url:
            try:
                lines = run(
                    "--requests", "30", "--seed", "6", "--concurrency", "4",
                    "--openai-url", f"{url}/v1", "--openai-share", "1",
                ).splitlines()  # fmt: skip
                # A client that left is recorded once the pass-through notices.
                assert wait_for(lambda: len(ring(live_recorder)) == 30)
            finally:
                if app.loop is not None:
                    asyncio.run_coroutine_threadsafe(aclose_clients(), app.loop).result(5)
    token = ApiToken.objects.get()  # issued for the run, revoked after it
    assert token.can_infer and not (token.can_read or token.can_ingest)
    assert token.revoked_at is not None
    assert lines[0] == f"Issued infer token {token.label!r} for the pass-through."
    assert lines[1] == (
        f"Playing traffic for at most 30 requests, 4 at a time, "
        f"100% through the pass-through at {url}/v1 (sim-a, sim-b)."
    )
    rows = ring(live_recorder)
    assert {row.via_api_key for row in rows} == {token.label}
    assert {row.replica for row in rows} == {"test-replica"}
    assert {row.route for row in rows} == {loadgen.CHAT, loadgen.COMPLETIONS, EMBEDDINGS}
    counts = Counter(outcome(row) for row in rows)
    assert counts[ABORTED] > 0 and counts[ERROR] > 0
    streamed = sum(row.stream is True for row in rows)
    told = re.fullmatch(r"(.*tokens )(\d+), unreachable 0\)", lines[-1])
    assert told is not None, lines[-1]
    summary, received = told.groups()
    assert summary == (
        f"30 requests: ok {counts[OK]}, aborted {counts[ABORTED]}, error {counts[ERROR]}, "
        f"refused 0; in-process 0, ingest 0 (accepted 0, duplicate 0, rejected 0, unsent 0), "
        f"pass-through 30 (streamed {streamed}, tokens "
    )
    # The loadgen counts the tokens it read; the pass-through, the tokens it sent. A
    # client that leaves mid-stream may have been sent one more before the pass-through
    # noticed (an engine's next token arriving first): at most one per abandoned stream.
    sent = sum(row.completion_tokens or 0 for row in rows)
    assert sent - counts[ABORTED] <= int(received) <= sent


def test_an_unreachable_pass_through_is_refused_before_the_run() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(CommandError, match=r"--openai-url: .+\."):
        run("--requests", "5", "--openai-url", f"http://127.0.0.1:{port}/v1",
            "--openai-token", "fxs_unused")  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_a_pass_through_under_wsgi_stops_the_run_before_it_starts(live_server: Any) -> None:
    with pytest.raises(CommandError, match="answered 501: The pass-through needs an ASGI server"):
        run("--requests", "5", "--openai-url", f"{live_server.url}/v1")
    assert ApiToken.objects.get().revoked_at is not None


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--ingest-url", "http://example.com/v1/ingest", "--ingest-token", "x"],
            "only targets this machine",
        ),
        (
            ["--ingest-url", "http://127.0.0.1:8000/v1/ingest"],
            "needs --ingest-token or --ingest-replica",
        ),
        (["--ingest-share", "0.5"], "needs --ingest-url"),
        (["--ingest-replica", "r"], "needs --ingest-url"),
        (["--requests", "0"], "--requests"),
        (["--duration", "0"], "--duration"),
        (["--speed", "0"], "--speed"),
        (["--concurrency", "0"], "--concurrency"),
        (
            ["--ingest-url", "http://127.0.0.1/", "--ingest-token", "x", "--ingest-share", "2"],
            "from 0 to 1",
        ),
        (["--openai-url", "http://example.com/v1"], "only targets this machine"),
        (["--openai-share", "0.5"], "needs --openai-url"),
        (["--openai-token", "fxs_x"], "needs --openai-url"),
        (["--openai-url", "http://127.0.0.1/v1", "--openai-share", "-1"], "from 0 to 1"),
        (
            [
                "--ingest-url",
                "http://127.0.0.1/",
                "--ingest-token",
                "x",
                "--ingest-share",
                "0.6",
                "--openai-url",
                "http://127.0.0.1/v1",
                "--openai-share",
                "0.5",
            ],
            "add up to more than 1",
        ),
    ],
)
def test_bad_options_are_refused_before_anything_runs(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("--requests", "1", *args)
