"""Writing one batch (``ferrox_stats.archive.batch``), on SQLite and PostgreSQL, where
each test runs twice: COPY under psycopg 3, and the bulk insert a psycopg2 host gets;
and twice again: with plain batches on their short path, and with every batch on the
per-record path."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import override_settings

from ferrox_stats.archive import batch
from ferrox_stats.archive.batch import CHUNK, COPY_TYPES, write_batch
from ferrox_stats.archive.rows import COLUMNS, Pending
from ferrox_stats.core.requests import Record, entry
from ferrox_stats.models import DeadLetter, FinishedRequest
from tests.factories import archive, make_record

pytestmark = pytest.mark.django_db
COPIES = batch.copies  # as the module has it, before a test replaces it


@pytest.fixture(autouse=True, params=["psycopg3", "psycopg2"])
def driver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "psycopg2":
        # psycopg2 has no cursor.copy(): the batch must never reach the COPY path.
        monkeypatch.setattr(batch, "copies", lambda: False)

        def no_copy(*args: object) -> list[bool]:
            raise AssertionError("COPY under psycopg2")

        monkeypatch.setattr(batch, "_copy_insert", no_copy)
    return str(request.param)


@pytest.fixture(autouse=True, params=["plain", "each"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "each":
        monkeypatch.setattr(batch, "_insert_plain", lambda items, using: None)
    return str(request.param)


def test_this_environment_copies_under_psycopg_3() -> None:
    pytest.importorskip("psycopg")
    assert COPIES()


def archived_entries() -> list[dict[str, object]]:
    entries = list(FinishedRequest.objects.order_by("finished_at", "id").entries())
    for e in entries:
        del e["id"]
    return entries


@pytest.mark.parametrize(
    "record",
    [
        make_record(),
        make_record(stream=False, ttft_ms=None, decode_ms=None, finish_reason=None),
        make_record(aborted="client_disconnect", status=None, completion_tokens=1),
        make_record(ttft_ms=0.1 + 0.2, duration_ms=1e-9, queue_ms=0.0, client=None),
        Record(request_id=None, at_ms=5, replica="r"),
    ],
)
def test_an_archived_row_round_trips_to_the_entry_the_ring_serves(record: Record) -> None:
    result = write_batch([Pending(41, record, "inst-1")])
    assert (result.inserted, result.duplicates, result.dead) == (1, 0, [])
    assert archived_entries() == [entry(record, 41)]
    row = FinishedRequest.objects.get()
    assert (row.instance, row.seq) == ("inst-1", 41)


@override_settings(TIME_ZONE="America/Los_Angeles")
def test_a_row_round_trips_in_a_host_time_zone_that_is_not_utc() -> None:
    # The bulk insert prepares finished_at as the field does for the connection.
    record = make_record(at_ms=1_767_236_400_123)  # 2026-01-01 03:00:00.123 UTC
    assert write_batch([Pending(7, record, "inst-1")]).inserted == 1
    assert archived_entries() == [entry(record, 7)]
    # 2025-12-31 19:00 in Los Angeles, where the host filters.
    assert FinishedRequest.objects.filter(finished_at__year=2025).count() == 1


def test_replaying_records_stores_each_once() -> None:
    records = [make_record() for _ in range(5)]
    assert archive(records).inserted == 5
    again = archive(records)  # same request ids, new seqs: a replay from a producer
    assert (again.inserted, again.duplicates) == (0, 5)
    assert FinishedRequest.objects.count() == 5


def test_a_batch_resent_after_a_lost_commit_is_not_stored_twice() -> None:
    # No request id: only (instance, seq) identifies these rows.
    items = [Pending(seq, Record(at_ms=1000 + seq, replica="r"), "inst") for seq in range(4)]
    assert write_batch(items).inserted == 4
    assert write_batch(items).duplicates == 4
    assert FinishedRequest.objects.count() == 4


def test_duplicates_inside_one_batch_are_stored_once() -> None:
    record = make_record()
    result = write_batch([Pending(1, record, "a"), Pending(2, record, "a")])
    assert (result.inserted, result.duplicates) == (1, 1)


def test_the_same_request_id_on_two_replicas_is_two_rows() -> None:
    archive([make_record(request_id="x", replica="a"), make_record(request_id="x", replica="b")])
    assert FinishedRequest.objects.filter(request_id="x").count() == 2


def test_one_bad_row_is_dead_lettered_and_the_rest_persisted() -> None:
    good = [make_record() for _ in range(3)]
    too_long = make_record(model="m" * 300)  # refused before the database sees it
    bad_status = make_record(status=999)  # refused by the table's CHECK constraint
    result = archive([good[0], too_long, good[1], bad_status, good[2]])
    assert result.inserted == 3
    reasons = {item.record.request_id: reason for item, reason in result.dead}
    assert reasons[too_long.request_id] == "model is longer than 200 characters"
    assert reasons[bad_status.request_id].startswith("IntegrityError")
    assert sorted(FinishedRequest.objects.values_list("request_id", flat=True)) == sorted(
        r.request_id for r in good
    )
    letters = {d.request_id: d for d in DeadLetter.objects.all()}
    assert set(letters) == {too_long.request_id, bad_status.request_id}
    assert letters[bad_status.request_id].payload["status"] == 999
    assert letters[too_long.request_id].reason == "model is longer than 200 characters"


def test_negative_times_are_refused_by_the_table() -> None:
    result = archive([make_record(ttft_ms=-1.0)])
    assert result.inserted == 0
    assert len(result.dead) == 1
    assert FinishedRequest.objects.count() == 0


def test_each_item_is_answered_in_order() -> None:
    archived = make_record()
    archive([archived])
    fresh, bad = make_record(), make_record(status=999)
    items = [Pending(None, r, None) for r in (fresh, archived, bad, fresh)]
    result = write_batch(items)
    assert result.outcomes == ["inserted", "duplicate", "dead", "duplicate"]
    assert (result.inserted, result.duplicates, len(result.dead)) == (1, 2, 1)


def test_the_servers_keys_and_a_producers_are_separate_namespaces() -> None:
    # The same replica, request id, instance and seq: once recorded by this deployment,
    # once reported by an ingest token's producer. Neither makes the other a duplicate;
    # a resend of either still is one (on PostgreSQL through the staging table).
    record = make_record(request_id="req-1", replica="test-replica")
    own = Pending(0, record, "test-replica/1/abc", ingested=False)
    produced = own._replace(ingested=True)
    assert write_batch([own]).outcomes == ["inserted"]
    assert write_batch([produced, own]).outcomes == ["inserted", "duplicate"]
    assert write_batch([own, produced]).outcomes == ["duplicate", "duplicate"]
    assert sorted(FinishedRequest.objects.values_list("ingested", flat=True)) == [False, True]


def test_a_producers_instance_and_seq_are_its_replicas_own() -> None:
    # No request id: two replicas' producers that both name their process "engine-0".
    a = Pending(7, Record(at_ms=1000, replica="gpu-a"), "engine-0", ingested=True)
    b = a._replace(record=a.record._replace(replica="gpu-b"))
    assert write_batch([a]).outcomes == ["inserted"]
    assert write_batch([b, a]).outcomes == ["inserted", "duplicate"]
    assert sorted(FinishedRequest.objects.values_list("replica", flat=True)) == ["gpu-a", "gpu-b"]


def test_a_lone_surrogate_from_the_request_path_is_archived_replaced() -> None:
    # The recorder keeps records as given; the writer replaces what no database stores.
    result = write_batch([Pending(1, make_record(model="m\ud800", client="c\udfff"), "inst")])
    assert (result.inserted, result.dead) == (1, [])
    assert FinishedRequest.objects.values_list("model", "client").get() == ("m\ufffd", "c\ufffd")


def test_a_large_batch_with_a_bad_record_in_its_last_chunk_loses_nothing() -> None:
    records = [make_record() for _ in range(2 * CHUNK + 10)]
    records[-3] = records[-3]._replace(client="a\x00b")
    result = archive(records)
    assert (result.inserted, len(result.dead)) == (len(records) - 1, 1)
    assert result.outcomes[-3] == "dead"
    assert FinishedRequest.objects.count() == len(records) - 1


def test_a_duplicate_in_a_later_chunk_is_stored_once() -> None:
    records = [make_record() for _ in range(CHUNK + 5)]
    records[-1] = records[1]
    result = archive(records)
    assert (result.inserted, result.duplicates) == (CHUNK + 4, 1)
    assert result.outcomes[-1] == "duplicate"
    assert FinishedRequest.objects.count() == CHUNK + 4


def test_a_large_replayed_batch_stores_only_what_is_new() -> None:
    records = [make_record() for _ in range(CHUNK + 20)]
    archive(records[::2])
    result = archive(records)
    assert result.outcomes == ["duplicate", "inserted"] * (len(records) // 2)
    assert FinishedRequest.objects.count() == len(records)


def test_text_that_is_not_ascii_round_trips() -> None:
    record = make_record(model="modèle-ü", error="délai dépassé", client="客户端")
    assert write_batch([Pending(3, record, "inst-é")]).inserted == 1
    assert archived_entries() == [entry(record, 3)]


def test_the_binary_copy_types_are_the_tables() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's catalog")
    pytest.importorskip("psycopg")
    table = FinishedRequest._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attname, atttypid FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
            [table],
        )
        oids = dict(cursor.fetchall())
        registry = cursor.connection.adapters.types
        assert [registry[name].oid for name in COPY_TYPES] == [oids[c] for c in COLUMNS]


def test_a_plausible_batch_takes_the_short_path(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if path == "each":
        pytest.skip("the per-record path is what this run forces")

    def unreachable(*args: object) -> None:
        raise AssertionError("a plausible batch went the long way")

    monkeypatch.setattr(batch, "_write_each", unreachable)
    records = [make_record(status=503, aborted="timeout") for _ in range(CHUNK + 1)]
    assert archive(records).inserted == CHUNK + 1
    assert [e["request_id"] for e in archived_entries()] == [r.request_id for r in records]
