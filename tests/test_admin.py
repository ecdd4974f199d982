"""The admin: read-only, searchable, filterable, and bounded in every query it runs."""

from __future__ import annotations

import csv
import html
import io
import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection
from django.http import StreamingHttpResponse
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from ferrox_stats.admin import FinishedRequestAdmin, RecentValuesFilter
from ferrox_stats.archive.export import COLUMNS, write_csv
from ferrox_stats.archive.paginator import CappedCountPaginator
from ferrox_stats.archive.rows import datetime_to_at_ms
from ferrox_stats.core.requests import Record, entry
from ferrox_stats.models import DeadLetter, FinishedRequest

from .factories import archive, make_record

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:ferrox_stats_finishedrequest_changelist"
DEAD_CHANGELIST = "admin:ferrox_stats_deadletter_changelist"


def at_ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return datetime_to_at_ms(datetime(year, month, day, hour, minute, tzinfo=UTC))


def listed(response: Any) -> list[str | None]:
    """The request ids of the rows the changelist shows, in order."""
    return [row.request_id for row in response.context["cl"].result_list]


def readonly_values(response: Any) -> dict[str, str]:
    """Each field of a read-only detail page, as the page renders it."""
    return {
        field.field["name"]: str(field.contents())
        for fieldset in response.context["adminform"]
        for line in fieldset
        for field in line
    }


def counts_are_bounded(queries: list[dict[str, Any]]) -> bool:
    """Every COUNT runs over a LIMITed subquery: never over the table itself."""
    counts = [q["sql"] for q in queries if "COUNT(" in q["sql"].upper()]
    return bool(counts) and all(
        re.search(r"COUNT\(\*\) .*FROM \(SELECT .* LIMIT \d+\)", sql, re.S | re.I) for sql in counts
    )


def test_the_changelist_lists_rows_newest_first(admin_client: Client) -> None:
    records = [make_record(), make_record(), make_record()]
    archive(records)

    response = admin_client.get(reverse(CHANGELIST))

    assert response.status_code == 200
    assert listed(response) == [r.request_id for r in reversed(records)]
    content = response.content.decode()
    assert "512 → 11" in content
    assert "3 finished requests" in content


@pytest.mark.parametrize(
    "query",
    [
        "",
        "?outcome=error",
        "?model=llama-3.1-8b-instruct&stream__exact=1",
        "?q=chatcmpl-x",
        "?finished_at__year=2026",
        "?finished_at__year=2026&finished_at__month=1",
        "?finished_at__year=2026&finished_at__month=1&finished_at__day=1",
    ],
)
def test_the_changelist_never_counts_or_scans_the_whole_table(
    admin_client: Client, query: str
) -> None:
    archive([make_record(), make_record(status=500, error="upstream 500")])

    with CaptureQueriesContext(connection) as ctx:
        response = admin_client.get(reverse(CHANGELIST) + query)

    assert response.status_code == 200
    assert counts_are_bounded(ctx.captured_queries)
    # Filter choices and the date drill-down read the newest rows and a MIN/MAX.
    assert not [q["sql"] for q in ctx.captured_queries if "DISTINCT" in q["sql"].upper()]


def test_a_capped_count_pages_up_to_the_cap_and_says_so(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(CappedCountPaginator, "cap", 4)
    monkeypatch.setattr(FinishedRequestAdmin, "list_per_page", 2)
    records = [make_record() for _ in range(7)]
    archive(records)
    newest = [r.request_id for r in reversed(records)]

    first = admin_client.get(reverse(CHANGELIST))
    second = admin_client.get(reverse(CHANGELIST) + "?p=2")
    beyond = admin_client.get(reverse(CHANGELIST) + "?p=3")

    assert listed(first) == newest[:2]
    assert listed(second) == newest[2:4]
    assert first.context["cl"].paginator.num_pages == 2
    assert [c["title"] for c in first.context["cl"].date_drilldown["choices"]] == ["January 1"]
    content = first.content.decode()
    assert "4+ finished requests" in content
    assert "Select all 4+ finished requests" in content
    # Past the cap there are no pages: Django's changelist says the lookup was wrong.
    assert beyond.status_code == 302
    assert beyond["Location"].endswith("?e=1")


def test_an_uncapped_count_is_exact() -> None:
    paginator = CappedCountPaginator(FinishedRequest.objects.order_by("-id"), 100)
    archive([make_record(), make_record()])

    assert (paginator.count, paginator.capped, paginator.num_pages) == (2, False, 1)
    assert CappedCountPaginator(list(range(20_000)), 100).count == 10_001


def test_nobody_adds_changes_or_deletes(admin_client: Client) -> None:
    archive([make_record(model="before")])
    row = FinishedRequest.objects.get()
    change = reverse("admin:ferrox_stats_finishedrequest_change", args=[row.pk])

    assert admin_client.get(reverse("admin:ferrox_stats_finishedrequest_add")).status_code == 403
    assert admin_client.post(change, {"model": "after"}).status_code == 403
    delete = reverse("admin:ferrox_stats_finishedrequest_delete", args=[row.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert FinishedRequest.objects.get().model == "before"
    # Viewing is allowed, with nothing to save and no bulk delete.
    view = admin_client.get(change)
    assert view.status_code == 200
    assert 'name="_save"' not in view.content.decode()
    changelist = admin_client.get(reverse(CHANGELIST))
    assert list(changelist.context["cl"].model_admin.get_actions(changelist.wsgi_request)) == [
        "export_csv"
    ]


@pytest.mark.parametrize("field", ["request_id", "client"])
def test_search_is_an_exact_match_that_can_use_an_index(admin_client: Client, field: str) -> None:
    wanted = make_record(request_id="chatcmpl-wanted", client="team-wanted")
    archive([wanted, make_record(request_id="chatcmpl-wanted-too", client="team-wanted-too")])
    term = getattr(wanted, field)

    with CaptureQueriesContext(connection) as ctx:
        response = admin_client.get(reverse(CHANGELIST), {"q": term})
    # Read now: the next request resets the connection's query log.
    sql = [q["sql"] for q in ctx.captured_queries if "ferrox_stats_finishedrequest" in q["sql"]]
    partial = admin_client.get(reverse(CHANGELIST), {"q": term[:-3]})

    assert listed(response) == ["chatcmpl-wanted"]
    assert listed(partial) == []
    assert any(f'"{field}" = ' in s for s in sql)
    assert not [s for s in sql if "LIKE" in s.upper() or "UPPER(" in s.upper()]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"outcome": "error"}, ["chatcmpl-failed"]),
        ({"outcome": "aborted"}, ["chatcmpl-gone"]),
        ({"model": "mistral-7b"}, ["chatcmpl-gone"]),
        ({"status": "500"}, ["chatcmpl-failed"]),
        ({"finish_reason": "length"}, ["chatcmpl-ok"]),
        ({"stream__exact": "0"}, ["chatcmpl-failed"]),
    ],
)
def test_filters(admin_client: Client, query: dict[str, str], expected: list[str]) -> None:
    archive(
        [
            make_record(request_id="chatcmpl-ok", finish_reason="length"),
            make_record(request_id="chatcmpl-failed", status=500, error="boom", stream=False),
            make_record(request_id="chatcmpl-gone", model="mistral-7b", aborted="timeout"),
        ]
    )

    response = admin_client.get(reverse(CHANGELIST), query)

    assert listed(response) == expected


def test_filter_choices_come_from_the_newest_rows_and_keep_the_selected_one(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(RecentValuesFilter, "recent_rows", 2)
    archive([make_record(model="old-model"), make_record(model="b"), make_record(model="a")])

    def model_choices(query: dict[str, str]) -> list[str]:
        response = admin_client.get(reverse(CHANGELIST), query)
        spec = next(s for s in response.context["cl"].filter_specs if s.field_path == "model")
        return [c["display"] for c in spec.choices(response.context["cl"])]

    assert model_choices({}) == ["All", "a", "b"]
    assert model_choices({"model": "old-model"}) == ["All", "a", "b", "old-model"]


def test_the_date_hierarchy_drills_down_and_filters(admin_client: Client) -> None:
    archive(
        [
            make_record(request_id="chatcmpl-2025", at_ms=at_ms(2025, 12, 31, 23, 59)),
            make_record(request_id="chatcmpl-jan-2", at_ms=at_ms(2026, 1, 2, 8)),
            make_record(request_id="chatcmpl-jan-4", at_ms=at_ms(2026, 1, 4, 8)),
        ]
    )

    def drilldown(query: dict[str, str]) -> tuple[list[str | None], list[str], str]:
        """The rows listed, the drill-down's choices, and the page."""
        response = admin_client.get(reverse(CHANGELIST), query)
        choices = response.context["cl"].date_drilldown["choices"]
        return listed(response), [c["title"] for c in choices], response.content.decode()

    rows, titles, page = drilldown({})
    assert rows == ["chatcmpl-jan-4", "chatcmpl-jan-2", "chatcmpl-2025"]
    assert titles == ["2025", "2026"]
    assert 'href="?finished_at__year=2025"' in page

    rows, titles, page = drilldown({"finished_at__year": "2025"})
    assert rows == ["chatcmpl-2025"]
    assert titles == ["December 2025"]
    assert 'class="date-back"' in page

    rows, titles, _ = drilldown({"finished_at__year": "2026", "finished_at__month": "1"})
    assert rows == ["chatcmpl-jan-4", "chatcmpl-jan-2"]
    # Every day from the first row's to the last row's: no DISTINCT to skip the 3rd.
    assert titles == ["January 2", "January 3", "January 4"]

    day = {"finished_at__year": "2026", "finished_at__month": "1", "finished_at__day": "2"}
    assert drilldown(day)[:2] == (["chatcmpl-jan-2"], ["January 2"])
    assert drilldown({"finished_at__year": "2024"})[:2] == ([], [])


def test_the_date_hierarchy_starts_at_the_month_when_everything_is_in_one(
    admin_client: Client,
) -> None:
    archive([make_record(at_ms=at_ms(2026, 1, 2, 8)), make_record(at_ms=at_ms(2026, 1, 3, 8))])

    response = admin_client.get(reverse(CHANGELIST))

    drilldown = response.context["cl"].date_drilldown
    assert [c["title"] for c in drilldown["choices"]] == ["January 2", "January 3"]
    assert drilldown["back"]["title"] == "2026"


def test_the_detail_page_shows_every_field_and_the_derived_rates(admin_client: Client) -> None:
    record = make_record(completion_tokens=11, decode_ms=500.0)
    archive([record])
    row = FinishedRequest.objects.get()

    response = admin_client.get(reverse("admin:ferrox_stats_finishedrequest_change", args=[row.pk]))

    values = readonly_values(response)
    assert values["decode_tps"] == "20.0"
    assert values["itl_ms"] == "50.0"
    assert values["at_ms"] == str(record.at_ms)
    assert values["request_id"] == record.request_id
    model_fields = {f.name for f in FinishedRequest._meta.get_fields()}
    # The latencies show rounded, under their name without the unit.
    rounded = {"queue_ms": "queue", "ttft_ms": "ttft", "duration_ms": "duration"}
    rounded["decode_ms"] = "decode"
    assert {rounded.get(name, name) for name in model_fields} <= set(values)


@pytest.mark.parametrize(
    "overrides",
    [{"completion_tokens": 1}, {"decode_ms": None}, {"completion_tokens": None}],
)
def test_derived_rates_nothing_measured_show_as_empty(
    admin_client: Client, overrides: dict[str, Any]
) -> None:
    archive([make_record(**overrides)])
    row = FinishedRequest.objects.get()

    response = admin_client.get(reverse("admin:ferrox_stats_finishedrequest_change", args=[row.pk]))

    values = readonly_values(response)
    assert (values["decode_tps"], values["itl_ms"]) == ("—", "—")


def test_the_csv_export_streams_exactly_the_selected_rows(
    admin_client: Client, django_assert_max_num_queries: Any
) -> None:
    records = [make_record(), make_record(model=None, decode_ms=None, stream=False)]
    archive([*records, *(make_record() for _ in range(20))])
    rows = {r.request_id: r for r in FinishedRequest.objects.all()}

    # Session, user, the changelist's bounded count, then one query for all the rows.
    with django_assert_max_num_queries(4):
        response = admin_client.post(
            reverse(CHANGELIST),
            {
                "action": "export_csv",
                "index": 0,
                "_selected_action": [rows[r.request_id].pk for r in records],
            },
        )
        assert isinstance(response, StreamingHttpResponse)
        body = b"".join(response.streaming_content).decode()

    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="finished-requests.csv"'
    # Newest first, each row the wire dict plus the row id: byte for byte what the
    # export module writes.
    wire = [
        {**entry(record, rows[record.request_id].seq), "id": rows[record.request_id].pk}
        for record in reversed(records)
    ]
    expected = io.StringIO()
    write_csv(wire, expected)
    assert body == expected.getvalue()
    lines = list(csv.reader(io.StringIO(body, newline="")))
    assert tuple(lines[0]) == COLUMNS == (*entry(Record()), "id")
    assert [line[COLUMNS.index("request_id")] for line in lines[1:]] == [
        r.request_id for r in reversed(records)
    ]
    assert lines[1][COLUMNS.index("model")] == lines[1][COLUMNS.index("decode_tps")] == ""
    assert lines[2][COLUMNS.index("decode_tps")] == "20.0"


def test_dead_letters_are_listed_read_only_with_the_payload_pretty_printed(
    admin_client: Client,
) -> None:
    result = archive([make_record(request_id="chatcmpl-dead", replica=None)])
    assert len(result.dead) == 1
    letter = DeadLetter.objects.get()

    listing = admin_client.get(reverse(DEAD_CHANGELIST))
    found = admin_client.get(reverse(DEAD_CHANGELIST), {"q": "chatcmpl-dead"})
    missed = admin_client.get(reverse(DEAD_CHANGELIST), {"q": "chatcmpl-de"})
    change = reverse("admin:ferrox_stats_deadletter_change", args=[letter.pk])
    detail = admin_client.get(change)

    assert [d.pk for d in listing.context["cl"].result_list] == [letter.pk]
    assert "replica is required" in listing.content.decode()
    assert [d.pk for d in found.context["cl"].result_list] == [letter.pk]
    assert list(missed.context["cl"].result_list) == []
    payload = html.unescape(readonly_values(detail)["payload_pretty"])
    assert payload == f"<pre>{json.dumps(letter.payload, indent=2, sort_keys=True)}</pre>"
    assert '"request_id": "chatcmpl-dead"' in payload
    assert admin_client.get(reverse("admin:ferrox_stats_deadletter_add")).status_code == 403
    assert admin_client.post(change, {"reason": "edited"}).status_code == 403
    delete = reverse("admin:ferrox_stats_deadletter_delete", args=[letter.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert DeadLetter.objects.get().reason == letter.reason


def test_a_token_issued_in_the_admin_shows_its_secret_once_and_stores_its_hash(
    admin_client: Client, admin_user: Any
) -> None:
    from django.contrib.messages import get_messages

    from ferrox_stats.models import ApiToken
    from ferrox_stats.tokens import SECRET_PREFIX, check

    response = admin_client.post(
        "/admin/ferrox_stats/apitoken/add/",
        {"label": "engine-7", "can_read": "on", "can_ingest": "on", "replica": "gpu-7"},
    )
    assert response.status_code == 200  # the secret's page, not a redirect
    page = response.content.decode()
    [secret] = re.findall(rf"{SECRET_PREFIX}[A-Za-z0-9_-]{{43}}", page)
    assert page.count(secret) == 1
    assert "no-store" in response["Cache-Control"]
    token = ApiToken.objects.get()
    assert check(secret) == token
    assert (token.label, token.can_ingest, token.replica) == ("engine-7", True, "gpu-7")
    assert token.owner == admin_user
    assert secret not in str(list(ApiToken.objects.values()))
    # Never in a message, a cookie, or the session: the page is the only place it shows.
    assert not any(secret in str(m) for m in get_messages(response.wsgi_request))
    assert not any(secret in morsel.value for morsel in response.cookies.values())
    assert not any(secret in morsel.value for morsel in admin_client.cookies.values())
    assert secret not in str(dict(admin_client.session))
    assert secret not in admin_client.get("/admin/ferrox_stats/apitoken/").content.decode()
    change = admin_client.get(f"/admin/ferrox_stats/apitoken/{token.pk}/change/")
    assert secret not in change.content.decode()


def test_a_token_issued_in_the_admin_can_expire(admin_client: Client) -> None:
    from ferrox_stats.models import ApiToken

    response = admin_client.post(
        "/admin/ferrox_stats/apitoken/add/",
        {
            "label": "temp",
            "can_read": "on",
            "expires_at_0": "2030-01-02",
            "expires_at_1": "03:04:05",
        },
    )
    assert response.status_code == 200
    assert ApiToken.objects.get().expires_at == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert "It expires at" in response.content.decode()


def test_a_token_cannot_be_issued_already_expired(admin_client: Client) -> None:
    from ferrox_stats.models import ApiToken

    response = admin_client.post(
        "/admin/ferrox_stats/apitoken/add/",
        {"label": "late", "can_read": "on", "expires_at_0": "2020-01-01", "expires_at_1": "0:00"},
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "expires_at": ["This moment is already past."]
    }
    assert ApiToken.objects.count() == 0


def test_an_ingest_token_needs_a_replica_in_the_admin(admin_client: Client) -> None:
    from ferrox_stats.models import ApiToken

    response = admin_client.post(
        "/admin/ferrox_stats/apitoken/add/", {"label": "x", "can_ingest": "on", "replica": ""}
    )
    assert response.status_code == 200  # the form again, with the error
    assert ApiToken.objects.count() == 0


def test_tokens_are_revoked_by_an_action_not_deleted(admin_client: Client) -> None:
    from ferrox_stats.models import ApiToken
    from ferrox_stats.tokens import check, issue

    token, secret = issue("old")
    admin_client.post(
        "/admin/ferrox_stats/apitoken/",
        {"action": "revoke_selected", "_selected_action": [token.pk]},
    )
    assert check(secret) is None
    assert ApiToken.objects.get().revoked_at is not None
    assert admin_client.get(f"/admin/ferrox_stats/apitoken/{token.pk}/delete/").status_code == 403


# -- instances (heartbeat rows) --------------------------------------------------------


@pytest.mark.django_db
def test_the_instance_admin_lists_heartbeats_with_their_state_read_only(
    admin_client: Client,
) -> None:
    from django.utils import timezone

    from tests.states import save, state_doc

    now = datetime_to_at_ms(timezone.now())
    save(state_doc("gpu-1/11/live", at_ms=now))
    save(state_doc("gpu-2/22/gone", at_ms=now - 3_600_000))
    response = admin_client.get(reverse("admin:ferrox_stats_instance_changelist"))
    assert response.status_code == 200
    page = response.content.decode()
    assert "gpu-1/11/live" in page and "gpu-2/22/gone" in page
    assert ">live<" in page and ">lost<" in page
    detail = admin_client.get(reverse("admin:ferrox_stats_instance_change", args=["gpu-1/11/live"]))
    assert detail.status_code == 200
    assert "&quot;serving&quot;" in detail.content.decode()  # the state document, shown
    assert admin_client.get(reverse("admin:ferrox_stats_instance_add")).status_code == 403
