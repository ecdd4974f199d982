"""The app on its own database (``TelemetryRouter``, ``ARCHIVE_DATABASE="telemetry"``).

The default database has none of the app's tables, so any query that strays there
fails loudly; on top, every test records the default database's queries and asserts
none of them names an app table.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from ferrox_stats import live, tokens
from ferrox_stats.archive import writer as writer_module
from ferrox_stats.archive.rows import datetime_to_at_ms
from ferrox_stats.conf import conf
from ferrox_stats.models import ApiToken, DeadLetter, FinishedRequest
from tests.api.test_ingest import item
from tests.conftest import FakeClock
from tests.factories import BASE_AT_MS, archive, make_record

BOTH = ["default", "telemetry"]
PREFIX = "/control/telemetry"
APP_TABLES = {
    "ferrox_stats_finishedrequest",
    "ferrox_stats_deadletter",
    "ferrox_stats_apitoken",
    "ferrox_stats_instance",
}

pytestmark = pytest.mark.django_db(databases=BOTH)


@pytest.fixture(autouse=True)
def default_untouched() -> Iterator[None]:
    """No query on the default database names one of the app's tables."""
    with CaptureQueriesContext(connections["default"]) as queries:
        yield
    strays = [q["sql"] for q in queries.captured_queries if '"ferrox_stats_' in q["sql"]]
    assert strays == []


def rows() -> list[str]:
    return sorted(FinishedRequest.objects.using("telemetry").values_list("request_id", flat=True))


def bearer(secret: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def test_the_settings_name_the_telemetry_alias() -> None:
    assert conf.ARCHIVE_DATABASE == "telemetry"


def test_the_app_tables_are_only_on_the_telemetry_database() -> None:
    tables = {
        alias: set(connections[alias].introspection.table_names()) & APP_TABLES for alias in BOTH
    }
    assert tables == {"default": set(), "telemetry": APP_TABLES}
    # Django's own tables stay where the host keeps them.
    assert "auth_user" in connections["default"].introspection.table_names()


def test_the_commit_order_allocator_is_only_on_the_telemetry_database() -> None:
    """Migration 0006's sequence, function and trigger follow the tables (PostgreSQL)."""
    if connections["default"].vendor != "postgresql":
        pytest.skip("the allocator exists on PostgreSQL only")
    found = {}
    for alias in BOTH:
        with connections[alias].cursor() as cursor:
            cursor.execute(
                "SELECT (SELECT count(*) FROM pg_class WHERE relname = 'ferrox_stats_commit_seq'),"
                " (SELECT count(*) FROM pg_proc WHERE proname = 'ferrox_stats_take_commit_lock'),"
                " (SELECT count(*) FROM pg_trigger WHERE tgname = 'ferrox_stats_commit_order')"
            )
            found[alias] = cursor.fetchone()
    assert found == {"default": (0, 0, 0), "telemetry": (1, 1, 1)}


def test_the_router_sends_the_app_and_only_the_app_to_telemetry() -> None:
    from django.db import router

    for model in (FinishedRequest, DeadLetter, ApiToken):
        assert router.db_for_read(model) == router.db_for_write(model) == "telemetry"
        assert router.allow_migrate_model("telemetry", model)
        assert not router.allow_migrate_model("default", model)
    assert router.db_for_write(User) == "default"


def test_the_archive_writer_writes_to_telemetry() -> None:
    writer = writer_module.from_settings(instance="inst")
    assert writer.using == "telemetry"
    writer.autostart = False  # flushed here, not by a thread
    writer.submit(1, make_record(request_id="w1"))
    writer.submit(2, make_record(request_id="w2", status=999))  # a dead letter
    assert writer.drain(deadline_s=60)
    assert (writer.health().persisted, writer.health().dead_lettered) == (1, 1)
    assert rows() == ["w1"]
    assert DeadLetter.objects.using("telemetry").count() == 1


def test_tokens_are_issued_checked_and_revoked_on_telemetry() -> None:
    token, secret = tokens.issue("poller")
    assert ApiToken.objects.using("telemetry").filter(pk=token.pk).exists()
    assert token._state.db == "telemetry"
    checked = tokens.check(secret)
    assert checked is not None and checked.pk == token.pk
    tokens.recent.forget(token.secret_hash)
    tokens.revoke(token)
    assert tokens.check(secret) is None


def test_a_token_owner_on_default_is_looked_up_there_never_joined(settings: Any) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "TOKEN_CACHE_S": 0}
    alice = User.objects.create_user("alice")
    token, secret = tokens.issue("owned", owner=alice)
    assert tokens.check(secret) is not None
    assert tokens.owner_name(token) == "alice"
    alice.is_active = False
    alice.save()
    assert tokens.check(secret) is None
    # Deleting the user queries nothing on the token table (which default does not have).
    alice.delete()
    assert tokens.check(secret) is None
    assert ApiToken.objects.using("telemetry").filter(pk=token.pk).exists()


def test_the_token_command_lists_and_revokes_on_telemetry() -> None:
    out = io.StringIO()
    call_command("ferrox_stats_token", "create", "ops", stdout=out)
    call_command("ferrox_stats_token", "revoke", "ops", stdout=out)
    call_command("ferrox_stats_token", "list", stdout=out)
    assert "ops" in out.getvalue().splitlines()[-1]
    assert out.getvalue().splitlines()[-1].count("revoked") == 1
    assert ApiToken.objects.using("telemetry").get(label="ops").revoked_at is not None


def test_ingest_and_history_use_telemetry(recorder: live.Recorder, clock: FakeClock) -> None:
    _, ingest_secret = tokens.issue("gpu-1", read=False, ingest=True, replica="gpu-1")
    _, read_secret = tokens.issue("poller")
    record = item(1, clock, request_id="i1")  # the ingest tests' wire record
    answer = bearer(ingest_secret).post(
        f"{PREFIX}/v1/ingest", {"records": [record]}, content_type="application/json"
    )
    assert answer.status_code == 200, answer.content
    assert answer.json()["accepted"] == 1
    assert rows() == ["i1"]
    history = bearer(read_secret).get(f"{PREFIX}/v1/history").json()
    assert [e["request_id"] for e in history["entries"]] == ["i1"]
    detail = bearer(read_secret).get(f"{PREFIX}/v1/history/i1")
    assert detail.status_code == 200
    assert "i1" in detail.content.decode()


def test_heartbeats_and_the_fleet_use_telemetry(recorder: live.Recorder, clock: FakeClock) -> None:
    from ferrox_stats.heartbeat import Heartbeat
    from ferrox_stats.models import Instance

    publisher = Heartbeat(recorder, interval_s=2.0, using=conf.ARCHIVE_DATABASE)
    assert publisher.publish_once()
    assert list(Instance.objects.using("telemetry").values_list("instance", flat=True)) == [
        recorder.instance
    ]
    _, secret = tokens.issue("poller")
    fleet = bearer(secret).get(f"{PREFIX}/v1/fleet").json()
    assert [e["instance"] for e in fleet["instances"]] == [recorder.instance]
    assert fleet["totals"]["instances"] == 1


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_a_tail_poller_follows_the_commit_order_on_telemetry() -> None:
    _, secret = tokens.issue("poller")
    client = bearer(secret)
    archive([make_record(request_id="t1", at_ms=BASE_AT_MS + 9000)], using="telemetry")
    archive([make_record(request_id="t2", at_ms=BASE_AT_MS)], using="telemetry")
    url = f"{PREFIX}/v1/history"
    first = client.get(url, {"order": "committed", "limit": 1}).json()
    assert [e["request_id"] for e in first["entries"]] == ["t1"]
    rest = client.get(url, {"order": "committed", "cursor": first["next_cursor"]}).json()
    assert [e["request_id"] for e in rest["entries"]] == ["t2"]


def test_export_reads_telemetry() -> None:
    archive([make_record(request_id="e1"), make_record(request_id="e2")], using="telemetry")
    out = io.StringIO()
    call_command("ferrox_stats_export", "--format", "csv", stdout=out, stderr=io.StringIO())
    exported = [row["request_id"] for row in csv.DictReader(io.StringIO(out.getvalue()))]
    assert sorted(exported) == ["e1", "e2"]


def test_retention_prunes_telemetry() -> None:
    archive([make_record(request_id="old", at_ms=BASE_AT_MS)], using="telemetry")
    recent = datetime.now(UTC) - timedelta(hours=1)
    archive([make_record(request_id="new", at_ms=datetime_to_at_ms(recent))], using="telemetry")
    call_command("ferrox_stats_prune", "--older-than", "1d", stdout=io.StringIO())
    assert rows() == ["new"]


def test_the_dashboards_history_and_request_pages_read_telemetry(admin_client: Client) -> None:
    archive([make_record(request_id="d1")], using="telemetry")
    history = admin_client.get(f"{PREFIX}/dashboard/history/")
    assert history.status_code == 200
    assert b"d1" in history.content
    detail = admin_client.get(f"{PREFIX}/dashboard/requests/d1")
    assert detail.status_code == 200
    assert b"d1" in detail.content


def test_the_fleet_page_reads_heartbeats_and_the_tail_from_telemetry(
    admin_client: Client,
) -> None:
    from tests.states import save, state_doc

    archive([make_record(request_id="tail-1")], using="telemetry")
    save(state_doc("gpu-1/100/aaaaaaaaaaaa", completed=42), using="telemetry")
    fleet = admin_client.get(f"{PREFIX}/dashboard/")
    assert fleet.status_code == 200
    assert b"tail-1" in fleet.content
    assert b'data-instance="gpu-1/100/aaaaaaaaaaaa"' in fleet.content


def test_the_admin_lists_changes_and_exports_on_telemetry(admin_client: Client) -> None:
    archive([make_record(request_id="a1")], using="telemetry")
    changelist = admin_client.get(reverse("admin:ferrox_stats_finishedrequest_changelist"))
    assert changelist.status_code == 200
    assert b"a1" in changelist.content
    pk = FinishedRequest.objects.using("telemetry").get().pk
    exported = admin_client.post(
        reverse("admin:ferrox_stats_finishedrequest_changelist"),
        {"action": "export_csv", "_selected_action": [pk]},
    )
    assert exported.status_code == 200
    assert b"a1" in b"".join(exported.streaming_content)  # type: ignore[attr-defined]
    assert admin_client.get(reverse("admin:ferrox_stats_deadletter_changelist")).status_code == 200
    # Issuing a token through the admin stores it on telemetry.
    added = admin_client.post(
        reverse("admin:ferrox_stats_apitoken_add"), admin_token_form("from-admin")
    )
    assert added.status_code in (200, 302), added.content
    assert ApiToken.objects.using("telemetry").filter(label="from-admin").exists()


def admin_token_form(label: str) -> dict[str, Any]:
    return {"label": label, "can_read": "on", "replica": ""}
