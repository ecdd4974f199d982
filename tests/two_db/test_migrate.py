"""``migrate`` on each alias, and the checks that guard the two-database layout."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connections, transaction
from django.db.migrations.recorder import MigrationRecorder

from ferrox_stats import tokens
from ferrox_stats.checks import check_settings
from ferrox_stats.models import ApiToken

BOTH = ["default", "telemetry"]
APP_TABLES = {
    "ferrox_stats_finishedrequest",
    "ferrox_stats_deadletter",
    "ferrox_stats_apitoken",
    "ferrox_stats_instance",
}
ROUTER = "ferrox_stats.routers.TelemetryRouter"


def app_tables(alias: str) -> set[str]:
    return set(connections[alias].introspection.table_names()) & APP_TABLES


def allocator(alias: str) -> bool:
    """Whether migration 0006's sequence exists on this alias (PostgreSQL only)."""
    if connections[alias].vendor != "postgresql":
        return False
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_class WHERE relname = 'ferrox_stats_commit_seq'")
        return bool(cursor.fetchone()[0])


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_migrate_runs_on_each_alias_and_puts_the_app_only_on_telemetry() -> None:
    postgres = connections["telemetry"].vendor == "postgresql"
    call_command("migrate", "ferrox_stats", "zero", database="telemetry", verbosity=0)
    assert app_tables("telemetry") == set()
    assert not allocator("telemetry")
    call_command("migrate", database="telemetry", verbosity=0)
    assert app_tables("telemetry") == APP_TABLES
    assert allocator("telemetry") == postgres
    call_command("migrate", database="default", verbosity=0)
    assert app_tables("default") == set()
    assert not allocator("default")
    # Django records the app's migrations as applied on default without running them,
    # so a later migrate there stays a no-op.
    applied = MigrationRecorder(connections["default"]).applied_migrations()
    assert ("ferrox_stats", "0007_ingest_identity_namespace") in applied


@pytest.mark.django_db(databases=BOTH)
def test_a_taken_label_fails_only_its_own_savepoint_on_telemetry() -> None:
    tokens.issue("dup")
    with transaction.atomic(using="telemetry"):
        with pytest.raises(IntegrityError):
            tokens.issue("dup")
        # The surrounding transaction on telemetry is still usable (on PostgreSQL an
        # error outside a savepoint there would abort it).
        assert ApiToken.objects.using("telemetry").count() == 1


def ids() -> list[str]:
    return [message.id for message in check_settings()]


def test_the_two_database_settings_pass_the_checks() -> None:
    assert ids() == []


def test_e030_a_separate_archive_database_needs_the_router(settings: Any) -> None:
    settings.DATABASE_ROUTERS = []
    found = check_settings()
    assert [m.id for m in found] == ["ferrox_stats.E030"]
    assert ROUTER in (found[0].hint or "")
    assert "ApiToken, DeadLetter, FinishedRequest" in found[0].msg


class MigrateEverywhere:
    """A host router that answers every migration question with yes."""

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return True


class ReadFromReplica:
    """A host router that reads everything from "default"."""

    def db_for_read(self, model: Any, **hints: Any) -> str:
        return "default"


class WriteToDefault:
    """A host router that writes everything to "default"."""

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return "default"


def test_e030_when_an_earlier_router_writes_the_app_elsewhere(settings: Any) -> None:
    settings.DATABASE_ROUTERS = [WriteToDefault(), ROUTER]
    assert ids() == ["ferrox_stats.E030"]


def test_w031_an_earlier_router_reads_the_app_elsewhere(settings: Any) -> None:
    settings.DATABASE_ROUTERS = [ReadFromReplica(), ROUTER]
    found = check_settings()
    assert [m.id for m in found] == ["ferrox_stats.W031"]
    assert "'default'" in found[0].msg


def test_w030_an_earlier_router_would_put_the_tables_on_default_too(settings: Any) -> None:
    settings.DATABASE_ROUTERS = [MigrateEverywhere(), ROUTER]
    assert ids() == ["ferrox_stats.W030"]


class ReadReplica:
    """A host's primary/replica router: reads from an alias "replica"."""

    def db_for_read(self, model: Any, **hints: Any) -> str:
        return "replica"


def test_with_the_default_alias_the_hosts_routers_are_left_alone(settings: Any) -> None:
    settings.DATABASE_ROUTERS = [ReadReplica(), WriteToDefault()]
    settings.FERROX_STATS = {"ARCHIVE_SINK": None}
    assert ids() == []
