"""Pruning past retention (``ferrox_stats.archive.retention``, ``ferrox_stats_prune``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ferrox_stats.archive import retention
from ferrox_stats.archive.fold import fold
from ferrox_stats.archive.retention import (
    ADVISORY_LOCK_KEY,
    PruneAlreadyRunning,
    PruneResult,
    parse_age,
    prune,
)
from ferrox_stats.archive.rows import datetime_to_at_ms
from ferrox_stats.models import DeadLetter, FinishedRequest, Rollup, RollupDelta
from tests.factories import archive, make_record

CUTOFF = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
# The command's clock; its cutoff for --older-than 30d is CUTOFF (to the whole second).
NOW = datetime(2026, 3, 2, 12, 0, 0, 654321, tzinfo=UTC)
MS = timedelta(milliseconds=1)

postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="advisory locks and timeouts are PostgreSQL's"
)


def archive_at(*moments: datetime) -> None:
    archive([make_record(at_ms=datetime_to_at_ms(m)) for m in moments])


def dead_letter_at(moment: datetime) -> None:
    letter = DeadLetter.objects.create(reason="status 700 is out of range", payload={})
    DeadLetter.objects.filter(pk=letter.pk).update(created_at=moment)


def archived() -> list[datetime]:
    return list(
        FinishedRequest.objects.order_by("finished_at").values_list("finished_at", flat=True)
    )


def deletes_from(table: str, queries: CaptureQueriesContext) -> list[str]:
    return [
        q["sql"] for q in queries.captured_queries if q["sql"].startswith(f'DELETE FROM "{table}"')
    ]


def prune_command(*args: str) -> str:
    out, err = StringIO(), StringIO()
    call_command("ferrox_stats_prune", *args, stdout=out, stderr=err)
    assert err.getvalue() == ""
    return out.getvalue()


@pytest.fixture
def frozen_now(monkeypatch: pytest.MonkeyPatch) -> datetime:
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    return NOW


@pytest.fixture
def other_session() -> Iterator[psycopg.Connection[Any]]:
    """A second session on the test database, as another host running a prune would be."""
    s = connection.settings_dict
    params = {"dbname": s["NAME"], "user": s["USER"], "password": s["PASSWORD"],
              "host": s["HOST"], "port": s["PORT"]}  # fmt: skip
    with psycopg.connect(**{k: v for k, v in params.items() if v}, autocommit=True) as conn:
        yield conn


# -- parse_age ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "age"),
    [
        ("30d", timedelta(days=30)),
        ("12h", timedelta(hours=12)),
        ("90m", timedelta(minutes=90)),
        ("3600s", timedelta(hours=1)),
        ("1d", timedelta(days=1)),
        ("007d", timedelta(days=7)),
    ],
)
def test_parse_age_reads_a_number_and_a_unit(text: str, age: timedelta) -> None:
    assert parse_age(text) == age


NOT_AN_AGE = "age must be a whole number followed by d, h, m or s (like 30d or 12h), got {!r}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        *(
            (text, NOT_AN_AGE.format(text))
            for text in ("30x", "-1d", "", "1.5d", "30", " 30d", "30D")
        ),
        ("0d", "age must be greater than zero, got '0d'"),
        ("9999999999d", "age '9999999999d' is too large"),
    ],
)
def test_parse_age_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        parse_age(text)
    assert str(excinfo.value) == message


# -- prune --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_prune_deletes_rows_before_the_cutoff_and_keeps_the_one_at_it() -> None:
    archive_at(CUTOFF - timedelta(days=400), CUTOFF - MS, CUTOFF, CUTOFF + MS)
    result = prune(CUTOFF, batch_size=100)
    assert result == PruneResult(CUTOFF, finished_requests=2, dead_letters=0, batches=1)
    assert archived() == [CUTOFF, CUTOFF + MS]


@pytest.mark.django_db
def test_prune_deletes_old_dead_letters_too() -> None:
    for moment in (CUTOFF - timedelta(days=1), CUTOFF - MS, CUTOFF, CUTOFF + MS):
        dead_letter_at(moment)
    result = prune(CUTOFF, batch_size=100)
    assert (result.finished_requests, result.dead_letters, result.batches) == (0, 2, 1)
    assert sorted(DeadLetter.objects.values_list("created_at", flat=True)) == [CUTOFF, CUTOFF + MS]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("old_rows", "batch_size", "batches", "statements"),
    [
        (10, 3, 4, 4),  # 3 + 3 + 3 + 1: a short batch means nothing is left
        (9, 3, 3, 4),  # 3 + 3 + 3, then one more statement finds nothing
        (3, 5, 1, 1),
        (0, 3, 0, 1),
    ],
)
def test_prune_deletes_in_bounded_batches(
    old_rows: int, batch_size: int, batches: int, statements: int
) -> None:
    archive_at(*(CUTOFF - timedelta(hours=h + 1) for h in range(old_rows)), CUTOFF)
    with CaptureQueriesContext(connection) as queries:
        result = prune(CUTOFF, batch_size=batch_size)
    assert (result.finished_requests, result.batches) == (old_rows, batches)
    deletes = deletes_from("ferrox_stats_finishedrequest", queries)
    assert len(deletes) == statements
    # Each statement picks its rows through a LIMITed subquery.
    assert all(f"LIMIT {batch_size}" in sql for sql in deletes)
    assert archived() == [CUTOFF]


@pytest.mark.django_db
def test_max_batches_stops_early_and_the_oldest_rows_go_first() -> None:
    moments = [CUTOFF - timedelta(hours=h) for h in range(10, 0, -1)]
    archive_at(*reversed(moments))  # inserted newest first: ids do not follow time
    dead_letter_at(CUTOFF - timedelta(days=1))
    result = prune(CUTOFF, batch_size=3, max_batches=2)
    assert (result.finished_requests, result.dead_letters, result.batches) == (6, 1, 3)
    assert archived() == moments[6:]


@pytest.mark.django_db
@pytest.mark.parametrize("max_batches", [None, 1, 2, 5])
def test_a_dry_run_deletes_nothing_and_counts_what_a_run_deletes(max_batches: int | None) -> None:
    archive_at(*(CUTOFF - timedelta(minutes=m + 1) for m in range(7)), CUTOFF)
    for days in (3, 2, 1):
        dead_letter_at(CUTOFF - timedelta(days=days))
    dry = prune(CUTOFF, batch_size=2, dry_run=True, max_batches=max_batches)
    assert (FinishedRequest.objects.count(), DeadLetter.objects.count()) == (8, 3)
    real = prune(CUTOFF, batch_size=2, max_batches=max_batches)
    assert dry == PruneResult(
        CUTOFF, real.finished_requests, real.dead_letters, real.batches, dry_run=True
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cutoff": datetime(2026, 1, 1), "batch_size": 1}, "cutoff must be an aware datetime"),
        ({"cutoff": CUTOFF, "batch_size": 0}, "batch_size must be >= 1, got 0"),
        (
            {"cutoff": CUTOFF, "batch_size": 1, "max_batches": 0},
            "max_batches must be >= 1 or None, got 0",
        ),
    ],
)
def test_prune_rejects_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        prune(**kwargs)
    assert str(excinfo.value) == message


@postgresql_only
@pytest.mark.django_db
def test_each_batch_runs_under_statement_and_lock_timeouts() -> None:
    archive_at(*(CUTOFF - timedelta(hours=h + 1) for h in range(4)))
    with CaptureQueriesContext(connection) as queries:
        prune(CUTOFF, batch_size=2)
    sql = [q["sql"] for q in queries.captured_queries]
    batch = ["SET LOCAL statement_timeout = 30000", "SET LOCAL lock_timeout = 5000"]
    deletes = [i for i, s in enumerate(sql) if s.startswith("DELETE")]
    assert len(deletes) == 4  # three of finished requests (2 + 2 + 0), one of dead letters
    for i in deletes:
        assert sql[i - 2 : i] == batch
    assert sql[0] == f"SELECT pg_try_advisory_lock({ADVISORY_LOCK_KEY})"
    assert sql[-1] == f"SELECT pg_advisory_unlock({ADVISORY_LOCK_KEY})"


@postgresql_only
@pytest.mark.django_db
def test_a_prune_holding_the_lock_keeps_another_from_running(
    other_session: psycopg.Connection[Any], frozen_now: datetime
) -> None:
    archive_at(CUTOFF - timedelta(days=1))
    assert other_session.execute(
        "SELECT pg_try_advisory_lock(%s)", [ADVISORY_LOCK_KEY]
    ).fetchone() == (True,)

    with pytest.raises(PruneAlreadyRunning):
        prune(CUTOFF, batch_size=10)
    with pytest.raises(CommandError) as excinfo:
        prune_command("--older-than", "30d")
    assert str(excinfo.value) == (
        "Nothing pruned: another prune is running on this database (it holds the advisory "
        f"lock {ADVISORY_LOCK_KEY}); try again when it has finished."
    )
    assert FinishedRequest.objects.count() == 1

    other_session.execute("SELECT pg_advisory_unlock(%s)", [ADVISORY_LOCK_KEY])
    assert prune(CUTOFF, batch_size=10).finished_requests == 1


@postgresql_only
@pytest.mark.django_db
def test_the_lock_is_released_when_a_prune_ends(other_session: psycopg.Connection[Any]) -> None:
    archive_at(CUTOFF - timedelta(days=1))
    prune(CUTOFF, batch_size=10)
    taken = other_session.execute("SELECT pg_try_advisory_lock(%s)", [ADVISORY_LOCK_KEY])
    assert taken.fetchone() == (True,)


@pytest.fixture
def row_locked_elsewhere(
    other_session: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> psycopg.Connection[Any]:
    """An old archived row that another session holds locked, and a short lock_timeout."""
    archive_at(CUTOFF - timedelta(days=2), CUTOFF - timedelta(days=1))
    monkeypatch.setattr(retention, "LOCK_TIMEOUT_MS", 50)
    other_session.execute("BEGIN")
    other_session.execute(
        "SELECT id FROM ferrox_stats_finishedrequest WHERE finished_at < %s FOR UPDATE", [CUTOFF]
    )
    return other_session


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_batch_that_waits_too_long_for_a_lock_is_tried_again(
    row_locked_elsewhere: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:
            row_locked_elsewhere.execute("COMMIT")

    monkeypatch.setattr(retention, "_sleep", sleep)
    assert prune(CUTOFF, batch_size=10).finished_requests == 2
    assert waits == [0.1, 0.2]


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_prune_that_never_gets_the_lock_fails_and_releases_its_own(
    row_locked_elsewhere: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []
    monkeypatch.setattr(retention, "_sleep", waits.append)
    with pytest.raises(OperationalError, match="lock timeout"):
        prune(CUTOFF, batch_size=10)
    assert waits == [0.1, 0.2, 0.4]  # four attempts in all
    row_locked_elsewhere.execute("COMMIT")
    assert FinishedRequest.objects.count() == 2
    taken = row_locked_elsewhere.execute("SELECT pg_try_advisory_lock(%s)", [ADVISORY_LOCK_KEY])
    assert taken.fetchone() == (True,)


@pytest.mark.django_db(transaction=True)
def test_prune_is_safe_while_the_archiver_writes() -> None:
    old = [CUTOFF - timedelta(seconds=s + 1) for s in range(300)]
    archive_at(*old)
    new_moments = [CUTOFF + timedelta(seconds=s) for s in range(200)]
    start = threading.Event()
    pruned = threading.Event()
    failures: list[BaseException] = []

    def archiver() -> None:
        try:
            start.wait()
            for i in range(0, len(new_moments), 10):
                batch = [make_record(at_ms=datetime_to_at_ms(m)) for m in new_moments[i : i + 10]]
                refused_after_prune = 0
                while True:
                    try:
                        archive(batch)
                        break
                    except OperationalError:
                        # Like the archiver, retry a batch that could not commit (SQLite
                        # lets one writer in at a time; its shared in-memory cache refuses
                        # at once rather than waiting): back off while prune writes, and
                        # once it is done the next attempts must get in.
                        if pruned.is_set():
                            refused_after_prune += 1
                            if refused_after_prune > 50:
                                raise AssertionError("a batch never committed") from None
                        pruned.wait(0.01)
        except BaseException as exc:
            failures.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=archiver)
    thread.start()
    start.set()
    try:
        result = prune(CUTOFF, batch_size=7)
    finally:
        pruned.set()
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert failures == []
    assert result.finished_requests == 300
    assert archived() == new_moments


# -- the command --------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "output"),
    [
        (
            ["--older-than", "30d", "--batch-size", "2"],
            "Deleted 5 finished requests and 1 dead letter older than "
            "2026-01-31T12:00:00+00:00 in 4 batches.\n",
        ),
        (
            ["--older-than", "30d", "--batch-size", "2", "--dry-run"],
            "Would delete 5 finished requests and 1 dead letter older than "
            "2026-01-31T12:00:00+00:00 in 4 batches.\n",
        ),
        (
            ["--older-than", "720h"],
            "Deleted 5 finished requests and 1 dead letter older than "
            "2026-01-31T12:00:00+00:00 in 2 batches.\n",
        ),
        (
            ["--older-than", "30d", "--batch-size", "1"],
            "Deleted 5 finished requests and 1 dead letter older than "
            "2026-01-31T12:00:00+00:00 in 6 batches.\n",
        ),
        (
            ["--older-than", "40d"],
            "Deleted 1 finished request and 0 dead letters older than "
            "2026-01-21T12:00:00+00:00 in 1 batch.\n",
        ),
        (
            ["--older-than", "400d", "--dry-run"],
            "Would delete 0 finished requests and 0 dead letters older than "
            "2025-01-26T12:00:00+00:00 in 0 batches.\n",
        ),
    ],
)
@pytest.mark.usefixtures("rollups_off")  # the archive's lines alone
def test_the_command_says_exactly_what_it_did(
    frozen_now: datetime, args: list[str], output: str
) -> None:
    archive_at(CUTOFF - timedelta(days=20), *(CUTOFF - timedelta(hours=h + 1) for h in range(4)))
    archive_at(CUTOFF, CUTOFF + timedelta(days=10))
    dead_letter_at(CUTOFF - timedelta(days=5))
    dead_letter_at(CUTOFF + MS)
    before = (FinishedRequest.objects.count(), DeadLetter.objects.count())
    assert prune_command(*args) == output
    if "--dry-run" in args:
        assert (FinishedRequest.objects.count(), DeadLetter.objects.count()) == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("retention_days", "deleted", "cutoff"),
    [
        (30, "1 finished request", "2026-01-31T12:00:00+00:00"),
        (7, "2 finished requests", "2026-02-23T12:00:00+00:00"),
        (0.5, "3 finished requests", "2026-03-02T00:00:00+00:00"),
    ],
)
@pytest.mark.usefixtures("rollups_off")  # the archive's lines alone
def test_the_command_defaults_to_the_retention_setting(
    settings: Any, frozen_now: datetime, retention_days: float, deleted: str, cutoff: str
) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "RETENTION_DAYS": retention_days}
    archive_at(CUTOFF - MS, NOW - timedelta(days=8), NOW - timedelta(hours=13), NOW)
    assert prune_command() == (
        f"Deleted {deleted} and 0 dead letters older than {cutoff} in 1 batch.\n"
    )
    assert min(archived()) >= datetime.fromisoformat(cutoff)


@pytest.mark.django_db
@pytest.mark.usefixtures("rollups_off")  # the archive's lines alone
def test_the_command_defaults_to_the_batch_size_setting(
    settings: Any, frozen_now: datetime
) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "PRUNE_BATCH_SIZE": 2}
    archive_at(*(CUTOFF - timedelta(hours=h + 1) for h in range(5)))
    assert prune_command("--older-than", "30d") == (
        "Deleted 5 finished requests and 0 dead letters older than "
        "2026-01-31T12:00:00+00:00 in 3 batches.\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--older-than", "30x"], f"--older-than: {NOT_AN_AGE.format('30x')}."),
        (["--older-than=-1d"], f"--older-than: {NOT_AN_AGE.format('-1d')}."),
        (["--older-than", ""], f"--older-than: {NOT_AN_AGE.format('')}."),
        (["--older-than", "0s"], "--older-than: age must be greater than zero, got '0s'."),
        (
            ["--older-than", "999999999d"],
            "--older-than: an age of 999999999 days reaches before year 1.",
        ),
        (["--older-than", "30d", "--batch-size", "0"], "--batch-size must be at least 1, got 0."),
        (
            ["--older-than", "30d", "--batch-size", "many"],
            "Error: argument --batch-size: invalid int value: 'many'",
        ),
    ],
)
def test_the_command_rejects_bad_input(args: list[str], message: str) -> None:
    with pytest.raises(CommandError) as excinfo:
        prune_command(*args)
    assert str(excinfo.value) == message


@pytest.mark.parametrize(
    ("retention_days", "message"),
    [
        (
            None,
            "Retention is off (FERROX_STATS['RETENTION_DAYS'] is None): pass --older-than "
            "to prune anyway.",
        ),
        (0, "FERROX_STATS['RETENTION_DAYS'] must be positive, got 0.0."),
        (-3, "FERROX_STATS['RETENTION_DAYS'] must be positive, got -3.0."),
    ],
)
def test_the_command_refuses_without_a_retention_period(
    settings: Any, retention_days: float | None, message: str
) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "RETENTION_DAYS": retention_days}
    with pytest.raises(CommandError) as excinfo:
        prune_command()
    assert str(excinfo.value) == message


@pytest.mark.django_db
def test_older_than_prunes_even_when_retention_is_off(settings: Any, frozen_now: datetime) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "RETENTION_DAYS": None}
    archive_at(CUTOFF - MS)
    assert prune_command("--older-than", "30d").startswith("Deleted 1 finished request ")
    assert archived() == []


# -- the usage rollups ---------------------------------------------------------------


def rollups_at(*moments: datetime) -> None:
    """Archive one record at each moment with the rollups on: a minute and an hour row each."""
    from ferrox_stats.archive.batch import write_batch
    from ferrox_stats.archive.rows import Pending

    records = [make_record(at_ms=datetime_to_at_ms(moment)) for moment in moments]
    write_batch([Pending(None, record, "inst") for record in records])
    fold("default")


def rollups_at_unfolded(*moments: datetime) -> None:
    """Archive a record at each moment, its rollups left as deltas."""
    from ferrox_stats.archive.batch import write_batch
    from ferrox_stats.archive.rows import Pending

    records = [make_record(at_ms=datetime_to_at_ms(moment)) for moment in moments]
    write_batch([Pending(None, record, "inst") for record in records])


def rollup_buckets(span: int) -> list[datetime]:
    """The buckets of ``span`` with rollups (each has its group's row and six merged ones:
    per model, in total, per key, replica, route and outcome, ``Rollup.level``)."""
    rows = Rollup.objects.filter(span_s=span, level=0)
    return sorted(rows.values_list("bucket", flat=True))


@pytest.mark.django_db
@pytest.mark.usefixtures("rollups_on")
def test_prune_rollups_deletes_each_width_before_its_cutoff_oldest_first_in_batches() -> None:
    from ferrox_stats.archive.retention import prune_rollups

    cutoff = datetime(2026, 1, 10, tzinfo=UTC)
    rollups_at(*(cutoff - timedelta(minutes=m + 1) for m in range(5)), cutoff, cutoff + MS)
    assert len(rollup_buckets(60)) == 6  # cutoff and cutoff + 1 ms share a minute
    # Eleven rows a bucket (its group's and ten merged): 55 before the cutoff.
    dry = prune_rollups({60: cutoff}, batch_size=22, dry_run=True)
    assert (dry.deleted, dry.batches, len(rollup_buckets(60))) == ({60: 55}, 3, 6)
    result = prune_rollups({60: cutoff}, batch_size=22, max_batches=2)
    assert (result.deleted, result.batches) == ({60: 44}, 2)
    assert rollup_buckets(60)[0] == cutoff - timedelta(minutes=1)  # the oldest went first
    assert prune_rollups({60: cutoff}, batch_size=22).deleted == {60: 11}
    assert rollup_buckets(60) == [cutoff]  # the rows at the cutoff stay
    assert Rollup.objects.filter(span_s=60).count() == 11
    assert len(rollup_buckets(3600)) == 2  # hours: not asked
    assert prune_rollups({3600: cutoff}, batch_size=10).deleted == {3600: 11}
    assert rollup_buckets(3600) == [cutoff]
    with pytest.raises(ValueError, match="aware"):
        prune_rollups({60: cutoff.replace(tzinfo=None)}, batch_size=1)


@pytest.mark.django_db
@pytest.mark.usefixtures("rollups_on")
def test_prune_rollups_folds_the_deltas_first_so_none_makes_a_pruned_row_again() -> None:
    from ferrox_stats.archive.retention import prune_rollups

    cutoff = datetime(2026, 1, 10, tzinfo=UTC)
    rollups_at_unfolded(cutoff - timedelta(minutes=3), cutoff)
    assert RollupDelta.objects.count() == 2 and not Rollup.objects.exists()
    # The dry run counts what the prune deletes: the deltas' rows too.
    assert prune_rollups({60: cutoff}, batch_size=100, dry_run=True).deleted == {60: 11}
    assert prune_rollups({60: cutoff}, batch_size=100).deleted == {60: 11}
    fold("default")
    assert rollup_buckets(60) == [cutoff]
    assert not RollupDelta.objects.exists()


@pytest.mark.django_db
@pytest.mark.usefixtures("rollups_on")
def test_the_command_prunes_minute_rollups_after_a_week_and_keeps_hours_by_default(
    settings: Any, frozen_now: datetime
) -> None:
    week = NOW - timedelta(days=7)
    rollups_at(week - timedelta(hours=2), week + timedelta(hours=1), NOW)
    before_hours = rollup_buckets(3600)
    output = prune_command("--older-than", "400d")
    assert output.splitlines()[1:] == [
        # A request's minute at every level: its group's, the total's, each label's,
        # and each label's with the model.
        f"Deleted 11 minute rollups older than {week.replace(microsecond=0).isoformat()}."
    ]
    assert rollup_buckets(3600) == before_hours
    assert len(rollup_buckets(60)) == 2
    settings.FERROX_STATS = {**settings.FERROX_STATS, "ROLLUP_HOUR_DAYS": 1}
    output = prune_command("--older-than", "400d")
    assert output.splitlines()[1:] == [
        "Deleted 22 hour rollups older than "
        f"{(NOW - timedelta(days=1)).replace(microsecond=0).isoformat()}.",
        # The merged levels' day rows go with their hours: each day that ended by then.
        "Deleted 10 day rollups older than 2026-03-01T00:00:00+00:00.",
    ]
    # Nothing older: a run says nothing of the rollups.
    assert len(prune_command("--older-than", "400d").splitlines()) == 1
    settings.FERROX_STATS = {**settings.FERROX_STATS, "ROLLUP_MINUTE_DAYS": None}
    assert len(prune_command("--older-than", "400d").splitlines()) == 1
