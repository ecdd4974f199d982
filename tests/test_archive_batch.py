"""Writing one batch (``ferrox_stats.archive.batch``), on SQLite and PostgreSQL, where
each test runs twice: COPY under psycopg 3, and the bulk insert a psycopg2 host gets."""

from __future__ import annotations

import pytest

from ferrox_stats.archive import batch
from ferrox_stats.archive.batch import write_batch
from ferrox_stats.archive.rows import Pending
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
