"""The usage API over REST (``v1/usage``, ``v1/usage/top``): answers, CSV, errors, clock."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from typing import Any

import pytest

from ferrox_stats import live
from tests.api.conftest import PREFIX, TokenClient
from tests.conftest import FakeClock
from tests.factories import BASE_AT_MS, archive, make_record

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("rollups_on")]

HOUR_MS = 3_600_000
PRICES = {"m1": [{"from": "2026-01-01", "input": 1.0, "output": 2.0}]}


def get(client: TokenClient, path: str, /, status: int = 200, **params: Any) -> Any:
    response = client.get(f"{PREFIX}{path}", params)
    assert response.status_code == status, response.content
    return response.json() if response["Content-Type"].startswith("application/json") else response


@pytest.fixture
def traffic(settings: Any, rollups_on: None) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "PRICES": PRICES}
    archive(
        [
            make_record(at_ms=BASE_AT_MS + 1000, model="m1", via_api_key="team-a",
                        prompt_tokens=1000, completion_tokens=10),
            make_record(at_ms=BASE_AT_MS + 2000, model="m2", via_api_key="team-a",
                        prompt_tokens=50, completion_tokens=5, status=500, error="upstream"),
            make_record(at_ms=BASE_AT_MS + HOUR_MS + 1000, model="m1", via_api_key="team-b",
                        prompt_tokens=3000, completion_tokens=30),
        ]
    )  # fmt: skip


RANGE = {"since": BASE_AT_MS, "until": BASE_AT_MS + 2 * HOUR_MS}


@pytest.mark.usefixtures("traffic")
def test_usage_per_hour_by_key_with_cost_and_latency(read_client: TokenClient) -> None:
    body = get(read_client, "/v1/usage", group_by="key", latency="duration", **RANGE)
    assert (body["bucket"], body["group_by"], body["currency"]) == ("hour", ["key"], "USD")
    assert body["latency"] == ["duration"]
    assert (body["since_ms"], body["until_ms"], body["rollups_kept"]) == (
        BASE_AT_MS,
        BASE_AT_MS + 2 * HOUR_MS,
        True,
    )
    rows = [
        (r["bucket_ms"], r["key"], r["requests"], r["errors"], r["unpriced_requests"])
        for r in body["rows"]
    ]
    assert rows == [
        (BASE_AT_MS, "team-a", 2, 1, 1),
        (BASE_AT_MS + HOUR_MS, "team-b", 1, 0, 0),
    ]
    assert body["rows"][0]["cost"] == pytest.approx((1000 + 20) / 1e6)
    assert list(body["rows"][0]["latency"]) == ["duration_s"]  # what was asked only
    assert body["rows"][0]["latency"]["duration_s"]["count"] == 2
    assert body["rows"][0]["latency"]["duration_s"]["p50"] == pytest.approx(
        0.64025, rel=body["relative_error"]
    )
    totals = {t["key"]: (t["requests"], t["prompt_tokens"]) for t in body["totals"]}
    assert totals == {"team-a": (2, 1050), "team-b": (1, 3000)}


@pytest.mark.usefixtures("traffic")
def test_filters_and_iso_moments(read_client: TokenClient) -> None:
    body = get(
        read_client,
        "/v1/usage",
        since="2026-01-01T00:00:00Z",
        until="2026-01-01T02:00:00",  # naive: UTC
        bucket="day",
        model="m1",
        outcome="ok",
    )
    assert body["filters"] == {"model": "m1", "outcome": "ok"}
    assert [(r["requests"], r["prompt_tokens"]) for r in body["rows"]] == [(2, 4000)]


@pytest.mark.usefixtures("traffic")
def test_csv(read_client: TokenClient) -> None:
    response = get(
        read_client, "/v1/usage", group_by="model,key", format="csv", latency="tpot", **RANGE
    )
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(r["model"], r["key"], r["requests"], r["cost"]) for r in rows] == [
        ("m1", "team-a", "1", str((1000 + 20) / 1e6)),
        ("m2", "team-a", "1", ""),  # no price: empty, not 0
        ("m1", "team-b", "1", str((3000 + 60) / 1e6)),
    ]
    assert rows[1]["errors"] == "1" and rows[1]["aborts"] == "{}"
    assert "tpot_s_p99" in rows[0] and "duration_s_p99" not in rows[0]
    plain = get(read_client, "/v1/usage", format="csv", **RANGE).content.decode()
    assert "_p50" not in plain.splitlines()[0]


@pytest.mark.usefixtures("traffic")
def test_top_keys_by_tokens_and_by_cost(read_client: TokenClient) -> None:
    body = get(read_client, "/v1/usage/top", by="key", **RANGE)
    assert (body["by"], body["metric"]) == ("key", "total_tokens")
    assert [(r["key"], r["prompt_tokens"] + r["completion_tokens"]) for r in body["rows"]] == [
        ("team-b", 3030),
        ("team-a", 1065),
    ]
    by_model = get(read_client, "/v1/usage/top", by="model", metric="cost", limit=5, **RANGE)
    assert [(r["model"], r["cost"] is None) for r in by_model["rows"]] == [
        ("m1", False),
        ("m2", True),  # unpriced: last, not 0
    ]
    assert len(get(read_client, "/v1/usage/top", by="model", limit=1, **RANGE)["rows"]) == 1


def test_the_default_range_is_the_day_before_the_recorders_clock(read_client: TokenClient) -> None:
    archive([make_record(at_ms=BASE_AT_MS + 1000)])
    live.reset(FakeClock(wall_ms=BASE_AT_MS + 3 * HOUR_MS + 5))
    try:
        body = get(read_client, "/v1/usage")
    finally:
        live.reset()
    assert body["until_ms"] == BASE_AT_MS + 4 * HOUR_MS  # widened to the hour's end
    assert body["since_ms"] == BASE_AT_MS + 4 * HOUR_MS - 25 * HOUR_MS
    assert [r["requests"] for r in body["rows"]] == [1]


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/v1/usage", {"bucket": "week"}, "bucket"),
        ("/v1/usage", {"group_by": "model,colour"}, "group_by"),
        ("/v1/usage", {"outcome": "maybe"}, "outcome"),
        ("/v1/usage", {"format": "xml"}, "format"),
        ("/v1/usage", {"latency": "duration,queue"}, "latency"),
        ("/v1/usage", {"model": "m\x00"}, "model"),
        ("/v1/usage/top", {"by": "key", "key": "k\x00"}, "key"),
        ("/v1/usage", {"since": "yesterday"}, "since"),
        ("/v1/usage", {"since": BASE_AT_MS, "until": BASE_AT_MS}, "since"),
        ("/v1/usage", {"modle": "m1"}, "query"),
        ("/v1/usage", {"bucket": "minute", "since": BASE_AT_MS,
                       "until": BASE_AT_MS + 30 * 24 * HOUR_MS}, "query"),
        ("/v1/usage/top", {}, "by"),
        ("/v1/usage/top", {"by": "key", "metric": "joy"}, "metric"),
        ("/v1/usage/top", {"by": "key", "limit": "ten"}, "limit"),
    ],
)  # fmt: skip
def test_bad_parameters_are_a_400_naming_them(
    read_client: TokenClient, path: str, params: dict[str, Any], field: str
) -> None:
    body = get(read_client, path, status=400, **params)
    assert field in body["error"]["fields"], body


def test_an_unknown_name_is_echoed_only_when_plain(read_client: TokenClient) -> None:
    plain = get(read_client, "/v1/usage", status=400, group_by="colour")
    assert "'colour'" in plain["error"]["fields"]["group_by"][0]
    hostile = get(read_client, "/v1/usage", status=400, group_by="<script>")
    assert "<script>" not in hostile["error"]["fields"]["group_by"][0]


def test_an_empty_range_answers_no_rows_and_says_whether_rollups_are_kept(
    read_client: TokenClient, settings: Any
) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "ROLLUPS": False}
    body = get(read_client, "/v1/usage", **RANGE)
    assert (body["rows"], body["totals"], body["rollups_kept"]) == ([], [], False)


def test_a_session_needs_the_archive_permission(client: Any, django_user_model: Any) -> None:
    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(f"{PREFIX}/v1/usage").status_code == 403
    assert client.get(f"{PREFIX}/v1/usage/top?by=key").status_code == 403
    anonymous = type(client)()
    assert anonymous.get(f"{PREFIX}/v1/usage").status_code in (401, 403)


def test_bucket_starts_are_utc_iso(read_client: TokenClient) -> None:
    archive([make_record(at_ms=BASE_AT_MS + 1000)])
    [row] = get(read_client, "/v1/usage", **RANGE)["rows"]
    assert datetime.fromisoformat(row["bucket"]) == datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.usefixtures("traffic")
def test_usage_reads_the_rollups_never_the_archive(read_client: TokenClient) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        get(read_client, "/v1/usage", group_by="model", latency="duration,ttft,tpot", **RANGE)
        get(read_client, "/v1/usage/top", by="key", **RANGE)
    statements = [q["sql"] for q in queries.captured_queries]
    assert any("ferrox_stats_rollup" in sql for sql in statements)
    assert not [sql for sql in statements if "ferrox_stats_finishedrequest" in sql]
