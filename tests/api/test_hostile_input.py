"""Hostile ingest bodies: only 4xx or per-item rejections, and every page renders afterwards.

Deep nesting, lone surrogates in every string and key, huge and non-finite numbers in
every numeric field and gauge, wrong types: none may cause a 500, a traceback in the
log, or a page that cannot render what was accepted.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client
from django.urls import reverse

from ferrox_stats import live
from ferrox_stats.ingest import ITEM_FIELDS
from ferrox_stats.models import FinishedRequest
from tests.api.conftest import PREFIX, TokenClient
from tests.conftest import FakeClock

pytestmark = pytest.mark.django_db
INGEST = f"{PREFIX}/v1/ingest"
SURROGATE = "\ud800"
NUMERIC_FIELDS = (
    "at_ms",
    "status",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "ttft_ms",
    "duration_ms",
    "queue_ms",
    "decode_ms",
    "seq",
)
STRING_FIELDS = tuple(
    sorted(ITEM_FIELDS - set(NUMERIC_FIELDS) - {"stream"})  # every other field is a string
)
GAUGES = ("pool_used", "pool_total", "queue_depth")
# JSON can spell these (NaN and Infinity are not JSON, but producers send them).
HOSTILE_NUMBERS: tuple[Any, ...] = (
    1e30,
    1e300,
    -1e300,
    float("nan"),
    float("inf"),
    float("-inf"),
    10**30,
    10**400,
    2**63,
    -(2**63) - 1,
    -1,
    True,
    "1",
    [1],
    {"n": 1},
)


def record(clock: FakeClock, rid: str, **fields: Any) -> dict[str, Any]:
    return {
        "request_id": rid,
        "at_ms": clock.wall - 1000,
        "route": "/v1/chat/completions",
        "model": "qwen2.5-14b",
        "status": 200,
        "stream": True,
        "prompt_tokens": 40,
        "completion_tokens": 12,
        "ttft_ms": 80.0,
        "duration_ms": 300.0,
        "decode_ms": 200.0,
        **fields,
    }


def encoded(body: Any) -> str:
    # ensure_ascii spells a lone surrogate as the escape "\ud800", as a producer would.
    return json.dumps(body, allow_nan=True, ensure_ascii=True)


def hostile_bodies(clock: FakeClock) -> list[tuple[str, str | bytes]]:
    bodies: list[tuple[str, str | bytes]] = [
        ("nested arrays", "[" * 2000 + "]" * 2000),
        ("nested records", '{"records": ' + "[" * 2000 + "]" * 2000 + "}"),
        ("nested objects", '{"a": ' * 2000 + "1" + "}" * 2000),
        ("nested in a record", '{"records": [{"error": ' + "[" * 5000 + "]" * 5000 + "}]}"),
        ("nested and unclosed", '{"records": [' + "[" * 100_000),
        ("brackets inside a string", '{"records": [], "instance": "' + "[" * 5000 + '"}'),
        ("a number too long for int()", '{"records": [], "n": ' + "9" * 5000 + "}"),
        ("not UTF-8", b'{"records": [{"request_id": "\xff\xfe"}]}'),
        ("a surrogate in a top-level key", encoded({"records": [], SURROGATE: 1})),
        ("a surrogate in instance", encoded({"records": [], "instance": SURROGATE})),
        ("a surrogate in a gauge name", encoded({"records": [], "gauges": {SURROGATE: 1}})),
        ("records is a number", '{"records": 1e999}'),
        ("body is a string", encoded(SURROGATE)),
        ("body is null", "null"),
    ]
    items: list[Any] = []
    for name in STRING_FIELDS:
        items.append(record(clock, f"sur-{name}", **{name: f"a{SURROGATE}b"}))
        items.append(record(clock, f"half-{name}", **{name: "\udc80"}))
    items.append(record(clock, f"key{SURROGATE}", **{SURROGATE: 1}))
    for name in NUMERIC_FIELDS:
        for n, value in enumerate(HOSTILE_NUMBERS):
            items.append(record(clock, f"num-{name}-{n}", **{name: value}))
    items += [None, 1, "x", [], [record(clock, "in-a-list")]]
    bodies.append(("hostile records", encoded({"records": items, "instance": "hostile"})))
    for name in GAUGES:
        for value in HOSTILE_NUMBERS:
            gauges = {"pool_used": 1, "pool_total": 2, name: value}
            bodies.append((f"gauge {name}={value!r}", encoded({"records": [], "gauges": gauges})))
    for gauges in (
        {"pool_used": 1e300, "pool_total": 1e300},
        {"pool_used": 3, "pool_total": 2},
        {"pool_used": 1, "pool_total": 0},
        {"queue_depth": 1e30},
    ):
        bodies.append((f"gauges {gauges}", encoded({"records": [], "gauges": gauges})))
    return bodies


def extreme_but_valid(clock: FakeClock) -> list[dict[str, Any]]:
    """Records at the edges of what ingest accepts, which every page must then render."""
    return [
        record(
            clock,
            "edge-tiny-decode",
            completion_tokens=100_000_000,
            prompt_tokens=100_000_000,
            cached_tokens=100_000_000,
            decode_ms=5e-324,
            ttft_ms=5e-324,
            queue_ms=0,
        ),
        record(clock, "edge-week", duration_ms=7 * 24 * 3600 * 1000.0, status=599, seq=2**63 - 1),
        record(clock, "edge-zero", duration_ms=0, ttft_ms=0, decode_ms=0, completion_tokens=0),
    ]


def assert_answered(name: str, response: Any) -> None:
    """A 4xx with the API's error shape, or a 200 that answers every item."""
    assert response.status_code < 500, name
    body = json.loads(response.content.decode("utf-8"))  # encodable, whatever was sent
    if response.status_code >= 400:
        assert set(body) == {"error"}, name
        return
    assert response.status_code == 200, name
    statuses = {r["status"] for r in body["results"]}
    assert statuses <= {"accepted", "duplicate", "rejected"}, name


@pytest.fixture
def superuser_client(django_user_model: Any) -> Client:
    user = django_user_model.objects.create_superuser("root", "root@example.com", None)
    client = Client()
    client.force_login(user)
    return client


def test_hostile_bodies_are_refused_and_every_page_renders_afterwards(
    ingest_client: TokenClient,
    read_client: TokenClient,
    superuser_client: Client,
    clock: FakeClock,
    recorder: live.Recorder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    for name, raw in hostile_bodies(clock):
        response = ingest_client.post(INGEST, data=raw, content_type="application/json")
        assert_answered(name, response)
        if response.status_code == 200:
            assert response.json()["accepted"] == 0, name
    edge = ingest_client.post(
        INGEST,
        data=encoded({"records": extreme_but_valid(clock)}),
        content_type="application/json",
    )
    assert edge.json()["accepted"] == 3, edge.json()

    # Nothing hostile was stored; what was accepted renders everywhere.
    assert sorted(FinishedRequest.objects.values_list("request_id", flat=True)) == [
        "edge-tiny-decode",
        "edge-week",
        "edge-zero",
    ]
    api = [
        f"{PREFIX}/v1/stats",
        f"{PREFIX}/v1/requests",
        f"{PREFIX}/admin/stats",
        f"{PREFIX}/v1/history",
        f"{PREFIX}/v1/history?order=oldest",
        f"{PREFIX}/v1/history?order=committed",
        f"{PREFIX}/v1/history/export?format=csv",
        f"{PREFIX}/v1/history/export?format=jsonl",
        f"{PREFIX}/v1/history/edge-tiny-decode",
    ]
    for url in api:
        response = read_client.get(url)
        assert response.status_code == 200, url
        if not response.streaming:
            json.loads(response.content.decode("utf-8"), parse_constant=_no_constants)
    pages = [
        reverse("ferrox_stats:web:dashboard"),
        reverse("ferrox_stats:web:process"),
        reverse("ferrox_stats:web:history"),
        reverse("ferrox_stats:web:request-detail", args=["edge-tiny-decode"]),
        reverse("admin:ferrox_stats_finishedrequest_changelist"),
        *(
            reverse("admin:ferrox_stats_finishedrequest_change", args=[pk])
            for pk in FinishedRequest.objects.values_list("pk", flat=True)
        ),
        reverse("admin:ferrox_stats_deadletter_changelist"),
    ]
    for url in pages:
        assert superuser_client.get(url).status_code == 200, url
    problems = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert problems == []


def _no_constants(name: str) -> Any:
    raise AssertionError(f"{name} is not JSON")


def test_a_rejected_items_request_id_is_echoed_only_when_it_can_be_encoded(
    ingest_client: TokenClient, clock: FakeClock
) -> None:
    raw = encoded({"records": [record(clock, f"eng-{SURROGATE}"), record(clock, "ok", status=1)]})
    response = ingest_client.post(INGEST, data=raw, content_type="application/json")
    assert [(r["request_id"], r["status"], r["reason"]) for r in response.json()["results"]] == [
        (None, "rejected", "request_id is not valid Unicode (a lone surrogate)"),
        ("ok", "rejected", "status must be an HTTP status code (100-599)"),
    ]


@pytest.mark.parametrize("depth", [33, 2000])
def test_nesting_beyond_the_cap_is_a_400_that_says_so(
    ingest_client: TokenClient, depth: int
) -> None:
    raw = '{"records": [], "gauges": ' + '{"a": ' * (depth - 1) + "1" + "}" * depth
    response = ingest_client.post(INGEST, data=raw, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "The body is nested deeper than 32 levels of arrays and objects."
    )


def test_nesting_up_to_the_cap_is_parsed(ingest_client: TokenClient) -> None:
    # 32 levels parse; the gauges are then refused for what they are, not for their depth.
    raw = '{"records": [], "gauges": ' + '{"a": ' * 31 + "1" + "}" * 32
    response = ingest_client.post(INGEST, data=raw, content_type="application/json")
    assert response.json()["gauges"] == "unknown gauge 'a'"


def test_a_surrogate_a_client_sends_through_the_pass_through_breaks_no_page(
    read_client: TokenClient,
    superuser_client: Client,
    settings: Any,
    recorder: live.Recorder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The pass-through records the model a client names, before any upstream answers.
    settings.FERROX_STATS = {**settings.FERROX_STATS, "PROXY_REQUIRE_KEY": False}
    # AsyncClient: the pass-through serves only under ASGI.
    response = async_to_sync(AsyncClient().post)(
        "/v1/chat/completions",
        data=encoded({"model": f"m{SURROGATE}", "messages": []}),
        content_type="application/json",
    )
    assert response.status_code == 404
    assert recorder.stats.recorded_total == 1
    (entry,) = read_client.get(f"{PREFIX}/v1/requests").json()["entries"]
    assert entry["model"] == "m\ufffd"  # replaced: the response could not encode it
    assert superuser_client.get(reverse("ferrox_stats:web:dashboard")).status_code == 200
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
