"""The usage page in headless Chromium: reached from the fleet page, its charts drawn, a
model's row opening the history filtered, and nothing scrolling sideways at 1400 px."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ferrox_stats import live
from ferrox_stats.web import views
from tests.conftest import FakeClock
from tests.factories import BASE_AT_MS, archive, make_record
from tests.web.conftest import DASHBOARD, ROOT, log_in, save_artifact

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("rollups_on")]

HOUR_MS = 3_600_000
# 2026-01-01 23:50 UTC: the page's 24 hours are that day's.
NOW_MS = BASE_AT_MS + 24 * HOUR_MS - 10 * 60_000
MODELS = ("llama-3.1-8b-instruct", "llama-3.1-70b-instruct", "qwen2.5-coder-32b-instruct")
KEYS = ("team-search", "team-chat", "batch-eval", "support-bot")
PRICES = {
    "llama-3.1-8b-instruct": [{"from": "2025-01-01", "input": 0.1, "output": 0.2}],
    "llama-3.1-70b-instruct": [{"from": "2025-01-01", "input": 0.6, "output": 0.8}],
}


def expect() -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect


@pytest.fixture
def day_of_traffic(settings: Any, rollups_on: None) -> Iterator[int]:
    """A day of requests over three models and four keys, with errors and aborts, and
    the recorder's clock at its end; how many the 70b model served."""
    settings.FERROX_STATS = {**settings.FERROX_STATS, "PRICES": PRICES}
    live.reset(FakeClock(wall_ms=NOW_MS))
    chance = random.Random(14)
    records = []
    for hour in range(24):
        busy = 4 + round(6 * (1 - abs(hour - 14) / 14))  # a working day's shape
        for n in range(busy):
            model = MODELS[n % 3]
            big = model == MODELS[1]
            failed = chance.random() < 0.06
            records.append(
                make_record(
                    request_id=f"u-{hour:02d}-{n:02d}",
                    at_ms=BASE_AT_MS + hour * HOUR_MS + n * 60_000,
                    model=model,
                    via_api_key=KEYS[(n + hour) % len(KEYS)],
                    replica=f"gpu-node-{n % 2 + 1}",
                    prompt_tokens=chance.randint(200, 3000),
                    completion_tokens=chance.randint(20, 600),
                    ttft_ms=chance.uniform(300, 900) if big else chance.uniform(60, 250),
                    duration_ms=chance.uniform(4000, 12000) if big else chance.uniform(800, 4000),
                    status=503 if failed else 200,
                    error="EngineOverloaded" if failed else None,
                    aborted="client_disconnect" if not failed and chance.random() < 0.05 else None,
                )
            )
    archive(records)
    yield sum(1 for record in records if record.model == MODELS[1])
    live.reset()


def test_the_usage_page_draws_its_charts_and_drills_down_to_the_history(
    page: Any, browser_staff: Any, day_of_traffic: int
) -> None:
    check = expect()
    page.set_viewport_size({"width": 1400, "height": 900})
    log_in(page, "operator", DASHBOARD)
    page.get_by_role("navigation").get_by_role("link", name="Usage").click()
    check(page.get_by_role("heading", level=1)).to_have_text("Usage")
    check(page.locator("#fx-totals")).to_contain_text("Requests")

    # Every chart has data: bars for the counts, lines for the rates and percentiles.
    for key in ("requests", "tokens", "cost"):
        assert page.locator(f"#fx-usage-{key} svg rect.fx-bar").count() >= 24, key
    for key in ("rates", "ttft", "duration"):
        assert page.locator(f"#fx-usage-{key} svg path.fx-line").count() >= 1, key
    # Two percentiles for each of the three models.
    check(page.locator("#fx-usage-ttft svg path.fx-line")).to_have_count(6)
    check(page.get_by_role("img", name="Time to first token")).to_be_visible()
    # The qwen model has no price: its rows' cost is "—", never 0.
    check(page.locator("#fx-usage-models tbody tr", has_text="qwen")).to_contain_text("—")

    page.mouse.move(0, 0)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    # The tables fit their cards whole: no column hidden behind a scrollbar.
    assert page.evaluate(
        "[...document.querySelectorAll('.fx-usage-tables .fx-table-wrap')]"
        ".every((wrap) => wrap.scrollWidth <= wrap.clientWidth)"
    )
    save_artifact(page, "usage-1400.png")
    target = os.environ.get("FERROX_SCREENSHOT")
    if target:
        page.screenshot(path=str(ROOT / Path(target)), animations="disabled", full_page=True)

    # A model's row opens the history filtered by it, over the page's range.
    row = page.locator("#fx-usage-models tbody tr", has_text=MODELS[1])
    row.get_by_role("link", name="requests").click()
    check(page.get_by_role("heading", level=1)).to_have_text("History")
    check(page.get_by_label("Model")).to_have_value(MODELS[1])
    check(page.get_by_label("From (UTC)")).to_have_value("2026-01-01T00:00")  # as Chromium reads it
    shown = min(day_of_traffic, views.HISTORY_ROWS)
    check(page.locator("#fx-history tbody tr")).to_have_count(shown)
    check(page.locator("#fx-history tbody")).not_to_contain_text(MODELS[0])
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
