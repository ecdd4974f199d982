"""The dashboard in headless Chromium against the live server, as an operator uses it.

Requests are recorded in this process (the live server's thread shares the recorder).
Tests that count polls or need polls at exact moments drive the page's timers with
Playwright's clock; nothing here sleeps to wait for the page.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import override_settings

from ferrox_stats import live
from ferrox_stats.archive.writer import ArchiveWriter
from ferrox_stats.web import display, views
from tests.conftest import FakeClock
from tests.web.conftest import HISTORY, PROCESS, log_in, save_artifact
from tests.web.test_display import FORMAT_CASES
from tests.web.traffic import Traffic

pytestmark = pytest.mark.browser

INTERVAL_MS = views.POLL_INTERVAL_MS
# A fixed moment for the pages' fake clocks, so screenshots are reproducible.
T0 = datetime(2026, 3, 14, 9, 41, tzinfo=UTC)


def expect() -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect


def polls_to(page: Any) -> list[str]:
    """The URLs of every poll the page makes from now on."""
    seen: list[str] = []
    page.on(
        "request",
        lambda request: seen.append(request.url) if "/admin/stats" in request.url else None,
    )
    return seen


def open_paused(page: Any, user: str, at: datetime = T0) -> None:
    """Log in, then open the dashboard with its timers stopped until the test moves them."""
    log_in(page, user, PROCESS)
    page.clock.install(time=at)
    page.clock.pause_at(at + timedelta(seconds=1))
    page.goto(PROCESS)


def step(page: Any, ms: int = INTERVAL_MS) -> None:
    """Move the page's clock; wait until any poll that started has been applied."""
    page.clock.run_for(ms)
    expect()(page.locator("#fx-dashboard")).to_have_attribute("data-poll-state", "idle")


def set_hidden(page: Any, hidden: bool) -> None:
    """What the browser does when the tab goes to the background or comes back."""
    page.evaluate(
        """(hidden) => {
        const state = hidden ? "hidden" : "visible";
        Object.defineProperty(document, "hidden", {configurable: true, get: () => hidden});
        Object.defineProperty(document, "visibilityState", {configurable: true, get: () => state});
        document.dispatchEvent(new Event("visibilitychange"));
    }""",
        hidden,
    )


def value(page: Any, path: str) -> Any:
    return page.locator(f'.fx-value [data-path="{path}"]')


def record(n: int, prefix: str = "r", **fields: Any) -> None:
    recorder = live.get_recorder()
    for i in range(n):
        with recorder.track(
            model="llama-3.1-8b-instruct", request_id=f"{prefix}-{i}", **fields
        ) as t:
            t.tokens(prompt=100, completion=1)
            t.tokens(completion=10)
            t.finish(status=200, finish_reason="stop")


@pytest.fixture
def small_ring() -> Iterator[live.Recorder]:
    """A ring of 8 that serves 4 rows a poll, so a burst evicts rows between polls."""
    ferrox = {"REPLICA": "test-replica", "ARCHIVE_SINK": None, "RING_CAPACITY": 8, "MAX_PAGE": 4}
    with override_settings(FERROX_STATS=ferrox):
        yield live.reset()
    live.reset()


# -- the operator's walk through --------------------------------------------------------------


def test_counters_and_rows_follow_traffic_and_drill_down_to_the_archive(
    page: Any, browser_staff: Any, fresh_recorder: live.Recorder
) -> None:
    writer = ArchiveWriter(instance=fresh_recorder.instance, autostart=False)
    fresh_recorder.sink = writer
    log_in(page, "operator", PROCESS)
    check = expect()
    check(value(page, "live.requests.completed")).to_have_text("0")
    check(page.locator("#fx-recent-empty")).to_be_visible()

    record(3, "first")
    check(value(page, "live.requests.completed")).to_have_text("3")
    check(value(page, "live.requests.prompt_tokens_total")).to_have_text("300")
    check(page.locator("#fx-recent tbody tr")).to_have_count(3)
    check(page.locator("#fx-recent-empty")).to_be_hidden()

    in_flight = fresh_recorder.track(model="m").begin()
    check(value(page, "live.requests.active")).to_have_text("1")
    in_flight.finish(status=200)
    record(2, "second", route="/v1/completions")
    check(page.locator("#fx-recent tbody tr").first).to_contain_text("second-1")
    check(page.locator("#fx-recent tbody tr")).to_have_count(6)
    check(value(page, "live.archive.pending")).to_have_text("6")

    assert writer.drain(5.0)
    check(value(page, "live.archive.persisted")).to_have_text("6")
    check(value(page, "live.archive.pending")).to_have_text("0")
    save_artifact(page)

    # Drill down: the row's link opens the archived request, which links to the admin.
    page.get_by_role("link", name="first-1").click()
    check(page.get_by_role("heading", level=1)).to_contain_text("first-1")
    check(page.get_by_role("heading", name="Archived")).to_be_visible()
    check(page.locator("dt:text-is('Completion') + dd")).to_have_text("11")
    page.get_by_role("link", name="Open in the Django admin").click()
    check(page.get_by_role("heading", level=1)).to_have_text("View finished request")
    check(page.locator("#content")).to_contain_text("first-1")

    # History: filter by route.
    page.goto(HISTORY)
    check(page.locator("#fx-history tbody tr")).to_have_count(6)
    page.get_by_label("Route").fill("/v1/completions")
    page.get_by_role("button", name="Apply filters").click()
    check(page.locator("#fx-history tbody tr")).to_have_count(2)
    check(page.locator("#fx-history tbody")).to_contain_text("second-0")
    check(page.locator("#fx-history tbody")).not_to_contain_text("first-")


def test_what_nothing_measured_reads_as_a_dash_before_and_after_polls(
    page: Any, browser_staff: Any, fresh_recorder: live.Recorder
) -> None:
    open_paused(page, "operator")
    check = expect()
    unmeasured = ("live.pool.occupancy", "summary.duration_ms.p95", "summary.ttft_mean_ms")
    for path in unmeasured:
        check(value(page, path)).to_have_text("—")
    step(page)
    for path in (*unmeasured, "live.archive.pending"):
        check(value(page, path)).to_have_text("—")
    check(value(page, "live.requests.completed")).to_have_text("0")
    check(page.locator("#fx-recent-empty")).to_be_visible()
    save_artifact(page, "dashboard-idle.png")

    # An error before the first token: a duration, but still no TTFT.
    with fresh_recorder.track(model="m", request_id="no-token") as t:
        t.finish(status=503, error="EngineOverloaded")
    step(page)
    check(page.locator("#fx-recent tbody")).to_contain_text("no-token")
    check(value(page, "summary.duration_ms.p95")).not_to_have_text("—")
    check(value(page, "summary.ttft_mean_ms")).to_have_text("—")
    check(value(page, "live.pool.occupancy")).to_have_text("—")
    check(page.locator("#fx-recent tbody tr").first).to_contain_text("— → —")


def test_a_lost_session_is_announced_and_polling_goes_on_at_the_same_pace(
    page: Any, browser_staff: Any, fresh_recorder: live.Recorder
) -> None:
    open_paused(page, "operator")
    polls = polls_to(page)
    page.context.clear_cookies()
    check = expect()
    for _ in range(3):
        page.clock.run_for(INTERVAL_MS)
        check(page.locator("#fx-dashboard")).to_have_attribute("data-poll-state", "error")
    check(page.locator("#fx-poll-status")).to_contain_text(
        "Poll failed: your staff session may have ended; reload the page to log in again"
    )
    check(page.get_by_role("status").locator("li")).to_have_count(1)
    assert len(polls) == 3


def test_missed_rows_and_a_reset_ring_are_announced(
    page: Any, browser_staff: Any, small_ring: live.Recorder
) -> None:
    open_paused(page, "operator")
    check = expect()
    notices = page.get_by_role("status")
    record(2, "a")
    step(page)
    check(page.locator("#fx-recent tbody tr")).to_have_count(2)

    record(20, "burst")  # seqs 2..21; the ring keeps 14..21: 12 are evicted unseen
    step(page)
    check(notices).to_contain_text(
        "12 requests were missed: the ring evicted them before this poll."
    )
    check(page.locator("#fx-recent tbody tr.fx-marker")).to_contain_text("12 missed here")
    step(page)  # the rest of the burst, 4 rows a poll, and nothing missed
    check(page.locator("#fx-recent tbody tr:not(.fx-marker)")).to_have_count(10)
    check(page.locator("#fx-recent tbody tr").first).to_contain_text("burst-19")

    live.reset()  # as if the server restarted, or the poll reached another process
    step(page)
    check(notices).to_contain_text(
        "The server restarted or this poll reached another process; the table continues from now."
    )
    record(1, "after")
    step(page)
    check(page.locator("#fx-recent tbody tr").first).to_contain_text("after-0")
    save_artifact(page, "dashboard-notices.png")
    assert page.locator("#fx-recent tbody tr:has-text('burst-19')").count() == 1


def test_polls_are_bounded_whatever_the_traffic_and_stop_while_hidden(
    page: Any, browser_staff: Any, small_ring: live.Recorder
) -> None:
    open_paused(page, "operator")
    polls = polls_to(page)
    # One simulated minute, a second at a time, with every poll answering a full page.
    for second in range(60):
        record(25, f"s{second}")
        step(page, 1000)
    per_minute = 60_000 // INTERVAL_MS
    assert per_minute - 1 <= len(polls) <= per_minute
    # A jump in time (a laptop waking up) brings one poll, never a catch-up burst.
    before = len(polls)
    page.clock.fast_forward("01:00")
    expect()(page.locator("#fx-dashboard")).to_have_attribute("data-poll-state", "idle")
    assert len(polls) - before <= 1
    # Each poll continued from the last one's cursor.
    cursors = [int(url.split("since=")[1].split("&")[0]) for url in polls]
    assert cursors == sorted(cursors)

    set_hidden(page, True)
    hidden_at = len(polls)
    for _ in range(6):
        record(5, "hidden")
        page.clock.run_for(10_000)
    assert len(polls) == hidden_at
    expect()(page.locator("#fx-dashboard")).to_have_attribute("data-poll-state", "paused")
    expect()(page.locator("#fx-poll-status")).to_have_text("Paused while this tab is hidden")

    set_hidden(page, False)
    # Shown again: one poll at once, without moving the clock.
    expect()(page.locator("#fx-dashboard")).to_have_attribute("data-poll-state", "idle")
    assert len(polls) == hidden_at + 1
    expect()(page.locator("#fx-poll-status")).to_contain_text("Live · updated")


def test_the_script_formats_values_as_the_server_does(
    page: Any, browser_staff: Any, fresh_recorder: live.Recorder
) -> None:
    open_paused(page, "operator")
    cases = [[fmt, value] for fmt, value, _ in FORMAT_CASES]
    shown = page.evaluate("(cases) => cases.map(([f, v]) => ferroxFormat.format(f, v))", cases)
    assert shown == [display.FORMATS[fmt](value) for fmt, value in cases]
    assert shown == [expected for _, _, expected in FORMAT_CASES]


# -- realistic traffic: what the page looks like -----------------------------------------------


def test_a_busy_dashboard_fits_a_laptop_and_a_wide_monitor(page: Any, browser_staff: Any) -> None:
    clock = FakeClock(monotonic=10_000.0, wall_ms=int(T0.timestamp() * 1000))
    with override_settings(FERROX_STATS={"REPLICA": "gpu-node-1", "ARCHIVE_SINK": None}):
        recorder = live.reset(clock)
    try:
        writer = ArchiveWriter(instance=recorder.instance, autostart=False)
        recorder.sink = writer
        traffic = Traffic(recorder, clock, rate=9.0)
        traffic.play(30.0)  # the page opens on half a minute of history
        assert writer.drain(10.0)
        start = T0 + timedelta(seconds=30)
        log_in(page, "operator", PROCESS)
        page.clock.install(time=start)
        page.clock.pause_at(start + timedelta(milliseconds=1))
        page.goto(PROCESS)
        for n in range(45):
            if n:  # the archive lags the ring by one poll, as a busy writer would
                assert writer.drain(10.0)
            traffic.play(INTERVAL_MS / 1000)
            step(page)

        check = expect()
        check(page.locator("#fx-recent tbody tr")).to_have_count(views.TABLE_ROWS)
        for path in ("live.pool.occupancy", "summary.ttft_mean_ms", "live.archive.persisted"):
            check(value(page, path)).not_to_have_text("—")
        assert page.locator("#fx-chart-throughput canvas").count() == 1
        page.mouse.move(0, 0)
        # Nothing scrolls sideways on a laptop: every panel reflows to the width.
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        save_artifact(page, "dashboard-1440.png")

        page.set_viewport_size({"width": 1920, "height": 1080})
        step(page)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        save_artifact(page, "dashboard-1920.png")

        page.set_viewport_size({"width": 1440, "height": 900})
        # The newest rows are still pending: the ring shows them until they are archived.
        page.locator("#fx-recent tbody th a").first.click()
        expect()(page.get_by_role("heading", name="In this process's ring")).to_be_visible()
        page.go_back()
        page.locator("#fx-recent tbody th a").nth(40).click()
        expect()(page.get_by_role("heading", name="Archived")).to_be_visible()
        save_artifact(page, "request-1440.png")
        page.goto(HISTORY + "?model=llama-3.1-70b-instruct&outcome=ok")
        expect()(page.locator("#fx-history tbody tr")).to_have_count(views.HISTORY_ROWS)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        save_artifact(page, "history-1440.png")
    finally:
        live.reset()
