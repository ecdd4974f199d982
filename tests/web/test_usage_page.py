"""The usage page: totals, top keys and models, charts per bucket, over the rollups."""

from __future__ import annotations

import html as htmllib
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from ferrox_stats import access, live
from ferrox_stats.archive import usage as rollups
from ferrox_stats.web import forms, usage_page
from tests.conftest import FakeClock, grant
from tests.factories import BASE_AT_MS, archive, make_record
from tests.web.conftest import HISTORY, PREFIX
from tests.web.html import table_rows

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("rollups_on")]

USAGE = f"{PREFIX}/dashboard/usage/"
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
# 2026-01-01 02:30 UTC: the 24 hours shown end with the 02:00 bucket.
NOW_MS = BASE_AT_MS + 2 * HOUR_MS + 30 * 60_000
PRICES = {"m1": [{"from": "2025-01-01", "input": 1.0, "output": 2.0}]}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(wall_ms=NOW_MS)


@pytest.fixture
def traffic(recorder: live.Recorder, rollups_on: None) -> None:
    archive(
        [
            make_record(request_id="r1", at_ms=BASE_AT_MS + 1000, model="m1",
                        via_api_key="team-a", prompt_tokens=1000, completion_tokens=10,
                        ttft_ms=100.0, duration_ms=500.0),
            make_record(request_id="r2", at_ms=BASE_AT_MS + 2000, model="m2",
                        via_api_key="team-a", prompt_tokens=50, completion_tokens=5,
                        status=500, error="upstream", ttft_ms=None, duration_ms=20.0),
            make_record(request_id="r3", at_ms=BASE_AT_MS + HOUR_MS + 1000, model="m1",
                        via_api_key="team-b", prompt_tokens=3000, completion_tokens=30,
                        cached_tokens=100, aborted="client_disconnect", ttft_ms=None,
                        duration_ms=900.0, replica="gpu-2"),
            # Three days back: in the 7 and 30 days only.
            make_record(request_id="r4", at_ms=BASE_AT_MS - 3 * DAY_MS, model="m1",
                        via_api_key="team-b", prompt_tokens=7, completion_tokens=1),
        ]
    )  # fmt: skip


def page(client: Client, query: str = "", status: int = 200) -> str:
    response = client.get(f"{USAGE}?{query}")
    assert response.status_code == status
    return htmllib.unescape(response.content.decode())


def totals(html: str) -> dict[str, tuple[str, str]]:
    found = re.findall(
        r"<dt>(.*?)</dt>\s*<dd class=\"fx-value[^\"]*\">(.*?)</dd>\s*"
        r"<dd class=\"fx-note\">(.*?)</dd>",
        html,
    )
    return {label: (value, note) for label, value, note in found}


def table(html: str, table_id: str) -> list[list[str]]:
    start = html.index(f'id="{table_id}"')
    return table_rows(html[start : html.index("</table>", start)])


def figure(html: str, key: str) -> str:
    start = html.index(f'id="fx-usage-{key}"')
    return html[start : html.index("</figure>", start)]


def tooltips(html: str, key: str) -> list[str]:
    return re.findall(r"<title>([^<]*·[^<]*)</title>", figure(html, key))


@pytest.mark.usefixtures("traffic")
def test_totals_and_tables_show_the_ranges_numbers(staff_client: Client) -> None:
    html = page(staff_client)
    shown = totals(html)
    assert shown["Requests"] == ("3", "")
    assert shown["Prompt tokens"] == ("4,050", "")
    assert shown["Completion tokens"] == ("45", "")
    assert shown["Cached tokens"] == ("100", "")
    assert shown["Errors"] == ("1", "33.3 %")
    assert shown["Aborted"] == ("1", "33.3 %")
    # Columns: label, requests, prompt, completion, cached, errors, aborted, cost, history.
    assert table(html, "fx-usage-keys") == [
        ["team-b", "1", "3,000", "30", "100", "0", "1", "—", ""],
        ["team-a", "2", "1,050", "15", "0", "1", "0", "—", ""],
    ]
    assert table(html, "fx-usage-models") == [
        ["m1", "2", "4,000", "40", "100", "0", "1", "—", "requests"],
        ["m2", "1", "50", "5", "0", "1", "0", "—", "requests"],
    ]


@pytest.mark.usefixtures("traffic")
def test_cost_is_shown_when_priced_and_never_0_when_not(
    staff_client: Client, settings: Any
) -> None:
    unpriced = totals(page(staff_client))["Cost (USD)"]
    assert unpriced == ("—", "no price")

    settings.FERROX_STATS = {**settings.FERROX_STATS, "PRICES": PRICES}
    html = page(staff_client)
    # m1: (1000 + 3000 - 100) x 1 + 100 x 1 (no cached price) + (10 + 30) x 2, per 1M.
    assert totals(html)["Cost (USD)"] == ("0.004080", "1 request without a price not included")
    costs = {row[0]: row[7] for row in table(html, "fx-usage-models")}
    assert costs == {"m1": "0.004080", "m2": "—"}
    assert tooltips(html, "cost") == [
        "2026-01-01 00:00 · cost: 0.001020",
        "2026-01-01 01:00 · cost: 0.003060",
    ]


def test_nothing_priced_with_no_requests_is_no_cost_either(
    staff_client: Client, recorder: live.Recorder
) -> None:
    html = page(staff_client)
    assert totals(html)["Requests"] == ("0", "")
    assert totals(html)["Cost (USD)"] == ("—", "no requests")
    assert "No requests in this range." in figure(html, "requests")
    assert "<svg" not in html


@pytest.mark.parametrize(
    ("query", "requests", "first", "last"),
    [
        ("", "3", "2025-12-31 03:00", "2026-01-01 02:00"),
        ("range=24h", "3", "2025-12-31 03:00", "2026-01-01 02:00"),
        ("range=7d", "4", "2025-12-25 03:00", "2026-01-01 02:00"),
        ("range=30d", "4", "2025-12-03", "2026-01-01"),
    ],
)
@pytest.mark.usefixtures("traffic")
def test_each_range_ends_with_the_bucket_now_is_in(
    staff_client: Client, query: str, requests: str, first: str, last: str
) -> None:
    html = page(staff_client, query)
    assert totals(html)["Requests"] == (requests, "")
    description = f"Requests, one value per bucket from {first} to {last}."
    assert "<desc id=" in figure(html, "requests")
    assert description in figure(html, "requests")


@pytest.mark.usefixtures("traffic")
def test_buckets_are_the_ranges_hours_or_utc_days(staff_client: Client) -> None:
    assert tooltips(page(staff_client), "requests") == [
        "2026-01-01 00:00 · ok: 1",
        "2026-01-01 00:00 · errors: 1",
        "2026-01-01 01:00 · aborted: 1",
    ]
    assert tooltips(page(staff_client, "range=30d"), "tokens") == [
        "2025-12-29 · prompt: 7",
        "2025-12-29 · completion: 1",
        "2026-01-01 · prompt: 4,050",
        "2026-01-01 · completion: 45",
    ]
    assert "per UTC day" in page(staff_client, "range=30d")


@pytest.mark.usefixtures("traffic")
def test_the_range_follows_the_recorders_clock(staff_client: Client, clock: FakeClock) -> None:
    clock.advance(2 * 86400)  # two days on: the day's requests are out of the 24 hours
    html = page(staff_client)
    assert totals(html)["Requests"] == ("0", "")
    assert "From 2026-01-02 03:00 to 2026-01-03 03:00" in html
    assert totals(page(staff_client, "range=7d"))["Requests"] == ("4", "")


@pytest.mark.parametrize(
    ("query", "requests"),
    [("model=m1", "2"), ("key=team-a", "2"), ("replica=gpu-2", "1"), ("model=m1&key=team-a", "1"),
     ("model=nothing", "0")],
)  # fmt: skip
@pytest.mark.usefixtures("traffic")
def test_filters_narrow_every_section(staff_client: Client, query: str, requests: str) -> None:
    html = page(staff_client, query)
    assert totals(html)["Requests"] == (requests, "")
    assert sum(int(row[1]) for row in table(html, "fx-usage-models")) == int(requests)


@pytest.mark.usefixtures("traffic")
def test_a_rate_or_latency_nothing_measured_is_absent_not_0(staff_client: Client) -> None:
    html = page(staff_client)
    # Only the two buckets with requests have rates; the other 22 have none, not 0 %.
    assert tooltips(html, "rates") == [
        "2026-01-01 00:00 · errors: 50.0 %",
        "2026-01-01 01:00 · errors: 0.0 %",
        "2026-01-01 00:00 · aborted: 0.0 %",
        "2026-01-01 01:00 · aborted: 100.0 %",
    ]
    ttft = tooltips(html, "ttft")
    # r3 (m1, 01:00) and r2 (m2) had no first token: no TTFT point, while durations have.
    assert [t.split(":")[0] + ":" + t.split(":")[1] for t in ttft] == [
        "2026-01-01 00:00 · m1 p50",
        "2026-01-01 00:00 · m1 p95",
    ]
    assert re.fullmatch(r"2026-01-01 00:00 · m1 p50: 10\d\.\d", ttft[0])
    duration = tooltips(html, "duration")
    assert len(duration) == 6  # m1 at 00:00 and 01:00, m2 at 00:00; p50 and p95 each


def test_a_latency_chart_with_nothing_measured_says_so(
    staff_client: Client, recorder: live.Recorder
) -> None:
    archive([make_record(at_ms=BASE_AT_MS + 1000, ttft_ms=None)])
    html = page(staff_client)
    assert "Nothing measured in this range." in figure(html, "ttft")
    assert "<svg" in figure(html, "duration")


@pytest.mark.usefixtures("traffic")
def test_rows_link_to_this_page_narrowed_and_models_to_the_history(
    staff_client: Client,
) -> None:
    html = page(staff_client, "range=7d")
    assert '<a href="?range=7d&key=team-a">team-a</a>' in html
    (href,) = re.findall(rf'href="({HISTORY}\?[^"]*model=m1[^"]*)"', html)
    query = parse_qs(urlsplit(href).query)
    assert query == {
        "since": ["2025-12-25T03:00:00"],
        "until": ["2026-01-01T03:00:00"],
        "model": ["m1"],
    }
    history = staff_client.get(href).content.decode()
    ids = sorted(row[1] for row in table_rows(history))
    assert ids == ["r1", "r3", "r4"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("range=1y", "Range: Select a valid choice. 1y is not one of the available choices."),
        ("rnge=7d", "Unknown query parameter 'rnge'; this page accepts: key, model, range, "
                    "replica."),
        (f"key={'k' * 201}", "API key: Ensure this value has at most 200 characters"),
        ("model=a%00b", "Model: Null characters are not allowed."),
    ],
)  # fmt: skip
def test_bad_parameters_are_a_400_with_a_message(
    staff_client: Client, recorder: live.Recorder, query: str, message: str
) -> None:
    html = page(staff_client, query, status=400)
    assert 'role="alert"' in html
    assert message in html
    assert "<svg" not in html and "<table" not in html


def test_the_form_offers_exactly_the_pages_ranges() -> None:
    offered = [value for value, _ in forms.UsageForm().fields["range"].choices]  # type: ignore[attr-defined]
    assert offered == list(usage_page.RANGES)


@pytest.mark.parametrize("query", ["", "range=7d", "range=30d"])
@pytest.mark.usefixtures("traffic")
def test_the_page_asks_for_usage_four_times_whatever_the_range(
    staff_client: Client, monkeypatch: pytest.MonkeyPatch, query: str
) -> None:
    calls: list[dict[str, Any]] = []
    real = rollups.usage

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(rollups, "usage", counted)
    page(staff_client, query)
    assert len(calls) == 4
    assert sum(1 for kwargs in calls if kwargs.get("latency")) == 1


def test_too_many_rows_is_said_not_shown_as_nothing(
    staff_client: Client, recorder: live.Recorder, settings: Any
) -> None:
    archive([make_record(at_ms=BASE_AT_MS + 1000)])
    settings.FERROX_STATS = {**settings.FERROX_STATS, "USAGE_MAX_ROWS": 10}
    html = page(staff_client)  # 24 hour buckets > 10 rows
    assert "The answer would hold more than 10 rows" in html
    assert "Totals for the range" not in html


def test_without_rollups_kept_the_page_says_what_it_shows(
    staff_client: Client, recorder: live.Recorder, settings: Any
) -> None:
    assert 'id="fx-rollups-off"' not in page(staff_client)
    settings.FERROX_STATS = {**settings.FERROX_STATS, "ROLLUPS": False}
    html = page(staff_client)
    assert "The usage rollups are not being kept" in html
    assert "manage.py ferrox_stats_rollup" in html


def test_access_needs_the_archive_permission(
    client: Client, django_user_model: Any, recorder: live.Recorder
) -> None:
    response = client.get(USAGE)
    assert response.status_code == 302
    assert response["Location"] == f"/admin/login/?next={USAGE}"
    user = django_user_model.objects.create_user("someone", is_staff=True)
    client.force_login(user)
    assert client.get(USAGE).status_code == 403
    grant(user, access.DASHBOARD)
    assert client.get(USAGE).status_code == 403
    grant(user, access.ARCHIVE, group="archive")
    assert client.get(USAGE).status_code == 200


@pytest.mark.usefixtures("traffic")
def test_times_are_in_the_projects_time_zone(staff_client: Client, settings: Any) -> None:
    settings.TIME_ZONE = "Europe/Berlin"
    html = page(staff_client)
    expected = "From 2025-12-31 04:00 to 2026-01-01 04:00, per hour; times are in Europe/Berlin."
    assert expected in html
    assert tooltips(html, "requests")[0] == "2026-01-01 01:00 · ok: 1"
    # The history link's From/Until are read in the same zone.
    assert "since=2025-12-31T04%3A00%3A00" in html


def test_the_page_speaks_german(
    staff_client: Client, recorder: live.Recorder, settings: Any
) -> None:
    settings.LANGUAGE_CODE = "de"
    html = page(staff_client)
    assert '<html lang="de">' in html
    for german in ("<h1>Nutzung</h1>", "Summen über den Zeitraum", "Nutzung nach Schlüssel"):
        assert german in html
    assert "Totals for the range" not in html and "Usage by key" not in html
