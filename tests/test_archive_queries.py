"""The archive's shared queries (``ferrox_stats.archive.queries``), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ferrox_stats.archive import partitions
from ferrox_stats.archive.queries import Cursor
from ferrox_stats.archive.rows import at_ms_to_datetime
from ferrox_stats.models import FinishedRequest
from tests.factories import BASE_AT_MS, archive, make_record

pytestmark = pytest.mark.django_db


def walk(direction: str, limit: int, **filters: object) -> list[list[str]]:
    """Every page's request ids, following next_cursor until it is None."""
    qs = FinishedRequest.objects.matching(filters)
    pages, cursor = [], None
    while True:
        page = getattr(qs, direction)(cursor, limit)
        pages.append([e["request_id"] for e in page.entries])
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor


def test_keyset_pages_cover_every_row_once_in_both_directions() -> None:
    # Several rows share a finish time: the id breaks the tie, so none is skipped.
    records = [make_record(request_id=f"r{n:02d}", at_ms=BASE_AT_MS + n // 3) for n in range(10)]
    archive(records)
    ids = [r.request_id for r in records]
    assert walk("oldest_first", 3) == [ids[0:3], ids[3:6], ids[6:9], ids[9:]]
    assert walk("newest_first", 4) == [ids[::-1][0:4], ids[::-1][4:8], ids[::-1][8:]]


def test_an_exact_last_page_has_no_next_cursor() -> None:
    archive([make_record() for _ in range(4)])
    assert [len(p) for p in walk("newest_first", 2)] == [2, 2]


def test_a_row_that_commits_behind_a_cursor_is_found_by_the_next_newer_poll() -> None:
    archive([make_record(request_id="a", at_ms=BASE_AT_MS)])
    first = FinishedRequest.objects.oldest_first(None, 10)
    assert [e["request_id"] for e in first.entries] == ["a"]
    archive([make_record(request_id="b", at_ms=BASE_AT_MS + 5)])
    last = first.entries[-1]
    after = FinishedRequest.objects.oldest_first(Cursor(last["at_ms"], last["id"]), 10)
    assert [e["request_id"] for e in after.entries] == ["b"]


@pytest.mark.parametrize("text", ["", "12", "a.b", "1.-2", "1.2.3"])
def test_a_malformed_cursor_is_refused_with_a_reason(text: str) -> None:
    with pytest.raises(ValueError, match="cursor must look like"):
        Cursor.decode(text)


def test_a_cursor_round_trips() -> None:
    assert Cursor.decode(Cursor(-5, 7).encode()) == Cursor(-5, 7)


def test_window_is_inclusive_of_since_and_exclusive_of_until() -> None:
    archive([make_record(request_id=f"w{n}", at_ms=BASE_AT_MS + n * 1000) for n in range(5)])
    qs = FinishedRequest.objects.window(
        at_ms_to_datetime(BASE_AT_MS + 1000), at_ms_to_datetime(BASE_AT_MS + 3000)
    )
    assert sorted(qs.values_list("request_id", flat=True)) == ["w1", "w2"]


def test_filters_match_fields_and_lists() -> None:
    archive(
        [
            make_record(request_id="a", model="m1", status=200),
            make_record(request_id="b", model="m2", status=500, error="EngineError"),
            make_record(request_id="c", model="m2", aborted="client_disconnect"),
        ]
    )
    by = FinishedRequest.objects.matching
    assert set(by({"model": "m2"}).values_list("request_id", flat=True)) == {"b", "c"}
    assert set(by({"outcome": ["ok", "error"]}).values_list("request_id", flat=True)) == {"a", "b"}
    assert set(by({"aborted": "client_disconnect"}).values_list("request_id", flat=True)) == {"c"}
    assert by({"model": None}).count() == 3
    with pytest.raises(ValueError, match="cannot filter on 'prompt'"):
        by({"prompt": "x"})


def test_aggregates_use_nearest_rank_and_none_for_what_nothing_measured() -> None:
    durations = [100, 200, 300, 400, 1000]
    archive(
        [make_record(duration_ms=float(d), ttft_ms=None, prompt_tokens=10) for d in durations]
        + [make_record(aborted="timeout", duration_ms=None, ttft_ms=None, prompt_tokens=None)]
    )
    result = FinishedRequest.objects.aggregates()
    assert result["requests"] == 6
    assert result["outcomes"] == {"ok": 5, "error": 0, "aborted": 1}
    assert result["prompt_tokens"] == 50
    assert (result["duration_p50_ms"], result["duration_p95_ms"]) == (300.0, 1000.0)
    assert result["ttft_p50_ms"] is None
    assert result["ttft_mean_ms"] is None


def test_aggregates_of_nothing_are_none_and_zero_counts() -> None:
    result = FinishedRequest.objects.aggregates()
    assert result["requests"] == 0
    assert result["outcomes"] == {"ok": 0, "error": 0, "aborted": 0}
    assert (result["prompt_tokens"], result["duration_p99_ms"], result["first_at_ms"]) == (
        None,
        None,
        None,
    )


def test_by_request_id_finds_every_replicas_row() -> None:
    archive([make_record(request_id="x", replica="a"), make_record(request_id="x", replica="b")])
    assert {e["replica"] for e in FinishedRequest.objects.by_request_id("x")} == {"a", "b"}
    assert FinishedRequest.objects.by_request_id("nope") == []


# The history page's filters (web/forms.py) and the API's (api/filters.py), each with a
# value its index leaves out (the common one) and values it keeps.
FILTER_VALUES = {
    "model": ["m1", "m2"],
    "route": ["/v1/chat/completions", "/v1/embeddings"],
    "status": [200, 429],
    "outcome": ["ok", "error", "aborted"],
    "finish_reason": ["stop", "length"],
    "client": ["10.0.0.1", "10.0.0.2"],
    "replica": ["gpu-1", "gpu-2"],
    "aborted": ["timeout"],
}


def _varied_record(n: int, at_offset: int, kind: int) -> object:
    """A record whose filterable fields vary with ``kind``: ok, error or aborted."""
    fields: dict[str, object] = {
        "request_id": f"k{n:03d}",
        "at_ms": BASE_AT_MS + at_offset,
        "model": FILTER_VALUES["model"][n % 2],
        "route": FILTER_VALUES["route"][n // 2 % 2],
        "client": FILTER_VALUES["client"][n // 3 % 2],
        "replica": FILTER_VALUES["replica"][n // 5 % 2],
        "finish_reason": FILTER_VALUES["finish_reason"][n // 7 % 2],
    }
    if kind == 1:
        fields.update(status=429, error="RateLimited", finish_reason=None)
    elif kind == 2:
        fields.update(aborted="timeout", finish_reason=None)
    return make_record(**fields)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rows=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2)), min_size=1, max_size=14),
    limit=st.integers(1, 4),
    name=st.sampled_from(sorted(FILTER_VALUES)),
    choice=st.integers(0, 2),
    direction=st.sampled_from(["newest_first", "oldest_first"]),
)
def test_keyset_pages_under_any_filter_give_each_matching_row_once_in_order(
    rows: list[tuple[int, int]], limit: int, name: str, choice: int, direction: str
) -> None:
    # Few distinct finish times, so many rows tie on finished_at and only the id orders
    # them: the row comparison must break those ties exactly as the ORDER BY does.
    FinishedRequest.objects.all().delete()
    archive([_varied_record(n, at, kind) for n, (at, kind) in enumerate(rows)])
    values = FILTER_VALUES[name]
    value = values[choice % len(values)]
    expected = list(
        FinishedRequest.objects.filter(**{name: value})
        .order_by("-finished_at", "-id")
        .values_list("request_id", flat=True)
    )
    if direction == "oldest_first":
        expected.reverse()
    pages = walk(direction, limit, **{name: value})
    assert [request_id for page in pages for request_id in page] == expected
    assert all(len(page) == limit for page in pages[:-1])


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plans")
@pytest.mark.parametrize(
    ("name", "value", "index"),
    [
        (None, None, "ferrox_fr_finished_id"),
        ("model", "m2", "ferrox_fr_model_keyset"),
        ("route", "/v1/embeddings", "ferrox_fr_route_keyset"),
        ("status", 429, "ferrox_fr_status_keyset"),
        ("status", 200, "ferrox_fr_finished_id"),  # the common value: not in its index
        ("outcome", "error", "ferrox_fr_outcome_keyset"),
        ("outcome", "ok", "ferrox_fr_finished_id"),
        ("finish_reason", "length", "ferrox_fr_finish_keyset"),
        ("finish_reason", "stop", "ferrox_fr_finished_id"),
        ("client", "10.0.0.2", "ferrox_fr_client_keyset"),
        ("replica", "gpu-2", "ferrox_fr_replica_keyset"),
        ("aborted", "timeout", "ferrox_fr_aborted_keyset"),
    ],
)
@pytest.mark.parametrize("direction", ["newest_first", "oldest_first"])
def test_a_deep_page_of_every_history_filter_is_one_index_range(
    name: str | None, value: object, index: str, direction: str
) -> None:
    # With sorts and full scans priced out, a plan can still sort (disabling only makes
    # it costly): so no Sort below proves the index yields the keyset order, and the
    # row comparison in its Index Cond proves the page starts at the cursor, not at
    # the top of the filter's rows.
    if partitions.is_partitioned():
        # The rows' day and its neighbours in partitions of their own, beside DEFAULT.
        day = date(2026, 1, 1)
        partitions.make_days([day - timedelta(days=1), day, day + timedelta(days=1)])
    archive([_varied_record(n, n // 3, n % 3) for n in range(60)])
    qs = FinishedRequest.objects.matching({name: value} if name else {})
    cursor = Cursor(BASE_AT_MS + 10, 10**6)
    with connection.cursor() as db:
        for setting in ("seqscan", "bitmapscan", "sort", "incremental_sort"):
            db.execute(f"SET LOCAL enable_{setting} = off")
        with CaptureQueriesContext(connection) as captured:
            getattr(qs, direction)(cursor, 5)
        db.execute("EXPLAIN (FORMAT JSON) " + captured.captured_queries[-1]["sql"])
        plan = db.fetchone()[0][0]["Plan"]
    assert plan["Node Type"] == "Limit"
    [below] = plan["Plans"]
    # A partitioned archive reads each partition's part of the index, merged in order.
    scans = below["Plans"] if below["Node Type"] in ("Append", "Merge Append") else [below]
    assert len(scans) >= (4 if partitions.is_partitioned() else 1)
    for scan in scans:
        assert scan["Node Type"] == "Index Scan"
        assert "ROW(finished_at, id)" in scan["Index Cond"]
        assert "Plans" not in scan
    # The rows' partition reads the filter's index (an empty one may read any).
    home = (
        partitions.day_name(date(2026, 1, 1)) if len(scans) > 1 else "ferrox_stats_finishedrequest"
    )
    [scan] = [s for s in scans if s["Relation Name"] == home]
    assert index_of(scan["Index Name"]) == index


def index_of(name: str) -> str:
    """The archive's index that ``name`` is (or is a partition's part of)."""
    with connection.cursor() as db:
        db.execute(
            "SELECT inhparent::regclass::text FROM pg_inherits WHERE inhrelid = %s::regclass",
            [name],
        )
        row = db.fetchone()
    return name if row is None else str(row[0])
