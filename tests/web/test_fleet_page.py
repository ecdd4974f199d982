"""The fleet page's first paint: counters from the heartbeat rows, instances, the archive's tail.

Heartbeat rows are written as the publisher writes them (``tests.states.save``): from a
real recorder's ``process_state`` or from hand-built state documents (design §3).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import OperationalError
from django.test import Client

from ferrox_stats import access, live
from ferrox_stats import fleet as fleet_state
from ferrox_stats.state import process_state
from ferrox_stats.web import views
from tests.conftest import FakeClock, grant
from tests.factories import archive, make_record
from tests.states import BASE_MS, archive_counts, save, state_doc
from tests.web.conftest import DASHBOARD, PREFIX
from tests.web.html import counters, embedded_json, table_rows

FLEET_API = f"{PREFIX}/v1/fleet"

A = "gpu-1/101/aaaaaaaaaaaa"
B = "gpu-1/102/bbbbbbbbbbbb"
STALE = "gpu-2/201/cccccccccccc"
LOST = "gpu-2/202/dddddddddddd"
STOPPED = "gpu-3/301/eeeeeeeeeeee"


@pytest.fixture
def fleet(recorder: live.Recorder) -> None:
    """Two live instances, one stale, one lost with 24 records queued, one stopped."""
    save(
        state_doc(
            A,
            completed=100,
            active=2,
            aborts={"timeout": 1},
            prompt_tokens=5000,
            completion_tokens=900,
            decode=(400.0, 5.0, 40),
            archive=archive_counts(accepted=100, persisted=98, pending=2),
        )
    )
    save(
        state_doc(
            B,
            at_ms=BASE_MS - 1500,
            completed=50,
            active=1,
            decode=(100.0, 4.0, 10),
            archive=archive_counts(accepted=50, persisted=50),
        )
    )
    save(state_doc(STALE, at_ms=BASE_MS - 12_000, completed=7, active=1))
    save(
        state_doc(
            LOST,
            at_ms=BASE_MS - 60_000,
            completed=311,
            archive=archive_counts(accepted=311, persisted=287, pending=24),
        )
    )
    save(
        state_doc(
            STOPPED,
            at_ms=BASE_MS - 900_000,
            stopped=True,
            completed=5000,
            archive=archive_counts(accepted=5000, persisted=4997, dropped={"shutdown_deadline": 3}),
        )
    )


def instances(html: str) -> dict[str, list[str]]:
    """The instances table's rows by instance id."""
    rows = [row for row in table_rows(html) if len(row) == 13]
    return {row[1]: row for row in rows}


def test_the_counters_sum_the_live_instances_only(staff_client: Client, fleet: None) -> None:
    shown = counters(staff_client.get(DASHBOARD).content.decode())
    assert shown["totals.completed"] == "150"  # not the stale 7, the lost 311, the stopped 5000
    assert shown["totals.active"] == "3"
    assert shown["totals.aborts"] == "1"
    assert shown["totals.prompt_tokens_total"] == "5,000"
    assert shown["totals.decode_tps"] == "100.0"  # (400 + 100) tok over the longest span, 5 s
    assert shown["totals.archive.pending"] == "2"
    assert shown["derived.overview.live"] == "2"
    assert shown["derived.overview.stale"] == "1"
    assert shown["derived.overview.lost"] == "1"
    assert shown["derived.overview.stopped"] == "1"
    assert shown["derived.overview.newest_age_s"] == "0.0 s ago"


def test_every_instance_is_listed_newest_first_with_its_state(
    staff_client: Client, fleet: None
) -> None:
    html = staff_client.get(DASHBOARD).content.decode()
    rows = instances(html)
    assert list(rows) == [A, B, STALE, LOST, STOPPED]
    assert rows[A] == [
        "live", A, "host-gpu-1", "101", "gpu-1", "1 min", "00:00:00 0.0 s ago",
        "2", "100", "80.0", "0.0", "2", "",
    ]  # fmt: skip
    assert rows[B][6] == "23:59:58 1.5 s ago"
    assert rows[STALE][0] == "stale"
    assert rows[STALE][12] == "heartbeats late: not in the totals"
    assert rows[LOST][0] == "lost"
    assert rows[LOST][12] == "up to 24 records not archived"
    assert rows[STOPPED][0] == "stopped"
    assert rows[STOPPED][12] == "shut down cleanly · dropped: shutdown_deadline 3"
    # Each state is visibly distinct, by class as well as by word.
    for instance, state in [(A, "live"), (STALE, "stale"), (LOST, "lost"), (STOPPED, "stopped")]:
        assert f'fx-row-{state}" data-instance="{instance}"' in html


def test_last_seen_reads_in_the_projects_time_zone(
    staff_client: Client, fleet: None, settings: Any
) -> None:
    settings.TIME_ZONE = "Europe/Berlin"
    html = staff_client.get(DASHBOARD).content.decode()
    assert instances(html)[A][6] == "01:00:00 0.0 s ago"  # 00:00:00 UTC
    assert "Last seen (Europe/Berlin)" in html
    assert 'datetime="2026-01-01T00:00:00.000Z"' in html


def test_unreadable_heartbeat_rows_are_said_not_hidden(staff_client: Client, fleet: None) -> None:
    assert counters(staff_client.get(DASHBOARD).content.decode())["unreadable"] == ""
    fleet_state.reset()
    save({**state_doc("gpu-7/701/ffffffffffff"), "version": 99})  # another release's document
    shown = counters(staff_client.get(DASHBOARD).content.decode())
    assert shown["unreadable"] == "1 heartbeat rows unreadable, skipped"
    assert shown["totals.completed"] == "150"


def test_the_first_paint_is_what_v1_fleet_answers(staff_client: Client, fleet: None) -> None:
    html = staff_client.get(DASHBOARD).content.decode()
    shown = embedded_json(html, "fx-initial")
    derived = shown.pop("derived")
    assert shown == staff_client.get(FLEET_API).json()
    assert derived["overview"]["lost"] == 1


def test_a_real_recorders_heartbeat_feeds_the_latency_counters(
    staff_client: Client, recorder: live.Recorder, clock: FakeClock
) -> None:
    for duration in (0.25, 0.5, 1.0):
        with recorder.track(model="m") as t:
            clock.advance(0.125)
            t.tokens(prompt=10, completion=1)
            clock.advance(duration - 0.125)
            t.tokens(completion=4)
            t.finish(status=200)
    save(process_state(recorder))
    shown = counters(staff_client.get(DASHBOARD).content.decode())
    assert shown["totals.completed"] == "3"
    # Bucket midpoints, within the stated 1/64 of the value; powers of two are exact bounds.
    assert 500 * (1 - 1 / 64) <= float(shown["totals.latency.duration_s.p50"]) <= 500
    assert shown["totals.latency.duration_s"] == "over 3 requests"
    assert 125 * (1 - 1 / 64) <= float(shown["totals.latency.ttft_s.p99"]) <= 125
    assert shown["totals.archive"] == "no archive reported"


def test_one_instance_narrows_the_counters_and_keeps_the_whole_list(
    staff_client: Client, fleet: None
) -> None:
    response = staff_client.get(DASHBOARD, {"instance": LOST})
    html = response.content.decode()
    shown = counters(html)
    assert shown["totals.completed"] == "311"  # a lost instance's last heartbeat
    assert shown["totals.archive.pending"] == "24"
    assert len(instances(html)) == 5
    assert f'fx-row-lost fx-selected" data-instance="{LOST}" aria-current="true"' in html
    assert "Back to the whole fleet" in html
    assert 'data-instance="gpu-2/202/dddddddddddd"' in html  # the script polls it alone
    # Each instance links to its own view.
    assert 'href="?instance=gpu-1%2F101%2Faaaaaaaaaaaa"' in html


@pytest.mark.parametrize("instance", ["gpu-9/1/nobody", "x" * 256, "nul\x00"])
def test_an_instance_without_a_heartbeat_is_a_404_page_that_says_so(
    staff_client: Client, fleet: None, instance: str
) -> None:
    response = staff_client.get(DASHBOARD, {"instance": instance})
    assert response.status_code == 404
    assert "No instance with this id has a heartbeat" in response.content.decode()


def test_without_heartbeats_the_page_says_why_the_list_is_empty(
    staff_client: Client, recorder: live.Recorder
) -> None:
    html = staff_client.get(DASHBOARD).content.decode()
    assert instances(html) == {}
    assert "No instance has sent a heartbeat yet" in html
    assert counters(html)["totals.completed"] == "0"
    assert counters(html)["totals.latency.duration_s.p50"] == "—"


def test_with_the_database_down_the_page_still_paints_and_says_so(
    staff_client: Client, recorder: live.Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unavailable(instance: str | None) -> dict[str, Any]:
        raise OperationalError("connection refused")

    monkeypatch.setattr(fleet_state, "current", unavailable)
    response = staff_client.get(DASHBOARD)
    assert response.status_code == 200
    html = response.content.decode()
    assert "The database did not answer" in html
    assert counters(html)["totals.completed"] == "—"


# -- the archive's tail ------------------------------------------------------------------


def test_the_tail_starts_at_the_newest_archived_rows_and_its_polls_continue_after_them(
    staff_client: Client, recorder: live.Recorder
) -> None:
    total = views.FIRST_PAINT_ROWS + 5
    archive([make_record(request_id=f"r-{n}") for n in range(total)])
    html = staff_client.get(DASHBOARD).content.decode()
    rows = [row for row in table_rows(html) if len(row) == 11]
    assert len(rows) == views.FIRST_PAINT_ROWS
    assert [row[1] for row in rows[:2]] == [f"r-{total - 1}", f"r-{total - 2}"]
    cursor = parse_attribute(html, "data-tail-cursor")
    archive([make_record(request_id="after-0"), make_record(request_id="after-1")])
    page = staff_client.get(
        f"{PREFIX}/v1/history", {"order": "committed", "cursor": cursor, "limit": views.TAIL_LIMIT}
    ).json()
    assert [e["request_id"] for e in page["entries"]] == ["after-0", "after-1"]


def test_an_empty_archive_is_followed_from_its_start(
    staff_client: Client, recorder: live.Recorder
) -> None:
    html = staff_client.get(DASHBOARD).content.decode()
    assert parse_attribute(html, "data-tail-cursor") == ""
    assert "No archived requests yet" in html


def test_without_the_archive_permission_the_tail_is_not_polled_and_the_page_says_why(
    client: Client, django_user_model: Any, recorder: live.Recorder
) -> None:
    client.force_login(grant(django_user_model.objects.create_user("live-only"), access.DASHBOARD))
    html = client.get(DASHBOARD).content.decode()
    assert "data-tail-url" not in html
    assert "which needs the permission to view finished requests" in html
    assert 'href="/control/telemetry/dashboard/process/"' in html


def parse_attribute(html: str, name: str) -> str:
    start = html.index(f'{name}="') + len(name) + 2
    return html[start : html.index('"', start)]
