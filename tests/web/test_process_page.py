"""The per-process page's first paint: counters, the embedded document, the ring's rows."""

from __future__ import annotations

import pytest
from django.test import Client

from ferrox_stats import documents, live
from ferrox_stats.archive.writer import ArchiveWriter
from ferrox_stats.web import panels, views
from tests.conftest import FakeClock
from tests.web.conftest import PROCESS, ROOT
from tests.web.html import counters, embedded_json, table_rows

# Values nothing measured on an idle process: they read "—", never "0".
UNMEASURED = (
    "live.pool.occupancy",
    "live.pool.queue_depth",
    "summary.duration_ms.p50",
    "summary.duration_ms.p95",
    "summary.ttft_ms.p95",
    "summary.ttft_mean_ms",
    "live.archive.pending",
    "live.archive.dropped",
    "live.archive.dead_lettered",
)


def test_an_idle_process_paints_dashes_for_what_nothing_measured(
    staff_client: Client, recorder: live.Recorder
) -> None:
    shown = counters(staff_client.get(PROCESS).content.decode())
    for path in UNMEASURED:
        assert shown[path] == "—", path
    # Counts start at 0: zero is a measurement.
    assert shown["live.requests.active"] == "0"
    assert shown["live.requests.completed"] == "0"
    assert shown["live.requests.aborts"] == "0"
    assert shown["summary.window"] == "no finished requests in the ring"
    assert shown["live.archive"] == "no archive sink in this process"


def test_a_request_without_a_first_token_leaves_ttft_unmeasured(
    staff_client: Client, recorder: live.Recorder, clock: FakeClock
) -> None:
    with recorder.track(route="/v1/chat/completions", model="m") as t:
        clock.advance(0.25)
        t.finish(status=503, error="EngineOverloaded")
    shown = counters(staff_client.get(PROCESS).content.decode())
    assert shown["summary.duration_ms.p95"] == "250.0"
    assert shown["summary.ttft_ms.p50"] == "—"
    assert shown["summary.ttft_mean_ms"] == "—"
    assert shown["live.requests.aborts"] == "1"  # the error counts as an abort
    assert shown["live.pool.occupancy"] == "—"


def test_the_counters_show_what_was_measured(
    staff_client: Client, recorder: live.Recorder, clock: FakeClock
) -> None:
    recorder.observe_gauges(pool_used=3, pool_total=4, queue_depth=2)
    with recorder.track(model="m") as t:
        clock.advance(0.1)
        t.tokens(prompt=1200, completion=1)
        clock.advance(0.5)
        t.tokens(completion=10)
        t.finish(status=200)
    with recorder.track(model="m") as t:
        t.abort("timeout")
    recorder.track(model="m").begin()  # still in flight
    shown = counters(staff_client.get(PROCESS).content.decode())
    assert shown["live.requests.active"] == "1"
    assert shown["live.requests.completed"] == "1"
    assert shown["live.requests.aborts"] == "1"
    assert shown["live.requests.prompt_tokens_total"] == "1,200"
    assert shown["live.requests.completion_tokens_total"] == "11"
    assert shown["live.pool.occupancy"] == "75.0"
    assert shown["live.pool.queue_depth"] == "2.0"
    assert shown["summary.ttft_ms.p50"] == "100.0"
    assert shown["summary.duration_ms.p95"] == "600.0"


def test_archive_health_is_shown_when_the_process_archives(
    staff_client: Client, recorder: live.Recorder
) -> None:
    recorder.sink = ArchiveWriter(instance=recorder.instance, queue_max=1, autostart=False)
    for _ in range(3):
        with recorder.track(model="m") as t:
            t.finish(status=200)
    html = staff_client.get(PROCESS).content.decode()
    shown = counters(html)
    assert shown["live.archive.persisted"] == "0"
    assert shown["live.archive.pending"] == "1"
    assert shown["live.archive.dropped"] == "2"
    assert shown["live.archive.dead_lettered"] == "0"
    assert "queue_full 2" in html


def test_the_embedded_document_is_the_admin_stats_document(
    staff_client: Client, recorder: live.Recorder, clock: FakeClock
) -> None:
    for n in range(3):
        with recorder.track(model="m", request_id=f"r-{n}") as t:
            clock.advance(0.2)
            t.tokens(completion=4)
            t.finish(status=200)
    html = staff_client.get(PROCESS).content.decode()
    expected = documents.admin_stats(recorder.stats.since(0, 50), recorder.snapshot())
    assert embedded_json(html, "fx-initial") == expected
    assert expected["next_cursor"] == 3


def test_the_first_paint_holds_the_newest_rows_newest_first(
    staff_client: Client, recorder: live.Recorder
) -> None:
    total = views.FIRST_PAINT_ROWS + 7
    for n in range(total):
        with recorder.track(model="m", request_id=f"r-{n}") as t:
            t.finish(status=200)
    html = staff_client.get(PROCESS).content.decode()
    rows = table_rows(html)
    assert len(rows) == views.FIRST_PAINT_ROWS
    assert [row[1] for row in rows[:2]] == [f"r-{total - 1}", f"r-{total - 2}"]
    assert rows[-1][1] == "r-7"
    # The polls continue right after the newest row the page holds.
    assert embedded_json(html, "fx-initial")["next_cursor"] == total


def test_a_row_reads_like_the_table_header_says(
    staff_client: Client, recorder: live.Recorder, clock: FakeClock
) -> None:
    with recorder.track(route="/v1/chat/completions", model="llama", request_id="chatcmpl-9") as t:
        clock.advance(0.12)
        t.tokens(prompt=512, completion=1)
        clock.advance(0.5)
        t.tokens(completion=10)
        t.finish(status=200, finish_reason="stop")
    with recorder.track(model="llama", request_id="chatcmpl-10") as t:
        t.abort("client_disconnect")
    rows = table_rows(staff_client.get(PROCESS).content.decode())
    assert rows == [
        ["00:00:00", "chatcmpl-10", "llama", "—", "—", "aborted: client_disconnect",
         "— → —", "—", "0.0", "—", "test-replica"],
        ["00:00:00", "chatcmpl-9", "llama", "/v1/chat/completions", "200", "ok",
         "512 → 11", "120.0", "620.0", "20.0", "test-replica"],
    ]  # fmt: skip


def test_rows_link_to_their_detail_page(staff_client: Client, recorder: live.Recorder) -> None:
    with recorder.track(model="m", request_id="chatcmpl-a/b") as t:
        t.finish(status=200)
    html = staff_client.get(PROCESS).content.decode()
    assert 'href="/control/telemetry/dashboard/requests/chatcmpl-a/b"' in html


@pytest.mark.parametrize(
    ("attribute", "value"),
    [
        ("data-poll-url", "/control/telemetry/admin/stats"),
        ("data-detail-url", "/control/telemetry/dashboard/requests/REQUEST_ID"),
        ("data-interval-ms", "2000"),
        ("data-table-rows", "200"),
    ],
)
def test_the_page_tells_its_script_where_and_how_often_to_poll(
    staff_client: Client, recorder: live.Recorder, attribute: str, value: str
) -> None:
    assert f'{attribute}="{value}"' in staff_client.get(PROCESS).content.decode()


def test_each_chart_has_an_element_and_lines_in_the_script(
    staff_client: Client, recorder: live.Recorder
) -> None:
    html = staff_client.get(PROCESS).content.decode()
    script = (ROOT / "ferrox_stats/static/ferrox_stats/charts.js").read_text()
    for chart in panels.CHARTS:
        assert f'id="fx-chart-{chart.key}"' in html
        assert f"    {chart.key}: [" in script
