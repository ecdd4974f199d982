"""The pages in a host project: its time zone, its favicon-less root."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import reverse

from ferrox_stats import live
from tests.factories import BASE_AT_MS, archive, make_record
from tests.web.conftest import DASHBOARD, HISTORY, PREFIX
from tests.web.html import table_rows

# BASE_AT_MS is 2026-01-01 00:00:00 UTC: 01:00:00 in Berlin (CET, UTC+1); history
# rows show date and time.
BERLIN_CLOCK = "2026-01-01 01:00:05"


def icon_href(page: str) -> str:
    (href,) = re.findall(r'<link rel="icon"[^>]* href="([^"]+)"', page)
    return href


@pytest.mark.parametrize("url", [DASHBOARD, HISTORY])
def test_the_pages_link_the_apps_own_favicon(
    staff_client: Client, recorder: live.Recorder, db: None, url: str
) -> None:
    page = staff_client.get(url).content.decode()

    href = icon_href(page)
    assert href == "/static/ferrox_stats/favicon.svg"
    assert finders.find("ferrox_stats/favicon.svg") is not None


def test_the_admin_changelist_links_the_apps_favicon(admin_client: Client) -> None:
    page = admin_client.get(reverse("admin:ferrox_stats_finishedrequest_changelist"))

    assert icon_href(page.content.decode()) == "/static/ferrox_stats/favicon.svg"


def test_times_show_in_the_projects_time_zone(
    staff_client: Client, recorder: live.Recorder, settings: Any
) -> None:
    settings.TIME_ZONE = "Europe/Berlin"
    archive([make_record(request_id="tz-1", at_ms=BASE_AT_MS + 5_000)])

    history = staff_client.get(HISTORY).content.decode()
    detail = staff_client.get(f"{PREFIX}/dashboard/requests/tz-1").content.decode()

    (row,) = table_rows(history)
    assert row[0] == BERLIN_CLOCK
    assert "Finished (Europe/Berlin)" in history
    assert 'datetime="2026-01-01T00:00:05.000Z"' in history  # the instant stays UTC
    assert "2026-01-01 01:00:05.000" in detail
    assert "Finished (Europe/Berlin)" in detail
    # The script formats polled times in the same zone.
    assert 'data-time-zone="Europe/Berlin"' in staff_client.get(DASHBOARD).content.decode()
