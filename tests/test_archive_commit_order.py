"""The commit-order cursor: a tail poller never skips a row that commits late (SPEC §4)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from ferrox_stats.archive.queries import CommitCursor, Cursor
from ferrox_stats.archive.rows import COLUMNS, Pending, row_values
from ferrox_stats.models import FinishedRequest
from tests.factories import archive, make_record

pytestmark = pytest.mark.django_db(transaction=True)


def tail(cursor: CommitCursor | None, limit: int = 100) -> tuple[list[str], CommitCursor | None]:
    page = FinishedRequest.objects.committed_after(cursor, limit)
    return [e["request_id"] for e in page.entries], page.next_cursor  # type: ignore[return-value]


@pytest.fixture
def second_connection() -> Iterator[Any]:
    """Another session on the test database, as another process's archiver would be."""
    import psycopg

    s = connection.settings_dict
    other = psycopg.connect(
        host=s["HOST"] or "127.0.0.1", port=s["PORT"] or 5432, user=s["USER"], dbname=s["NAME"]
    )
    yield other
    other.close()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="transaction ids are PostgreSQL's")
def test_a_row_that_commits_after_a_newer_one_is_not_skipped(second_connection: Any) -> None:
    archive([make_record(request_id="first")])
    # Another archiver's batch starts (and takes its transaction id) but has not committed...
    late = make_record(request_id="late")
    with second_connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_xact_id()")
        placeholders = ", ".join(["%s"] * len(COLUMNS))
        cursor.execute(
            f"INSERT INTO ferrox_stats_finishedrequest ({', '.join(COLUMNS)}) "
            f"VALUES ({placeholders})",
            row_values(Pending(None, late, "other")),
        )
    # ...while a newer batch commits here.
    archive([make_record(request_id="newer")])

    seen, cursor = tail(None)
    # "newer" is committed but waits: an older transaction could still add rows before it.
    assert seen == ["first"]
    # A poller following finish times, by contrast, moves past "late"'s place now...
    by_time = FinishedRequest.objects.oldest_first(None, 100)
    assert [e["request_id"] for e in by_time.entries] == ["first", "newer"]
    last = by_time.entries[-1]

    second_connection.commit()
    more, cursor = tail(cursor)
    assert more == ["late", "newer"]
    assert tail(cursor) == ([], cursor)
    # ...and never sees it: it finished before "newer" but committed after.
    after = FinishedRequest.objects.oldest_first(Cursor(last["at_ms"], last["id"]), 100)
    assert after.entries == []


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


@pytest.mark.parametrize("text", ["", "c", "12.3", "c1", "cx.1", "c1.-1"])
def test_a_malformed_commit_cursor_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="cursor must look like"):
        CommitCursor.decode(text)


def test_a_commit_cursor_round_trips() -> None:
    assert CommitCursor.decode(CommitCursor(123, 45).encode()) == CommitCursor(123, 45)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="transaction ids are PostgreSQL's")
def test_rows_get_the_id_of_the_transaction_that_archived_them() -> None:
    archive([make_record(request_id="x"), make_record(request_id="y")])
    xids = set(FinishedRequest.objects.values_list("commit_xid", flat=True))
    assert len(xids) == 1  # one batch, one transaction
    assert None not in xids
