"""The archive's history over REST: keyset pages, filters, one request, export."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest

from ferrox_stats.models import FinishedRequest
from tests.api.conftest import PREFIX, TokenClient
from tests.factories import BASE_AT_MS, archive, make_record

pytestmark = pytest.mark.django_db


def get(client: TokenClient, path: str, /, **params: Any) -> Any:
    response = client.get(f"{PREFIX}{path}", params)
    assert response.status_code == 200, response.content
    return response.json()


def walk(client: TokenClient, **params: Any) -> list[list[str]]:
    pages, cursor = [], None
    while True:
        body = get(client, "/v1/history", **params, **({"cursor": cursor} if cursor else {}))
        pages.append([e["request_id"] for e in body["entries"]])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages


def test_pages_newest_first_by_default_and_oldest_first_on_request(
    read_client: TokenClient,
) -> None:
    archive([make_record(request_id=f"h{n}", at_ms=BASE_AT_MS + n // 2) for n in range(5)])
    assert walk(read_client, limit=2) == [["h4", "h3"], ["h2", "h1"], ["h0"]]
    assert walk(read_client, limit=3, order="oldest") == [["h0", "h1", "h2"], ["h3", "h4"]]


def test_history_entries_are_the_ring_entries_plus_the_row_id(read_client: TokenClient) -> None:
    archive([make_record(request_id="one")])
    [entry] = get(read_client, "/v1/history")["entries"]
    row = FinishedRequest.objects.get()
    assert entry["id"] == row.pk
    assert (entry["decode_tps"], entry["itl_ms"]) == (20.0, 50.0)
    assert entry["at_ms"] == make_record(request_id="x", at_ms=entry["at_ms"]).at_ms


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"model": "m2"}, {"b", "c"}),
        ({"status": 500}, {"b"}),
        ({"outcome": "aborted"}, {"c"}),
        ({"aborted": "client_disconnect"}, {"c"}),
        ({"route": "/v1/completions"}, {"a"}),
        ({"finish_reason": "length"}, {"a"}),
        ({"client": "10.9.9.9"}, {"b"}),
        ({"replica": "gpu-2"}, {"c"}),
        ({"since": BASE_AT_MS + 2000}, {"b", "c"}),
        ({"until": BASE_AT_MS + 2000}, {"a"}),
        ({"since": BASE_AT_MS + 2000, "until": BASE_AT_MS + 3000}, {"b"}),
    ],
)
def test_filters(read_client: TokenClient, params: dict[str, Any], expected: set[str]) -> None:
    archive(
        [
            make_record(
                request_id="a",
                at_ms=BASE_AT_MS + 1000,
                route="/v1/completions",
                finish_reason="length",
            ),
            make_record(
                request_id="b",
                at_ms=BASE_AT_MS + 2000,
                model="m2",
                status=500,
                error="EngineError",
                client="10.9.9.9",
            ),
            make_record(
                request_id="c",
                at_ms=BASE_AT_MS + 3000,
                model="m2",
                aborted="client_disconnect",
                replica="gpu-2",
            ),
        ]
    )
    entries = get(read_client, "/v1/history", **params)["entries"]
    assert {e["request_id"] for e in entries} == expected


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "abc"}, "status"),
        ({"status": "1000"}, "status"),
        ({"outcome": "great"}, "outcome"),
        ({"since": "1.5"}, "since"),
        ({"since": "NaN"}, "since"),
        ({"cursor": "nope"}, "cursor"),
        ({"order": "random"}, "order"),
        ({"limit": "x"}, "limit"),
    ],
)
def test_bad_filters_are_400_naming_the_field(
    read_client: TokenClient, params: dict[str, str], field: str
) -> None:
    response = read_client.get(f"{PREFIX}/v1/history", params)
    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) == [field]


def test_the_page_size_has_a_hard_cap(read_client: TokenClient, settings: Any) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "HISTORY_MAX_PAGE": 3}
    archive([make_record() for _ in range(5)])
    body = get(read_client, "/v1/history", limit=1000)
    assert len(body["entries"]) == 3
    assert body["next_cursor"] is not None


def test_one_request_by_id(read_client: TokenClient) -> None:
    archive(
        [make_record(request_id="dup", replica="a"), make_record(request_id="dup", replica="b")]
    )
    body = get(read_client, "/v1/history/dup")
    assert sorted(e["replica"] for e in body["entries"]) == ["a", "b"]
    missing = read_client.get(f"{PREFIX}/v1/history/none")
    assert missing.status_code == 404
    assert missing.json()["error"]["status"] == 404


def test_export_streams_the_filtered_range(read_client: TokenClient) -> None:
    archive([make_record(request_id=f"e{n}", model="m" if n % 2 else "n") for n in range(6)])
    response = read_client.get(f"{PREFIX}/v1/history/export", {"format": "csv", "model": "m"})
    assert response.status_code == 200
    assert response.streaming
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [r["request_id"] for r in rows] == ["e1", "e3", "e5"]
    jsonl = read_client.get(f"{PREFIX}/v1/history/export", {"format": "jsonl"})
    lines = b"".join(jsonl.streaming_content).decode().splitlines()
    assert [json.loads(line)["request_id"] for line in lines] == [f"e{n}" for n in range(6)]


def test_export_needs_a_known_format(read_client: TokenClient) -> None:
    response = read_client.get(f"{PREFIX}/v1/history/export", {"format": "xml"})
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["format"]


def test_history_is_throttled(read_client: TokenClient, settings: Any) -> None:
    from django.core.cache import cache

    cache.clear()
    settings.FERROX_STATS = {
        **settings.FERROX_STATS,
        "THROTTLE_RATES": {"ferrox_stats_history": "2/minute"},
    }
    codes = [read_client.get(f"{PREFIX}/v1/history").status_code for _ in range(3)]
    cache.clear()
    assert codes == [200, 200, 429]


@pytest.mark.django_db(transaction=True)
def test_a_tail_poller_follows_the_commit_order(read_client: TokenClient) -> None:
    archive([make_record(request_id="t1", at_ms=BASE_AT_MS + 9000)])
    archive([make_record(request_id="t2", at_ms=BASE_AT_MS)])  # finished earlier, committed later
    first = get(read_client, "/v1/history", order="committed", limit=1)
    assert [e["request_id"] for e in first["entries"]] == ["t1"]
    assert first["next_cursor"].startswith("c")
    rest = get(read_client, "/v1/history", order="committed", cursor=first["next_cursor"])
    assert [e["request_id"] for e in rest["entries"]] == ["t2"]
    idle = get(read_client, "/v1/history", order="committed", cursor=rest["next_cursor"])
    assert (idle["entries"], idle["next_cursor"]) == ([], rest["next_cursor"])
    bad = read_client.get(f"{PREFIX}/v1/history", {"order": "committed", "cursor": "1.2"})
    assert list(bad.json()["error"]["fields"]) == ["cursor"]
    # A cursor of the transaction-id order (before migration 0006) is refused by name.
    stale = read_client.get(f"{PREFIX}/v1/history", {"order": "committed", "cursor": "c812.3"})
    assert stale.status_code == 400
    assert "earlier version" in stale.json()["error"]["fields"]["cursor"][0]


def test_each_archived_request_carries_its_cost_at_the_price_in_force(
    read_client: TokenClient, settings: Any
) -> None:
    settings.FERROX_STATS = {
        **settings.FERROX_STATS,
        "PRICES": {
            "priced": [
                {"from": "2026-01-01", "input": 1.0, "output": 2.0},
                {"from": "2026-01-01T01:00Z", "input": 100.0, "output": 200.0},
            ]
        },
    }
    archive(
        [
            make_record(request_id="p1", model="priced", prompt_tokens=1000,
                        completion_tokens=10, at_ms=BASE_AT_MS + 1000),
            make_record(request_id="p2", model="priced", prompt_tokens=1000,
                        completion_tokens=10, at_ms=BASE_AT_MS + 3_600_000),
            make_record(request_id="free", model="unpriced"),
            make_record(request_id="blind", model="priced", prompt_tokens=None),
        ]
    )  # fmt: skip
    costs = {e["request_id"]: e["cost"] for e in get(read_client, "/v1/history")["entries"]}
    assert costs == {
        "p1": pytest.approx((1000 * 1.0 + 10 * 2.0) / 1e6),
        "p2": pytest.approx((1000 * 100.0 + 10 * 200.0) / 1e6),  # the new price's hour
        "free": None,  # no price: null, never 0
        "blind": None,  # no prompt count: not computable
    }
    [one] = get(read_client, "/v1/history/p1")["entries"]
    assert one["cost"] == costs["p1"]
