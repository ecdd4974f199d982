"""The history page: the archive's filters and keyset paging, and bad input refused politely."""

from __future__ import annotations

import html as htmllib
import re
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from ferrox_stats.web import views
from tests.factories import BASE_AT_MS, archive, make_record
from tests.web.conftest import HISTORY
from tests.web.html import table_rows


def ids(response: Any) -> list[str]:
    return [row[1] for row in table_rows(response.content.decode())]


def link(response: Any, rel: str) -> str | None:
    found = re.search(rf'<a href="\?([^"]*)" rel="{rel}">', response.content.decode())
    return None if found is None else f"{HISTORY}?{htmllib.unescape(found.group(1))}"


def follow(client: Client, response: Any, rel: str) -> Any:
    url = link(response, rel)
    assert url is not None, f"no {rel} link"
    return client.get(url)


@pytest.fixture
def many(db: None) -> list[str]:
    """125 archived rows, two finishing in each millisecond (ties broken by id); newest first."""
    records = [
        make_record(request_id=f"r-{n:03d}", at_ms=BASE_AT_MS + (n // 2) * 1000) for n in range(125)
    ]
    archive(records)
    return [f"r-{n:03d}" for n in reversed(range(125))]


def test_older_links_walk_every_row_once_newest_first(
    staff_client: Client, many: list[str]
) -> None:
    seen: list[str] = []
    url: str | None = HISTORY
    pages = 0
    while url is not None:
        response = staff_client.get(url)
        assert response.status_code == 200
        page = ids(response)
        assert len(page) <= views.HISTORY_ROWS
        seen.extend(page)
        url = link(response, "next")
        pages += 1
    assert seen == many
    assert pages == 3


def test_newer_links_walk_back_to_the_newest_page(staff_client: Client, many: list[str]) -> None:
    first = staff_client.get(HISTORY)
    assert link(first, "prev") is None  # nothing is newer than the newest page
    second = follow(staff_client, first, "next")
    third = follow(staff_client, second, "next")
    assert ids(third) == many[100:]
    back = follow(staff_client, third, "prev")
    assert ids(back) == ids(second)
    top = follow(staff_client, back, "prev")
    assert ids(top) == ids(first)
    assert link(top, "prev") is None


def test_a_page_neither_counts_nor_offsets(staff_client: Client, many: list[str]) -> None:
    first = staff_client.get(HISTORY)
    with CaptureQueriesContext(connection) as queries:
        assert follow(staff_client, first, "next").status_code == 200
    sql = " ".join(q["sql"].upper() for q in queries.captured_queries)
    assert "COUNT(" not in sql
    assert "OFFSET" not in sql


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("model=qwen", ["r-err", "r-qwen"]),
        ("route=%2Fv1%2Fcompletions", ["r-route"]),
        ("status=503", ["r-err"]),
        ("outcome=aborted", ["r-abort"]),
        ("outcome=error", ["r-err"]),
        ("finish_reason=length", ["r-length"]),
        ("client=10.9.9.9", ["r-client"]),
        ("replica=gpu-2", ["r-replica"]),
        ("model=qwen&status=200", ["r-qwen"]),
        ("model=nothing-like-it", []),
    ],
)
def test_each_filter_narrows_the_rows(
    staff_client: Client, db: None, query: str, expected: list[str]
) -> None:
    archive(
        [
            make_record(request_id="r-plain"),
            make_record(request_id="r-qwen", model="qwen"),
            make_record(request_id="r-route", route="/v1/completions"),
            make_record(request_id="r-err", model="qwen", status=503, error="Overloaded"),
            make_record(request_id="r-abort", aborted="client_disconnect"),
            make_record(request_id="r-length", finish_reason="length"),
            make_record(request_id="r-client", client="10.9.9.9"),
            make_record(request_id="r-replica", replica="gpu-2"),
        ]
    )
    response = staff_client.get(f"{HISTORY}?{query}")
    assert response.status_code == 200
    assert sorted(ids(response)) == expected
    if not expected:
        assert "No archived request matches these filters" in response.content.decode()


@pytest.mark.parametrize("zone", ["UTC", "America/New_York", "Asia/Kolkata"])
def test_the_time_range_is_read_in_the_zone_the_page_shows_times_in(
    staff_client: Client, db: None, settings: Any, zone: str
) -> None:
    settings.TIME_ZONE = zone
    archive(
        [make_record(request_id=f"t-{s}", at_ms=BASE_AT_MS + s * 1000) for s in range(0, 120, 10)]
    )
    # BASE_AT_MS + 30 s .. + 60 s, written as the zone's wall clock reads it.
    base = datetime.fromtimestamp(BASE_AT_MS / 1000, ZoneInfo(zone))
    since, until = ((base + timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%S") for s in (30, 60))
    response = staff_client.get(f"{HISTORY}?since={since}&until={until}")
    assert ids(response) == ["t-50", "t-40", "t-30"]
    assert f"From ({zone})" in response.content.decode()


def test_paging_links_keep_the_filters(staff_client: Client, db: None) -> None:
    archive([make_record(request_id=f"q-{n:03d}", model="qwen") for n in range(60)])
    archive([make_record(request_id=f"o-{n:03d}") for n in range(60)])
    first = staff_client.get(f"{HISTORY}?model=qwen")
    older = link(first, "next")
    assert older is not None and "model=qwen" in older
    second = staff_client.get(older)
    assert ids(second) == [f"q-{n:03d}" for n in reversed(range(10))]
    assert link(second, "next") is None


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("status=abc", "HTTP status: Enter a whole number."),
        ("status=999", "HTTP status: Ensure this value is less than or equal to 599."),
        ("outcome=bogus", "Outcome: Select a valid choice."),
        ("since=yesterday", "From (UTC): Enter a valid date/time."),
        ("since=2026-01-02T00:00&until=2026-01-01T00:00", "Until must be later than From."),
        ("model=a%00b", "Model: Null characters are not allowed."),
        ("cursor=not-a-cursor", "This page link is not valid any more"),
        ("cursor=99999999999999999999.1", "This page link is not valid any more"),
        ("cursor=1.99999999999999999999", "This page link is not valid any more"),
        ("cursor=1.2&direction=sideways", "Select a valid choice. sideways is not one of"),
        (f"model={'x' * 201}", "Model: Ensure this value has at most 200 characters"),
        # A misspelt filter would show every row as if filtered.
        (
            "status=200&sttus=500",
            "Unknown query parameter 'sttus'; this page accepts: client, cursor, direction, "
            "finish_reason, model, outcome, replica, route, since, status, until.",
        ),
        ("modle=x&sk-proj-abcdefghijkl=1", "parameters 'modle', (a name that is not a plain"),
    ],
)
def test_bad_input_is_refused_with_a_message(
    staff_client: Client, db: None, query: str, message: str
) -> None:
    response = staff_client.get(f"{HISTORY}?{query}")
    assert response.status_code == 400
    html = htmllib.unescape(response.content.decode())
    assert 'role="alert"' in html
    assert message in html
    assert "<table" not in html
