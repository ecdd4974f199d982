"""``/v1/requests``, ``/v1/stats`` and ``/admin/stats``: the live, per-process documents."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client, override_settings
from django.urls import reverse

from ferrox_stats import live
from tests.api.conftest import PREFIX, TokenClient
from tests.conftest import FakeClock

pytestmark = pytest.mark.django_db


def record(recorder: live.Recorder, n: int, **kwargs: Any) -> None:
    for _ in range(n):
        with recorder.track(model="m", request_id=f"r{recorder.stats.recorded_total}") as t:
            t.finish(status=200, **kwargs)


def poll(client: Client, since: int, limit: int | None = None, **params: Any) -> Any:
    query = {"since": since, **({"limit": limit} if limit is not None else {}), **params}
    response = client.get(f"{PREFIX}/v1/requests", query)
    assert response.status_code == 200, response.content
    return response.json()


def test_a_freetoken_poller_sees_every_row_once_with_integers_only(
    read_client: TokenClient, recorder: live.Recorder
) -> None:
    record(recorder, 7)
    seen, cursor = [], 0
    for _ in range(4):
        page = poll(read_client, cursor, limit=3)
        seen += [e["request_id"] for e in page["entries"]]
        cursor = page["next_cursor"]
    assert seen == [f"r{i}" for i in range(7)]
    assert cursor == 7
    assert [e["seq"] for e in poll(read_client, 5)["entries"]] == [5, 6]


def test_a_poller_that_falls_behind_the_ring_is_told_how_many_it_missed(
    read_client: TokenClient, settings: Any, clock: FakeClock
) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "RING_CAPACITY": 4, "MAX_PAGE": 4}
    recorder = live.reset(clock)
    record(recorder, 3)
    first = poll(read_client, 0)
    assert (len(first["entries"]), first["missed"], first["next_cursor"]) == (3, 0, 3)
    record(recorder, 6)  # rows 3..8; the ring keeps 5..8
    wrapped = poll(read_client, first["next_cursor"])
    assert [e["seq"] for e in wrapped["entries"]] == [5, 6, 7, 8]
    assert (wrapped["missed"], wrapped["recorded_total"], wrapped["reset"]) == (2, 9, False)
    received = len(first["entries"]) + len(wrapped["entries"])
    assert received + wrapped["missed"] == wrapped["recorded_total"]


def test_a_poller_that_outlives_the_recorder_is_told_to_reset(
    read_client: TokenClient, recorder: live.Recorder, clock: FakeClock
) -> None:
    record(recorder, 5)
    before = poll(read_client, 0)
    fresh = live.reset(clock)  # the process restarted
    record(fresh, 2)
    after = poll(read_client, before["next_cursor"], instance=before["instance"])
    assert after["reset"] is True
    assert after["instance"] == fresh.instance != before["instance"]
    assert (after["entries"], after["next_cursor"]) == ([], 2)
    # Without the instance, a cursor past the new ring's total still reads as a reset.
    assert poll(read_client, 5)["reset"] is True


@pytest.mark.parametrize(("limit", "rows"), [(0, 1), (-3, 1), (2, 2), (10_000, 5)])
def test_limit_is_clamped_to_one_and_max_page(
    read_client: TokenClient, recorder: live.Recorder, limit: int, rows: int
) -> None:
    record(recorder, 5)
    assert len(poll(read_client, 0, limit=limit)["entries"]) == rows


def test_limit_defaults_to_the_setting(
    read_client: TokenClient, recorder: live.Recorder, settings: Any
) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "REQUESTS_DEFAULT_LIMIT": 2}
    record(recorder, 5)
    assert len(poll(read_client, 0)["entries"]) == 2


@pytest.mark.parametrize(
    ("params", "field"),
    [({"since": "-1"}, "since"), ({"since": "x"}, "since"), ({"limit": "many"}, "limit")],
)
def test_bad_parameters_are_400_naming_the_parameter(
    read_client: TokenClient, params: dict[str, str], field: str
) -> None:
    response = read_client.get(f"{PREFIX}/v1/requests", params)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["status"], list(error["fields"])) == (400, [field])


def test_stats_report_null_for_what_nothing_measured(
    read_client: TokenClient, recorder: live.Recorder
) -> None:
    stats = read_client.get(f"{PREFIX}/v1/stats").json()
    assert stats["instance"] == recorder.instance
    assert stats["requests"] == {
        "active": 0,
        "completed": 0,
        "aborts": {},
        "prompt_tokens_total": 0,
        "completion_tokens_total": 0,
        "recorded_total": 0,
        "p95_ms": None,
        "ttft_mean_ms": None,
        "window": {"requests": 0, "seconds": None},
    }
    assert stats["pool"] == {"occupancy": None, "queue_depth": None, "gauges_refused": 0}
    assert stats["throughput"]["decode_tps"] == 0.0  # an observed idle window is a measured 0
    assert stats["throughput"]["decode_samples"] == 0


def test_stats_follow_the_traffic(
    read_client: TokenClient, recorder: live.Recorder, clock: FakeClock
) -> None:
    with recorder.track(model="m") as t:
        clock.advance(0.2)
        t.tokens(completion=1)
        clock.advance(0.8)
        t.tokens(completion=4)
        t.finish(status=200, prompt_tokens=10)
    with pytest.raises(RuntimeError), recorder.track():
        raise RuntimeError
    with recorder.track() as t:
        t.abort("timeout")
    recorder.observe_gauges(pool_used=3, pool_total=4)
    recorder.observe_gauges(pool_used=5, pool_total=4)  # refused
    stats = read_client.get(f"{PREFIX}/v1/stats").json()
    requests = stats["requests"]
    assert (requests["completed"], requests["aborts"]) == (2, {"error": 1, "timeout": 1})
    assert (requests["prompt_tokens_total"], requests["completion_tokens_total"]) == (10, 5)
    assert requests["ttft_mean_ms"] == pytest.approx(200)
    assert stats["throughput"]["decode_tps"] == pytest.approx(5.0)
    assert stats["pool"]["occupancy"] == 0.75
    assert stats["pool"]["gauges_refused"] == 1


def test_admin_stats_is_a_ring_page_with_summaries_and_live_counters(
    read_client: TokenClient, recorder: live.Recorder
) -> None:
    record(recorder, 3)
    body = read_client.get(f"{PREFIX}/admin/stats", {"since": 1, "limit": 1}).json()
    assert [e["seq"] for e in body["entries"]] == [1]
    assert body["next_cursor"] == 2
    assert set(body["summary"]) == {"duration_ms", "ttft_ms", "ttft_mean_ms", "window"}
    assert body["summary"]["window"]["requests"] == 3
    assert body["summary"]["ttft_ms"] == {"p50": None, "p95": None, "p99": None}
    assert body["live"]["requests"]["completed"] == 3


@override_settings(ROOT_URLCONF="tests.urls_root")
def test_admin_stats_coexists_with_the_django_admin_at_admin(
    read_client: TokenClient, admin_client: Client, recorder: live.Recorder
) -> None:
    assert reverse("ferrox_stats:admin-stats") == "/admin/stats"
    assert read_client.get("/admin/stats").json()["instance"] == recorder.instance
    assert admin_client.get("/admin/").status_code == 200
    assert admin_client.get("/admin/ferrox_stats/finishedrequest/").status_code == 200
