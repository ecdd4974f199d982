"""The commit-order cursor: a tail poller never skips a row that commits late (SPEC §4),
and waits for nothing but the archive's own writers (issue 11)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, connections, transaction

from ferrox_stats.archive.queries import CommitCursor, Cursor
from ferrox_stats.archive.rows import COLUMNS, Pending, row_values
from ferrox_stats.models import COMMIT_LOCK_KEY, FinishedRequest
from tests.factories import BASE_AT_MS, archive, make_record

pytestmark = pytest.mark.django_db(transaction=True)

postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite commits one writer at a time"
)

# How long a test waits for a thread or the database before it fails.
WAIT_S = 10.0
APP = "ferrox_stats"


def tail(cursor: CommitCursor | None, limit: int = 100) -> tuple[list[str], CommitCursor | None]:
    page = FinishedRequest.objects.committed_after(cursor, limit)
    return [e["request_id"] for e in page.entries], page.next_cursor  # type: ignore[return-value]


def connect(dbname: str | None = None) -> Any:
    """A plain psycopg session on the test server (on the test database by default)."""
    import psycopg

    s = connection.settings_dict
    return psycopg.connect(
        host=s["HOST"] or "127.0.0.1",
        port=s["PORT"] or 5432,
        user=s["USER"],
        dbname=dbname or s["NAME"],
    )


@pytest.fixture
def second_connection() -> Iterator[Any]:
    """Another session on the test database, as another process's archiver would be."""
    other = connect()
    try:
        yield other
    finally:
        other.close()


class Worker(threading.Thread):
    """Runs ``target`` on its own Django connection; ``error`` holds what it raised."""

    def __init__(self, target: Callable[[], None]) -> None:
        super().__init__(daemon=True)
        self._target_fn = target
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self._target_fn()
        except BaseException as exc:  # handed to the test, which re-raises it
            self.error = exc
        finally:
            connections.close_all()
            self.done.set()

    def finish(self) -> None:
        self.join(WAIT_S)
        assert not self.is_alive(), "the worker did not finish"
        if self.error is not None:
            raise self.error


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid: int = cursor.fetchone()[0]
    return pid


def wait_until_waiting_for_the_archive_lock(worker: Worker, pid: int) -> None:
    """Return once ``pid`` waits on an advisory lock; fail if the worker finished first."""
    deadline = time.monotonic() + WAIT_S
    while not worker.done.wait(0.005):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s", [pid]
            )
            if cursor.fetchone() == ("Lock", "advisory"):
                return
        assert time.monotonic() < deadline, "the writer never waited for the lock"
    worker.finish()
    raise AssertionError("the writer committed while an earlier batch was still open")


@postgresql_only
def test_a_batch_that_allocated_first_but_commits_last_is_never_skipped() -> None:
    archive([make_record(request_id="first")])
    allocated, release, pid_known = threading.Event(), threading.Event(), threading.Event()
    fast_pid: list[int] = []

    def slow() -> None:
        # An archiver whose batch is written but whose transaction is still open.
        with transaction.atomic():
            archive([make_record(request_id="late")])
            allocated.set()
            assert release.wait(WAIT_S)

    def fast() -> None:
        fast_pid.append(backend_pid())
        pid_known.set()
        archive([make_record(request_id="newer")])

    slow_writer, fast_writer = Worker(slow), Worker(fast)
    slow_writer.start()
    try:
        assert allocated.wait(WAIT_S)
        fast_writer.start()
        assert pid_known.wait(WAIT_S)
        # The second batch waits for the first to end: it cannot take a place after
        # "late" and become visible before it.
        wait_until_waiting_for_the_archive_lock(fast_writer, fast_pid[0])
        seen, cursor = tail(None)
        assert seen == ["first"]
    finally:
        release.set()
        slow_writer.finish()
    fast_writer.finish()
    more, cursor = tail(cursor)
    assert more == ["late", "newer"]
    assert tail(cursor) == ([], cursor)


def test_a_row_that_finished_earlier_but_committed_later_is_not_skipped() -> None:
    """Why the cursor exists: finish order is not the order rows become visible."""
    archive([make_record(request_id="t1", at_ms=BASE_AT_MS + 9000)])
    seen, cursor = tail(None)
    by_time = FinishedRequest.objects.oldest_first(None, 100)
    assert seen == [e["request_id"] for e in by_time.entries] == ["t1"]
    last = by_time.entries[-1]
    archive([make_record(request_id="t2", at_ms=BASE_AT_MS)])
    assert tail(cursor)[0] == ["t2"]
    # A poller following finish times has moved past "t2"'s place and never sees it.
    after = FinishedRequest.objects.oldest_first(Cursor(last["at_ms"], last["id"]), 100)
    assert after.entries == []


@postgresql_only
def test_any_insert_into_the_archive_holds_its_lock_until_commit(second_connection: Any) -> None:
    def lock_is_free() -> bool:
        with connection.cursor() as cursor:  # autocommit: released at once if taken
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [COMMIT_LOCK_KEY])
            free: bool = cursor.fetchone()[0]
        return free

    assert lock_is_free()
    # Not through write_batch: a raw INSERT (an older writer, a restore) takes it too.
    with second_connection.cursor() as cursor:
        placeholders = ", ".join(["%s"] * len(COLUMNS))
        cursor.execute(
            f"INSERT INTO ferrox_stats_finishedrequest ({', '.join(COLUMNS)}) "
            f"VALUES ({placeholders})",
            row_values(Pending(None, make_record(request_id="raw"), "other")),
        )
    assert not lock_is_free()
    second_connection.commit()
    assert lock_is_free()
    assert tail(None)[0] == ["raw"]


@postgresql_only
@pytest.mark.parametrize(
    "database", [pytest.param("postgres", id="another-database"), pytest.param(None, id="same")]
)
def test_an_unrelated_open_transaction_does_not_delay_the_tail(database: str | None) -> None:
    unrelated = connect(database)  # "postgres": the maintenance database Django uses too
    try:
        with unrelated.cursor() as cursor:
            # Holds a transaction id (as a pg_dump or a long report would) and stays open.
            cursor.execute("SELECT pg_current_xact_id()")
        archive([make_record(request_id=f"a{n}") for n in range(2)])
        seen, cursor = tail(None)
        assert seen == ["a0", "a1"]
        archive([make_record(request_id="b0")])
        assert tail(cursor)[0] == ["b0"]
        assert unrelated.info.transaction_status.name == "INTRANS"
    finally:
        unrelated.close()


def test_following_next_cursor_returns_every_row_once_in_visible_order() -> None:
    archive([make_record(request_id=f"a{n}") for n in range(3)])
    seen, cursor = tail(None, limit=2)
    assert seen == ["a0", "a1"]
    archive([make_record(request_id=f"b{n}") for n in range(2)])
    rest, cursor = tail(cursor, limit=10)
    assert rest == ["a2", "b0", "b1"]
    assert tail(cursor) == ([], cursor)


def test_an_empty_archive_keeps_no_cursor() -> None:
    assert tail(None) == ([], None)


@pytest.mark.parametrize("text", ["", "c", "12.3", "c1.", "cx", "c-1", "1", "c1 "])
def test_a_malformed_commit_cursor_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="cursor must look like 'c<seq>'"):
        CommitCursor.decode(text)


def test_a_cursor_of_the_old_commit_order_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"earlier version.*start again without a cursor"):
        CommitCursor.decode("c123456.78")


def test_a_commit_cursor_round_trips() -> None:
    assert CommitCursor.decode(CommitCursor(123).encode()) == CommitCursor(123)
    with pytest.raises(ValueError, match="out of range"):
        CommitCursor.decode(f"c{2**63}")


@postgresql_only
def test_rows_are_numbered_in_the_order_their_batches_were_written() -> None:
    archive([make_record(request_id="x"), make_record(request_id="y")])
    archive([make_record(request_id="z")])
    numbered = list(FinishedRequest.objects.order_by("id").values_list("commit_seq", flat=True))
    assert None not in numbered
    assert numbered == sorted(set(numbered))


@postgresql_only
def test_the_migration_numbers_existing_rows_in_the_old_cursor_order() -> None:
    from django.db.migrations.executor import MigrationExecutor

    latest = [n for n in MigrationExecutor(connection).loader.graph.leaf_nodes() if n[0] == APP]
    MigrationExecutor(connection).migrate([(APP, "0005_api_token_infer_scope")])
    try:
        # Rows as 0004 left them: (commit_xid, id) order is r4 (no xid), r2, r1, r3.
        # Only the columns 0005 had: ``ingested`` came with 0007.
        old_columns = [column for column in COLUMNS if column != "ingested"]
        with connection.cursor() as cursor:
            placeholders = ", ".join(["%s"] * (len(old_columns) + 1))
            for request_id, xid in [("r1", 20), ("r2", 10), ("r3", 20), ("r4", None)]:
                pending = Pending(None, make_record(request_id=request_id), "old")
                values = dict(zip(COLUMNS, row_values(pending), strict=True))
                cursor.execute(
                    f"INSERT INTO ferrox_stats_finishedrequest ({', '.join(old_columns)}, "
                    f"commit_xid) VALUES ({placeholders})",
                    [*(values[column] for column in old_columns), xid],
                )
    finally:
        MigrationExecutor(connection).migrate(latest)
    seen, cursor = tail(None)
    assert seen == ["r4", "r2", "r1", "r3"]
    archive([make_record(request_id="new")])
    assert tail(cursor)[0] == ["new"]
