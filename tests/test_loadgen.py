"""The load generator (``ferrox_stats.loadgen``) and ``manage.py ferrox_stats_loadgen``."""

from __future__ import annotations

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

from ferrox_stats import live, loadgen, tokens
from ferrox_stats.core.requests import Record
from ferrox_stats.ingest import validate_item
from ferrox_stats.loadgen import ABORTED, ERROR, MODELS, OK, REFUSED, plan_request
from ferrox_stats.models import ApiToken, FinishedRequest

INGEST_PATH = "/control/telemetry/v1/ingest"


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
    ],
)
def test_bad_options_are_refused_before_anything_runs(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("--requests", "1", *args)
