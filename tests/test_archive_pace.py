"""The archive's long steps pause between their pieces (``archive/pace.py``).

What a pause buys (a thread waiting for the GIL takes it within about a step) is
measured in ``bench/gil_wait.py``, not asserted in a timed test; these check when a
pause happens and where it must not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from ferrox_stats.archive import batch, fold, pace, rollups
from ferrox_stats.archive.batch import copies, write_batch
from ferrox_stats.archive.rebuild import rebuild
from ferrox_stats.archive.rows import Pending
from ferrox_stats.models import RollupDelta
from tests.factories import BASE_AT_MS, make_record

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("rollups_on")]


class FakeTime:
    """``pace``'s clock and sleep: time moves only when a test (or a sleep) moves it."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def fake_time(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(pace, "time", fake)
    monkeypatch.setattr(pace, "_thread", threading.local())
    return fake


def test_a_thread_pauses_once_it_ran_a_step_since_its_last_pause(fake_time: FakeTime) -> None:
    pace.pace()  # the first call starts the thread's step
    fake_time.now += pace.STEP_S / 2
    pace.pace()
    assert fake_time.sleeps == []
    fake_time.now += pace.STEP_S / 2
    pace.pace()
    assert fake_time.sleeps == [pace.PAUSE_S]
    # The next step counts from the end of the pause.
    fake_time.now += pace.STEP_S * 0.9
    pace.pace()
    assert fake_time.sleeps == [pace.PAUSE_S]
    fake_time.now += pace.STEP_S * 0.1
    pace.pace()
    assert fake_time.sleeps == [pace.PAUSE_S, pace.PAUSE_S]


def test_each_thread_counts_its_own_step(fake_time: FakeTime) -> None:
    pace.pace()
    fake_time.now += pace.STEP_S
    other = threading.Thread(target=pace.pace)  # its first call: no pause
    other.start()
    other.join()
    assert fake_time.sleeps == []
    pace.pace()
    assert fake_time.sleeps == [pace.PAUSE_S]


def test_no_pause_inside_lock_held(fake_time: FakeTime) -> None:
    pace.pace()
    fake_time.now += pace.STEP_S
    with pace.lock_held():
        pace.pace()
        with pace.lock_held():
            pace.pace()
        pace.pace()  # still held: the outer block
    assert fake_time.sleeps == []
    pace.pace()  # out of it, the step it ran is due
    assert fake_time.sleeps == [pace.PAUSE_S]
    fake_time.now += pace.STEP_S
    with pace.lock_held(False):  # no lock held (not PostgreSQL): pauses as outside
        pace.pace()
    assert fake_time.sleeps == [pace.PAUSE_S, pace.PAUSE_S]


@contextmanager
def events(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """What a batch does, in order: ``("pace", depth)`` for each call that may pause and
    ``("insert", depth)`` for each statement into the archive, with the connection's
    savepoint depth then (0: outside the batch's transaction)."""
    seen: list[tuple[str, int]] = []
    outside = len(connection.savepoint_ids)

    def paced() -> None:
        if not getattr(pace._thread, "held", False):  # where pace() may pause
            seen.append(("pace", len(connection.savepoint_ids) - outside))

    for module in (batch, rollups, fold):
        monkeypatch.setattr(module, "pace", paced)
    copy_plain = batch._copy_plain

    def copied(*args: Any) -> None:
        # psycopg 3's COPY is not a statement Django's execute wrappers see.
        seen.append(("insert", len(connection.savepoint_ids) - outside))
        copy_plain(*args)

    monkeypatch.setattr(batch, "_copy_plain", copied)

    def watch(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.startswith(f"INSERT INTO {batch.TABLE} "):
            seen.append(("insert", len(connection.savepoint_ids) - outside))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watch):
        yield seen


def records(n: int, groups: int = 1) -> list[Pending]:
    return [
        Pending(i, make_record(at_ms=BASE_AT_MS + i, model=f"m{i % groups}"), "inst")
        for i in range(n)
    ]


@pytest.mark.skipif(
    connection.vendor == "postgresql" and copies(),
    reason="PostgreSQL under psycopg 3 COPYs the batch, under the commit-order lock",
)
def test_a_bulk_insert_pauses_between_its_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch, "PACED_ROWS", 10)
    with events(monkeypatch) as seen:
        assert write_batch(records(45)).inserted == 45
    inserts = [i for i, (what, _) in enumerate(seen) if what == "insert"]
    if connection.vendor == "sqlite":
        # One executemany per piece, a pause after each.
        assert len(inserts) == 5
        assert all(seen[i + 1][0] == "pace" for i in inserts)
    else:
        # psycopg2: multi-row statements under the commit-order lock, no pause.
        assert all(seen[i + 1][0] != "pace" for i in inserts if i + 1 < len(seen))


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the commit-order lock")
@pytest.mark.parametrize("replayed", [0, 10], ids=["new rows", "some archived already"])
def test_a_batch_never_pauses_inside_its_transaction_on_postgresql(
    monkeypatch: pytest.MonkeyPatch, replayed: int
) -> None:
    # Its insert takes the archive's commit-order lock, which the fleet's other
    # writers wait for until it commits: a pause there would be theirs to wait out.
    # A batch holding archived rows counts its rollups in that transaction (``add``).
    monkeypatch.setattr(rollups, "PACED_RECORDS", 10)
    monkeypatch.setattr(batch, "PACED_ROWS", 10)
    items = records(45, groups=9)
    write_batch(items[:replayed])
    with events(monkeypatch) as seen:
        assert write_batch(items).inserted == 45 - replayed
    assert next(depth for what, depth in seen if what == "insert") >= 1
    assert [depth for what, depth in seen if what == "pace"]
    assert {depth for what, depth in seen if what == "pace"} == {0}
    if replayed:
        assert RollupDelta.objects.count() == 9 + 9  # the first batch's cells, then these


def test_a_batch_tallies_its_rollups_in_paused_pieces_of_whole_cells(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rollups, "PACED_RECORDS", 10)
    calls: list[int] = []
    tally = rollups._tallied

    def counted(keys: Any, records: Any) -> Any:
        calls.append(len(records))
        assert len(set(keys)) * 5 == len(records)  # whole cells: 5 records each
        return tally(keys, records)

    monkeypatch.setattr(rollups, "_tallied", counted)
    with events(monkeypatch) as seen:
        write_batch(records(45, groups=9))
    # Nine cells of five records: pieces of two cells (ten records), the last of one.
    assert calls == [10, 10, 10, 10, 5]
    assert sum(what == "pace" for what, _ in seen) >= len(calls)
    assert RollupDelta.objects.count() == 9


def test_a_fold_pauses_per_delta_and_per_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    write_batch(records(45, groups=9))
    with events(monkeypatch) as seen:
        assert fold.fold("default") == 9
    # At least once for each delta summed and for each row of the cells written.
    assert sum(what == "pace" for what, _ in seen) >= 2 * 9


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the commit-order lock")
def test_a_rebuild_never_pauses_while_it_holds_the_commit_order_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_batch(records(45, groups=9))
    since = datetime.fromtimestamp(BASE_AT_MS / 1000, UTC)
    with events(monkeypatch) as seen:
        result = rebuild(since, since + timedelta(hours=2), "default")
    assert result.rows == 45
    assert not [depth for what, depth in seen if what == "pace" and depth > 0]


def test_on_sqlite_a_rebuild_paces_its_upserts(monkeypatch: pytest.MonkeyPatch) -> None:
    if connection.vendor == "postgresql":
        pytest.skip("on PostgreSQL a rebuild holds the commit-order lock: no pause")
    write_batch(records(45, groups=9))
    since = datetime.fromtimestamp(BASE_AT_MS / 1000, UTC)
    with events(monkeypatch) as seen:
        rebuild(since, since + timedelta(hours=2), "default")
    assert [depth for what, depth in seen if what == "pace" and depth > 0]
