"""The pages in a host project: its time zone, its language, its favicon-less root."""

from __future__ import annotations

import gettext
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import reverse
from django.utils import translation

from ferrox_stats import live
from tests.factories import BASE_AT_MS, archive, make_record
from tests.web.conftest import DASHBOARD, HISTORY, PREFIX, PROCESS
from tests.web.html import table_rows

# BASE_AT_MS is 2026-01-01 00:00:00 UTC: 01:00:00 in Berlin (CET, UTC+1); history
# rows show date and time.
BERLIN_CLOCK = "2026-01-01 01:00:05"


def icon_href(page: str) -> str:
    (href,) = re.findall(r'<link rel="icon"[^>]* href="([^"]+)"', page)
    return href


@pytest.mark.parametrize("url", [DASHBOARD, PROCESS, HISTORY])
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


# -- translations -----------------------------------------------------------------------

LOCALE = Path(__file__).resolve().parents[2] / "ferrox_stats" / "locale"


@pytest.mark.parametrize(
    ("url", "german"),
    [
        (DASHBOARD, ["Flotten-Telemetrie", "Letzte Anfragen", "In Bearbeitung", "Instanzen"]),
        (PROCESS, ["Nur dieser Worker-Prozess", "Letzte Anfragen", "In Bearbeitung", "Durchsatz"]),
        (HISTORY, ["Archivierte Anfragen", "Filter anwenden", "Von (UTC)"]),
    ],
)
def test_the_pages_speak_german_when_german_is_active(
    staff_client: Client, recorder: live.Recorder, db: None, url: str, german: list[str]
) -> None:
    with translation.override("de"):
        page = staff_client.get(url).content.decode()

    assert '<html lang="de">' in page
    for text in german:
        assert text in page
    assert "Fleet telemetry" not in page and "Apply filters" not in page
    assert "This worker process only" not in page


def test_a_request_page_and_its_errors_speak_german(
    staff_client: Client, recorder: live.Recorder, db: None
) -> None:
    archive([make_record(request_id="de-1")])
    with translation.override("de"):
        detail = staff_client.get(f"{PREFIX}/dashboard/requests/de-1").content.decode()
        refused = staff_client.get(f"{HISTORY}?since=2026-01-02&until=2026-01-01")

    assert "Anfrage-ID" in detail and "Request id" not in detail
    assert "Bis muss später als Von sein." in refused.content.decode()


def test_the_compiled_catalogue_holds_every_translation_of_the_po_file() -> None:
    # The .mo is committed so hosts need no gettext: it must not lag the .po.
    po = (LOCALE / "de" / "LC_MESSAGES" / "django.po").read_text(encoding="utf-8")
    with (LOCALE / "de" / "LC_MESSAGES" / "django.mo").open("rb") as mo:
        catalogue = gettext.GNUTranslations(mo)
    entries = re.findall(r'^(?:msgctxt "(.+)"\n)?msgid "(.+)"\nmsgstr "(.+)"$', po, re.M)
    assert len(entries) > 100
    for context, msgid, msgstr in entries:
        msgid, msgstr = (s.replace('\\"', '"') for s in (msgid, msgstr))
        found = catalogue.pgettext(context, msgid) if context else catalogue.gettext(msgid)
        assert found == msgstr
