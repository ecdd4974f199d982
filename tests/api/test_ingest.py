"""``POST /v1/ingest``: engines elsewhere report finished records, answered item by item."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ferrox_stats import live, tokens
from ferrox_stats.archive.writer import ArchiveWriter
from ferrox_stats.models import ApiToken, FinishedRequest
from tests.api.conftest import PREFIX, TokenClient
from tests.conftest import FakeClock
from tests.factories import make_record

pytestmark = pytest.mark.django_db
URL = f"{PREFIX}/v1/ingest"


@pytest.fixture(autouse=True)
def _on_the_fake_clock(recorder: live.Recorder) -> None:
    """Ingest judges finish times against the recorder's clock: keep it the fake one."""


def item(n: int, clock: FakeClock, **fields: Any) -> dict[str, Any]:
    return {
        "request_id": f"eng-{n}",
        "at_ms": clock.wall - 1000,
        "route": "/v1/chat/completions",
        "model": "qwen2.5-14b",
        "status": 200,
        "stream": True,
        "prompt_tokens": 100,
        "completion_tokens": 21,
        "ttft_ms": 80.0,
        "duration_ms": 500,
        "decode_ms": 400.0,
        "finish_reason": "stop",
        **fields,
    }


def post(client: TokenClient, body: Any, **extra: Any) -> Any:
    raw = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(URL, data=raw, content_type="application/json", **extra)


def answers(response: Any) -> list[tuple[str, str | None]]:
    assert response.status_code == 200, response.content
    return [(r["status"], r["reason"]) for r in response.json()["results"]]


def test_replaying_a_batch_three_times_stores_each_record_once(
    ingest_client: TokenClient, recorder: live.Recorder, clock: FakeClock
) -> None:
    batch = {"records": [item(n, clock) for n in range(5)], "instance": "engine-proc-1"}
    bodies = [post(ingest_client, batch).json() for _ in range(3)]
    assert [(b["accepted"], b["duplicate"], b["rejected"]) for b in bodies] == [
        (5, 0, 0),
        (0, 5, 0),
        (0, 5, 0),
    ]
    assert FinishedRequest.objects.count() == 5
    row = FinishedRequest.objects.get(request_id="eng-0")
    assert (row.replica, row.instance) == ("gpu-1", "engine-proc-1")
    assert row.duration_ms == 500.0
    # Accepted records enter this process's ring and counters once.
    assert recorder.stats.recorded_total == 5
    assert recorder.serving.snapshot(clock.now).completed == 5


def test_a_bad_item_does_not_sink_the_batch_and_counts_add_up(
    ingest_client: TokenClient, clock: FakeClock
) -> None:
    records = [
        item(1, clock),
        item(2, clock, prompt="tell me a secret"),
        item(3, clock, ttft_ms=-5),
        item(4, clock),
        "not an object",
    ]
    response = post(ingest_client, {"records": records})
    body = response.json()
    assert answers(response) == [
        ("accepted", None),
        ("rejected", "unknown field 'prompt'"),
        ("rejected", "ttft_ms must be from 0 to 604800000 ms"),
        ("accepted", None),
        ("rejected", "each record must be a JSON object"),
    ]
    assert body["accepted"] + body["duplicate"] + body["rejected"] == len(records)
    assert [r["index"] for r in body["results"]] == list(range(5))
    assert sorted(FinishedRequest.objects.values_list("request_id", flat=True)) == [
        "eng-1",
        "eng-4",
    ]


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"request_id": None}, "request_id is required"),
        ({"at_ms": None}, "at_ms is required"),
        ({"at_ms": "yesterday"}, "at_ms must be an integer (epoch milliseconds)"),
        ({"at_ms": 1}, "at_ms is too far from now"),
        ({"status": 999}, "status must be an HTTP status code (100-599)"),
        ({"status": True}, "status must be an HTTP status code (100-599)"),
        ({"stream": "yes"}, "stream must be a boolean"),
        ({"prompt_tokens": -1}, "prompt_tokens must be an integer from 0 to 100000000"),
        ({"completion_tokens": 10**12}, "completion_tokens must be an integer from 0 to 100000000"),
        ({"decode_ms": float("nan")}, "decode_ms must be a finite number"),
        ({"duration_ms": float("inf")}, "duration_ms must be a finite number"),
        ({"queue_ms": 10**12}, "queue_ms must be from 0 to 604800000 ms"),
        ({"model": "x" * 201}, "model must be 1 to 200 characters"),
        ({"client": ""}, "client must be 1 to 200 characters"),
        ({"client": "a\x00b"}, "client contains a NUL character"),
        ({"error": 42}, "error must be a string"),
        (
            {"via_api_key": "sk-proj-abcdefghijklmnop"},
            "via_api_key looks like a secret key; report keys by their label",
        ),
        ({"replica": "elsewhere"}, "unknown field 'replica'"),
        ({"decode_tps": 12.0}, "unknown field 'decode_tps'"),
        ({"seq": -1}, "seq must be a non-negative integer"),
    ],
)
def test_each_rejection_names_the_field_never_the_value(
    ingest_client: TokenClient, clock: FakeClock, fields: dict[str, Any], reason: str
) -> None:
    # NaN and Infinity are not JSON, but producers send them: they must be refused per item.
    raw = json.dumps({"records": [item(1, clock, **fields)]}, allow_nan=True)
    assert answers(post(ingest_client, raw)) == [("rejected", reason)]
    assert FinishedRequest.objects.count() == 0


def test_gauges_feed_the_last_known_values(
    ingest_client: TokenClient, read_client: TokenClient, recorder: live.Recorder
) -> None:
    body = post(
        ingest_client, {"records": [], "gauges": {"pool_used": 512, "pool_total": 2048}}
    ).json()
    assert (body["accepted"], body["gauges"]) == (0, "accepted")
    pool = read_client.get(f"{PREFIX}/v1/stats").json()["pool"]
    assert pool == {"occupancy": 0.25, "queue_depth": None, "gauges_refused": 0}
    # A report without the pool leaves it as it was; a pool of 0 is no report.
    post(
        ingest_client,
        {"records": [], "gauges": {"queue_depth": 4, "pool_total": 0, "pool_used": 0}},
    )
    assert read_client.get(f"{PREFIX}/v1/stats").json()["pool"] == {
        "occupancy": 0.25,
        "queue_depth": 4.0,
        "gauges_refused": 0,
    }


@pytest.mark.parametrize(
    ("gauges", "reason"),
    [
        ({"pool_used": 5, "pool_total": 4}, "pool_used exceeds pool_total"),
        ({"pool_used": 5}, "pool_used and pool_total come together"),
        ({"pool_used": 5, "pool_total": 0}, "pool_used exceeds pool_total"),
        ({"queue_depth": -1}, "queue_depth must be a finite number from 0 to 1000000000"),
        ({"queue_depth": 1e30}, "queue_depth must be a finite number from 0 to 1000000000"),
        ({"queue_depth": float("nan")}, "queue_depth must be a finite number from 0 to 1000000000"),
        ({"queue_depth": True}, "queue_depth must be a number"),
        (
            {"pool_used": 1e300, "pool_total": 1e300},
            "pool_used must be a finite number from 0 to 9007199254740992",
        ),
        (
            {"pool_used": 1, "pool_total": float("inf")},
            "pool_total must be a finite number from 0 to 9007199254740992",
        ),
        ({"kv_cache": 1}, "unknown gauge 'kv_cache'"),
        ([1, 2], "gauges must be a JSON object"),
    ],
)
def test_bad_gauges_are_refused_without_the_records(
    ingest_client: TokenClient, clock: FakeClock, gauges: Any, reason: str
) -> None:
    raw = json.dumps({"records": [item(1, clock)], "gauges": gauges}, allow_nan=True)
    body = post(ingest_client, raw).json()
    assert (body["accepted"], body["gauges"]) == (1, reason)


@pytest.mark.parametrize(
    ("raw", "status", "field"),
    [
        ("{not json", 400, None),
        ("[]", 400, "records"),
        ('{"records": {}}', 400, "records"),
        ('{"records": [], "extra": 1}', 400, "body"),
        ('{"records": [], "instance": 7}', 400, "instance"),
    ],
)
def test_a_malformed_body_is_a_4xx_not_a_5xx(
    ingest_client: TokenClient, raw: str, status: int, field: str | None
) -> None:
    response = post(ingest_client, raw)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["status"] == status
    if field:
        assert list(error["fields"]) == [field]


def test_the_body_size_is_limited(ingest_client: TokenClient, settings: Any) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "INGEST_MAX_BODY_BYTES": 1000}
    response = post(ingest_client, {"records": [], "instance": "x" * 2000})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


def test_the_batch_length_is_limited(
    ingest_client: TokenClient, settings: Any, clock: FakeClock
) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "INGEST_MAX_BATCH": 2}
    response = post(ingest_client, {"records": [item(n, clock) for n in range(3)]})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "records: A batch holds at most 2 records."


def test_records_are_attributed_to_the_tokens_replica(
    clock: FakeClock, recorder: live.Recorder
) -> None:
    for replica in ("gpu-a", "gpu-b"):
        _, secret = tokens.issue(f"engine-{replica}", read=False, ingest=True, replica=replica)
        post(TokenClient(secret), {"records": [item(1, clock)]})
    # The same producer id on two replicas is two requests.
    assert sorted(FinishedRequest.objects.values_list("replica", flat=True)) == ["gpu-a", "gpu-b"]


def test_a_revoked_token_can_no_longer_ingest(ingest_secret: str, clock: FakeClock) -> None:
    tokens.revoke(ApiToken.objects.get(label="engine-gpu-1"))
    response = post(TokenClient(ingest_secret), {"records": [item(1, clock)]})
    assert response.status_code == 401
    assert FinishedRequest.objects.count() == 0


def test_two_replicas_producers_may_use_the_same_instance_and_seq(
    clock: FakeClock, recorder: live.Recorder
) -> None:
    bodies = []
    for replica in ("gpu-a", "gpu-b"):
        _, secret = tokens.issue(f"engine-{replica}", read=False, ingest=True, replica=replica)
        batch = {"records": [item(0, clock, request_id=f"{replica}-0", seq=7)], "instance": "p"}
        bodies.append(post(TokenClient(secret), batch).json())
    assert [(b["accepted"], b["duplicate"]) for b in bodies] == [(1, 0), (1, 0)]
    assert sorted(FinishedRequest.objects.values_list("replica", "instance", "seq")) == [
        ("gpu-a", "p", 7),
        ("gpu-b", "p", 7),
    ]


def test_a_replay_under_another_token_of_the_same_replica_is_a_duplicate(
    ingest_client: TokenClient, clock: FakeClock
) -> None:
    # Token rotation: the namespace is the replica, not the token.
    batch = {"records": [item(n, clock, seq=n) for n in range(3)], "instance": "engine-proc-1"}
    assert post(ingest_client, batch).json()["accepted"] == 3
    _, secret = tokens.issue("engine-gpu-1-rotated", read=False, ingest=True, replica="gpu-1")
    assert post(TokenClient(secret), batch).json()["duplicate"] == 3
    # The same (instance, seq) under new request ids is still this replica's resend.
    resent = {**batch, "records": [item(n + 10, clock, seq=n) for n in range(3)]}
    assert post(TokenClient(secret), resent).json()["duplicate"] == 3
    assert FinishedRequest.objects.count() == 3


def test_a_producer_squatting_the_servers_identity_takes_nothing_away(
    clock: FakeClock, recorder: live.Recorder
) -> None:
    # The worst case: the token's replica is the server's own, and the producer copies
    # the server's instance, seqs and request ids (all visible in /v1/stats and the
    # ring) before the archiver has written them.
    writer = ArchiveWriter(instance=recorder.instance, autostart=False)
    recorder.sink = writer
    served = [
        make_record(request_id=f"req_{n}", at_ms=clock.wall - 1000, replica=recorder.replica)
        for n in range(20)
    ]
    seqs = [recorder.finished(record) for record in served]
    _, secret = tokens.issue("squatter", read=False, ingest=True, replica=recorder.replica)
    squat = {
        "records": [
            item(0, clock, request_id=r.request_id, seq=s)
            for r, s in zip(served, seqs, strict=True)
        ],
        "instance": recorder.instance,
    }
    assert post(TokenClient(secret), squat).json()["accepted"] == 20
    assert writer.drain(deadline_s=60)
    health = writer.health()
    assert (health.persisted, health.duplicates, health.dead_lettered) == (20, 0, 0)
    own = FinishedRequest.objects.filter(ingested=False, instance=recorder.instance)
    assert sorted(own.values_list("seq", flat=True)) == seqs
    assert FinishedRequest.objects.filter(ingested=True).count() == 20
