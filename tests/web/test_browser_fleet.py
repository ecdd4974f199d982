"""The fleet page in headless Chromium against the live server, its clock and the page's faked.

Heartbeat rows are written as the publisher writes them (``tests.states.save``), from
hand-built state documents or from real recorders playing traffic; the server judges
their age on a FakeClock, so no instance turns stale while the test runs. The page's
timers run on Playwright's clock: nothing here sleeps.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ferrox_stats import live
from ferrox_stats.archive.writer import ArchiveWriter
from ferrox_stats.state import process_state
from ferrox_stats.web import views
from tests.conftest import FakeClock
from tests.factories import archive, make_record
from tests.states import archive_counts, save, state_doc
from tests.web.conftest import ARTIFACTS, DASHBOARD, ROOT, log_in, save_artifact
from tests.web.traffic import Traffic

pytestmark = pytest.mark.browser

INTERVAL_MS = views.POLL_INTERVAL_MS
T0 = datetime(2026, 3, 14, 9, 41, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)

A = "gpu-node-1/4101/a1b2c3d4e5f6"
B = "gpu-node-1/4102/0f1e2d3c4b5a"
STALE = "gpu-node-2/5101/c0ffee000001"
LOST = "gpu-node-2/5102/dead00000002"
STOPPED = "gpu-node-3/6101/5709ed000003"


def expect() -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect


@pytest.fixture
def server_clock() -> Iterator[FakeClock]:
    """The live server's recorder on a fake clock: the fleet's ages are read on it."""
    clock = FakeClock(monotonic=10_000.0, wall_ms=T0_MS)
    live.reset(clock)
    yield clock
    live.reset()


def open_paused(page: Any, url: str = DASHBOARD) -> None:
    log_in(page, "operator", url)
    page.clock.install(time=T0)
    page.clock.pause_at(T0 + timedelta(seconds=1))
    page.goto(url)


def poll(page: Any) -> None:
    """One poll interval on the page's clock; wait until the page applied the poll."""
    page.clock.run_for(INTERVAL_MS)
    expect()(page.locator("#fx-dashboard")).to_have_attribute("data-poll-state", "idle")


def step(page: Any, clock: FakeClock) -> None:
    """One poll interval on both clocks (the server's first)."""
    clock.advance(INTERVAL_MS / 1000)
    poll(page)


def value(page: Any, path: str) -> Any:
    return page.locator(f'.fx-value [data-path="{path}"]')


def instance_row(page: Any, instance: str) -> Any:
    return page.locator(f'#fx-instances tbody tr[data-instance="{instance}"]')


def heartbeat(clock: FakeClock, instance: str, **fields: Any) -> None:
    save(state_doc(instance, at_ms=clock.wall, started_ms=T0_MS - 3_600_000, **fields))


def test_fleet_counters_states_and_one_instance_follow_the_heartbeats(
    page: Any, browser_staff: Any, server_clock: FakeClock
) -> None:
    clock = server_clock
    check = expect()
    heartbeat(clock, A, completed=100, active=2, decode=(400.0, 5.0, 40))
    heartbeat(clock, B, completed=50, active=1, decode=(100.0, 5.0, 10))
    save(state_doc(STALE, at_ms=clock.wall - 12_000, completed=7, active=1))
    save(
        state_doc(
            LOST,
            at_ms=clock.wall - 60_000,
            completed=311,
            archive=archive_counts(accepted=311, persisted=287, pending=24),
        )
    )
    save(state_doc(STOPPED, at_ms=clock.wall - 900_000, stopped=True, completed=5000))
    archive([make_record(request_id=f"first-{n}") for n in range(3)])

    open_paused(page)
    check(value(page, "totals.completed")).to_have_text("150")
    check(page.locator("#fx-instances tbody tr")).to_have_count(5)
    check(instance_row(page, LOST)).to_contain_text("up to 24 records not archived")
    check(instance_row(page, LOST).locator(".fx-badge")).to_have_text("lost")
    check(instance_row(page, STALE).locator(".fx-badge")).to_have_text("stale")
    check(page.locator("#fx-recent tbody tr")).to_have_count(3)

    # The next heartbeats, and two requests archived since the page opened.
    old = page.evaluate("(url) => fetch(url).then((r) => r.json())", "/control/telemetry/v1/fleet")
    clock.advance(2.0)
    heartbeat(clock, A, completed=130, active=1, decode=(600.0, 5.0, 60))
    heartbeat(clock, B, completed=60, active=0, decode=(200.0, 5.0, 20))
    archive([make_record(request_id=f"tail-{n}") for n in range(2)])
    poll(page)
    check(value(page, "totals.completed")).to_have_text("190")
    check(value(page, "totals.decode_tps")).to_have_text("160.0")
    check(page.locator("#fx-recent tbody tr").first).to_contain_text("tail-1")
    check(page.locator("#fx-recent tbody tr")).to_have_count(5)
    # The first paint's rows are not fetched again.
    assert page.locator("#fx-recent tbody tr:has-text('first-0')").count() == 1

    # A worker whose answer is older than what is drawn (its read lagged): not drawn.
    page.route("**/v1/fleet*", lambda route: route.fulfill(json=old))
    step(page, clock)
    check(page.locator("#fx-dashboard")).to_have_attribute("data-ignored", "1")
    check(value(page, "totals.completed")).to_have_text("190")
    page.unroute("**/v1/fleet*")

    # B's heartbeats stop: 40 s later it is lost, and it leaves the totals, which says so.
    clock.advance(40.0)
    heartbeat(clock, A, completed=140, active=1, decode=(600.0, 5.0, 60))
    step(page, clock)
    check(value(page, "totals.completed")).to_have_text("140")
    check(instance_row(page, B).locator(".fx-badge")).to_have_text("lost")
    check(page.get_by_role("status")).to_contain_text("Completed went from 190 to 140")
    check(page.get_by_role("status")).to_contain_text(f"{B} left the live instances")
    save_artifact(page, "fleet-walkthrough.png")

    # One instance: its counters alone, the list whole, the way back to the fleet.
    instance_row(page, LOST).get_by_role("link").click()
    page.wait_for_url("**?instance=*")
    check(page.get_by_role("heading", level=1)).to_contain_text(f"One instance {LOST}")
    check(value(page, "totals.completed")).to_have_text("311")
    check(instance_row(page, LOST)).to_have_attribute("aria-current", "true")
    check(page.locator("#fx-instances tbody tr")).to_have_count(5)
    page.get_by_role("link", name="Back to the whole fleet").click()
    check(page.get_by_role("heading", level=1)).to_have_text("Fleet telemetry")

    # This worker process's own view stays one click away, and says what it is.
    page.get_by_role("link", name="This process", exact=True).click()
    check(page.get_by_role("heading", level=1)).to_have_text("This worker process only")


def test_the_script_builds_instance_rows_as_the_server_paints_them(
    page: Any, browser_staff: Any, server_clock: FakeClock
) -> None:
    heartbeat(server_clock, A, completed=1234, active=2, decode=(401.0, 5.0, 40))
    save(
        state_doc(
            LOST,
            at_ms=server_clock.wall - 61_500,
            completed=311,
            archive=archive_counts(accepted=311, persisted=287, pending=24),
        )
    )
    save(
        state_doc(
            STOPPED,
            at_ms=server_clock.wall - 900_000,
            stopped=True,
            archive=archive_counts(accepted=9, persisted=6, dropped={"shutdown_deadline": 3}),
        )
    )
    open_paused(page)
    rows = page.locator("#fx-instances tbody tr")
    painted = rows.all_inner_texts()
    assert len(painted) == 3
    # The server's clock has not moved: the poll answers the same document, in the
    # script's rows this time.
    page.evaluate(
        "document.querySelectorAll('#fx-instances tbody tr')"
        ".forEach((tr) => { tr.dataset.painted = 'server'; })"
    )
    poll(page)
    assert page.locator("#fx-instances tbody tr[data-painted]").count() == 0
    assert page.locator("#fx-instances tbody tr.fx-row-lost").count() == 1
    assert rows.all_inner_texts() == painted
    assert [rows.nth(i).get_attribute("class") for i in range(3)] == [
        "fx-instance-row fx-row-live",
        "fx-instance-row fx-row-lost",
        "fx-instance-row fx-row-stopped",
    ]


def test_polls_are_bounded_and_a_tail_faster_than_a_page_says_the_table_is_behind(
    page: Any, browser_staff: Any, server_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "TAIL_LIMIT", 4)  # the live server renders in this process
    heartbeat(server_clock, A, completed=1)
    open_paused(page)
    fleet_polls: list[str] = []
    tail_polls: list[str] = []
    page.on(
        "request",
        lambda r: (
            (fleet_polls if "/v1/fleet" in r.url else tail_polls).append(r.url)
            if "/v1/fleet" in r.url or "/v1/history" in r.url
            else None
        ),
    )
    archive([make_record(request_id=f"burst-{n}") for n in range(10)])
    for _ in range(30):  # half a simulated minute, a second at a time: 15 ticks
        server_clock.advance(1.0)
        page.clock.run_for(1000)
        expect()(page.locator("#fx-dashboard")).to_have_attribute("data-poll-state", "idle")
    assert len(fleet_polls) == len(tail_polls) == 15
    check = expect()
    check(page.get_by_role("status")).to_contain_text(
        "the recent-requests table is behind the archive's tail"
    )
    # Four rows a poll: the burst is through after three polls, in commit order.
    check(page.locator("#fx-recent tbody tr")).to_have_count(10)
    check(page.locator("#fx-recent tbody tr").first).to_contain_text("burst-9")
    check(page.locator("#fx-dashboard")).to_have_attribute("data-tail-behind", "false")
    assert all("order=committed" in url and "limit=4" in url for url in tail_polls)


def _worker(name: str, seed: int, rate: float) -> tuple[live.Recorder, FakeClock, Traffic]:
    clock = FakeClock(monotonic=10_000.0, wall_ms=T0_MS - 30_000)
    recorder = live.Recorder(replica=name.split("/")[0], clock=clock, instance=name)
    recorder.sink = ArchiveWriter(instance=name, autostart=False)
    return recorder, clock, Traffic(recorder, clock, rate=rate, seed=seed)


def _publish(recorder: live.Recorder, host: str) -> None:
    doc = process_state(recorder)
    doc.update(host=host, pid=int(recorder.instance.split("/")[1]))
    save(doc)


def test_a_busy_fleet_fits_a_laptop_and_a_wide_monitor(
    page: Any, browser_staff: Any, server_clock: FakeClock
) -> None:
    workers = [
        (_worker(A, 7, 5.0), "gpu-node-1.inference.internal"),
        (_worker(B, 8, 4.0), "gpu-node-1.inference.internal"),
        (_worker("gpu-node-2/5103/7a7a7a7a7a7a", 9, 6.0), "gpu-node-2.inference.internal"),
    ]
    for (recorder, _, traffic), host in workers:
        traffic.play(30.0)  # the page opens on half a minute of history
        _publish(recorder, host)
        assert recorder.sink.drain(10.0)
    save(
        state_doc(
            LOST,
            at_ms=T0_MS - 75_000,
            completed=1873,
            archive=archive_counts(accepted=1873, persisted=1849, pending=24),
        )
    )
    save(state_doc(STOPPED, at_ms=T0_MS - 900_000, stopped=True, completed=23_412))
    open_paused(page)
    for _ in range(30):
        for (recorder, _, traffic), host in workers:
            traffic.play(INTERVAL_MS / 1000)
            _publish(recorder, host)
            assert recorder.sink.drain(10.0)
        step(page, server_clock)

    check = expect()
    check(page.locator("#fx-recent tbody tr")).to_have_count(views.TABLE_ROWS)
    check(instance_row(page, LOST)).to_contain_text("up to 24 records not archived")
    check(page.locator("#fx-instances .fx-badge-live")).to_have_count(3)
    for path in ("totals.latency.duration_s.p99", "totals.decode_tps", "totals.archive.persisted"):
        check(value(page, path)).not_to_have_text("—")
    completed = sum(recorder.serving.snapshot(0).completed for (recorder, _, _), _ in workers)
    check(value(page, "totals.completed")).to_have_text(f"{completed:,}")
    page.mouse.move(0, 0)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    save_artifact(page, "fleet-1440.png")
    # The README's picture: from the header down to the instances table.
    box = page.locator(".fx-instances-card").bounding_box()
    clip = {"x": 0, "y": 0, "width": 1440, "height": box["y"] + box["height"] + 16}
    target = os.environ.get("FERROX_SCREENSHOT")
    for path in [
        ARTIFACTS / "fleet-1440-instances.png",
        *([ROOT / Path(target)] if target else []),
    ]:
        page.screenshot(path=str(path), animations="disabled", full_page=True, clip=clip)

    page.set_viewport_size({"width": 1920, "height": 1080})
    step(page, server_clock)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    save_artifact(page, "fleet-1920.png")
