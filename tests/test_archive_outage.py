"""The archive through a database outage and a SIGTERM (PostgreSQL for real, SQLite too).

The outage is made without touching the machine's shared server: the test database
stops accepting connections (``ALLOW_CONNECTIONS false``) and the writer's backend is
terminated; the test's own session stays up to restore it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from ferrox_stats.archive.writer import ArchiveWriter
from ferrox_stats.live import Recorder
from ferrox_stats.models import FinishedRequest
from tests.asgi_server import wait_for
from tests.factories import make_record
from tests.faults import PASS, REFUSE, FaultProxy, fault_proxy, route_through
from tests.test_archive_writer import assert_identity

ROOT = Path(__file__).resolve().parent.parent
postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL")


@pytest.fixture
def cut_database() -> Iterator[Any]:
    """A switch that makes the test database unreachable for every other session."""
    import psycopg

    settings = connection.settings_dict
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (own_pid,) = cursor.fetchone()
    # A database cannot close itself to connections: switch it from the maintenance DB.
    admin = psycopg.connect(
        host=settings["HOST"] or "127.0.0.1",
        port=settings["PORT"] or 5432,
        user=settings["USER"],
        dbname="postgres",
        autocommit=True,
    )

    def cut(down: bool) -> None:
        name = psycopg.sql.Identifier(settings["NAME"])
        allow = psycopg.sql.SQL("false" if down else "true")
        admin.execute(
            psycopg.sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS {}").format(name, allow)
        )
        if down:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> %s",
                (settings["NAME"], own_pid),
            )

    try:
        yield cut
    finally:
        cut(False)
        admin.close()


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_records_survive_an_outage_and_are_each_persisted_once(cut_database: Any) -> None:
    writer = ArchiveWriter(instance="outage", batch_size=50, interval_s=0.05, retry_max_s=0.2)
    recorder = Recorder(replica="r1", sink=writer, instance="outage")
    try:
        for n in range(100):
            with recorder.track(request_id=f"before-{n}") as t:
                t.finish(status=200)
        assert writer.wait_until_drained(timeout_s=30)

        cut_database(True)
        for n in range(500):
            # The request path goes on while the archive cannot write.
            with recorder.track(request_id=f"during-{n}") as t:
                t.finish(status=200)
        health = writer.health()
        assert health.pending > 0
        assert_identity(health)
        assert not writer.wait_until_drained(timeout_s=1.0)
        assert writer.health().failed_attempts >= 1

        cut_database(False)
        assert writer.wait_until_drained(timeout_s=60)
    finally:
        writer.close(deadline_s=30)

    health = writer.health()
    assert (health.accepted, health.persisted, health.pending, health.dropped) == (600, 600, 0, {})
    assert_identity(health)
    ids = list(FinishedRequest.objects.values_list("request_id", flat=True))
    assert len(ids) == len(set(ids)) == 600
    assert recorder.serving.active == 0


# A server process: it handles SIGTERM itself by exiting through the interpreter, as
# gunicorn's workers do (``sys.exit``), so ``atexit`` drains the queue. The app installs
# no handler of its own (the child checks that it finds its own still in place).
SIGTERM_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    def exit_cleanly(signum, frame):
        sys.exit(0)
    signal.signal(signal.SIGTERM, exit_cleanly)
    import django
    django.setup()
    if os.environ.get("MIGRATE"):
        from django.core.management import call_command
        call_command("migrate", verbosity=0)
    from ferrox_stats.archive.writer import ArchiveWriter
    from tests.factories import make_record
    writer = ArchiveWriter(instance="sigterm", batch_size=100_000, interval_s=3600,
                           queue_max=100_000, shutdown_deadline_s=60)
    for seq in range(5000):
        writer.submit(seq, make_record(request_id=f"sigterm-{seq}"))
    assert writer.health().pending == 5000
    assert signal.getsignal(signal.SIGTERM) is exit_cleanly
    print("queued", flush=True)
    signal.pause()
    """
)


@pytest.mark.django_db(transaction=True)
def test_a_server_exiting_on_sigterm_persists_the_full_queue_before_exit(tmp_path: Path) -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT)}
    if connection.vendor == "postgresql":
        s = connection.settings_dict
        env["DATABASE_URL"] = (
            f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
        )
    else:
        database = tmp_path / "sigterm.sqlite3"
        env["DATABASE_URL"] = f"sqlite:///{database}"
        env["MIGRATE"] = "1"
    child = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_CHILD],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "queued"
        child.send_signal(signal.SIGTERM)
        _, stderr = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, stderr

    if connection.vendor == "postgresql":
        count = FinishedRequest.objects.filter(request_id__startswith="sigterm-").count()
    else:
        import sqlite3

        with sqlite3.connect(database) as db:
            (count,) = db.execute(
                "SELECT COUNT(*) FROM ferrox_stats_finishedrequest WHERE instance = 'sigterm'"
            ).fetchone()
    assert count == 5000


@pytest.fixture
def proxied() -> Iterator[FaultProxy]:
    """The default alias reached through a ``FaultProxy`` in front of the test server."""
    settings = connection.settings_dict
    target = (settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432))
    with fault_proxy(target, lifetime_s=120) as proxy, route_through(proxy):
        yield proxy


def down(proxy: FaultProxy) -> None:
    """As a stopped server: open connections reset, new ones refused."""
    proxy.mode = REFUSE
    proxy.reset()


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_the_backlog_resumes_within_seconds_of_the_database_answering(
    proxied: FaultProxy,
) -> None:
    # The default backoff cap: without probing, the batch would wait out its backoff.
    writer = ArchiveWriter(instance="probe", batch_size=50, interval_s=0.05, retry_max_s=30.0)
    try:
        writer.submit(0, make_record(request_id="before"))
        assert writer.wait_until_drained(timeout_s=10)
        down(proxied)
        for seq in range(1, 101):
            writer.submit(seq, make_record(request_id=f"during-{seq}"))
        # Seven failed attempts: the next retry is 6.4 s away.
        assert wait_for(lambda: writer.health().failed_attempts >= 7, timeout_s=30)
        assert writer.health().last_error == "OperationalError"
        proxied.mode = PASS
        answered_at = time.monotonic()
        assert writer.wait_until_drained(timeout_s=5.0)
        resumed_s = time.monotonic() - answered_at
    finally:
        writer.close(deadline_s=10)
    health = writer.health()
    assert (health.accepted, health.persisted, health.pending, health.dropped) == (101, 101, 0, {})
    assert health.last_error is None
    assert FinishedRequest.objects.filter(instance="probe").count() == 101
    print(f"archive resumed {resumed_s:.2f} s after the database answered")
