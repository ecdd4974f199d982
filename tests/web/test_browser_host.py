"""The pages at a host's sizes and settings, in headless Chromium: 1400 px wide, with
real-world ids and names, and the host's time zone."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from ferrox_stats import live
from tests.factories import BASE_AT_MS, archive, make_record
from tests.web.conftest import DASHBOARD, HISTORY, PROCESS, log_in, save_artifact

pytestmark = pytest.mark.browser

# What production rows look like: OpenAI-shaped ids, hub model names, long host names.
LONG = {
    "model": "meta-llama/Llama-3.1-70B-Instruct-FP8-dynamic",
    "route": "/v1/chat/completions",
    "replica": "gpu-node-eu-central-1a-017.inference.internal",
    "client": "2001:db8:85a3::8a2e:370:7334",
    "finish_reason": "content_filter",
}
CHANGELIST = "/admin/ferrox_stats/finishedrequest/"


def long_rows(n: int) -> None:
    recorder = live.get_recorder()
    for i in range(n):
        request_id = f"chatcmpl-{i:032x}"
        with recorder.track(model=LONG["model"], route=LONG["route"], request_id=request_id) as t:
            t.tokens(prompt=123_456, completion=1)
            t.tokens(completion=65_535)
            t.finish(status=200, finish_reason="length")
    archive(
        [
            make_record(request_id=f"chatcmpl-{i:032x}", aborted="client_disconnect", **LONG)
            for i in range(n)
        ]
    )


def overflows(page: Any) -> bool:
    return bool(
        page.evaluate("document.documentElement.scrollWidth > document.documentElement.clientWidth")
    )


@pytest.mark.parametrize(
    ("url", "name", "rows"),
    [
        (DASHBOARD, "dashboard", "#fx-recent tbody tr"),
        (PROCESS, "process", "#fx-recent tbody tr"),
        (HISTORY, "history", "#fx-history tbody tr"),
        (CHANGELIST, "changelist", "#result_list tbody tr"),
    ],
)
def test_nothing_scrolls_sideways_at_1400_px(
    page: Any, browser_staff: Any, fresh_recorder: live.Recorder, url: str, name: str, rows: str
) -> None:
    long_rows(20)
    page.set_viewport_size({"width": 1400, "height": 900})
    log_in(page, "operator", url)
    page.wait_for_selector(rows)

    save_artifact(page, f"{name}-1400.png")
    assert not overflows(page)
    # Every column fits its card: nothing hides behind a sideways scroll.
    table = page.locator(rows).first.locator("xpath=ancestor::table")
    width = table.evaluate("(t) => [t.scrollWidth, t.parentElement.clientWidth]")
    assert width[0] <= width[1]


def test_polled_rows_read_in_the_projects_time_zone(
    page: Any, browser_staff: Any, settings: Any
) -> None:
    settings.TIME_ZONE = "Europe/Berlin"
    with override_settings(FERROX_STATS={"REPLICA": "tz", "ARCHIVE_SINK": None}):
        live.reset()
    try:
        log_in(page, "operator", PROCESS)
        assert page.evaluate("ferroxFormat.timeZone") == "Europe/Berlin"
        # 2026-01-01 00:00:05 UTC is 01:00:05 in Berlin (CET).
        assert page.evaluate(f"ferroxFormat.clockTime(new Date({BASE_AT_MS + 5000}))") == (
            "01:00:05"
        )
        with live.get_recorder().track(model="m", request_id="tz-polled") as t:
            t.finish(status=200)
        row = page.locator("#fx-recent tbody tr", has_text="tz-polled")
        row.wait_for()
        iso = row.locator("time").get_attribute("datetime")
        shown = row.locator("time").inner_text()
        expected = page.evaluate(
            "(iso) => new Date(iso).toLocaleTimeString('en-GB', "
            "{timeZone: 'Europe/Berlin', hourCycle: 'h23'})",
            iso,
        )
        assert shown == expected
        assert "Finished (Europe/Berlin)" in page.locator("#fx-recent thead").text_content()
    finally:
        live.reset()
