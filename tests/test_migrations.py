"""The models and their migrations agree."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from ferrox_stats import tokens
from ferrox_stats.archive.batch import write_batch
from ferrox_stats.archive.fold import fold
from ferrox_stats.archive.rows import Pending, at_ms_to_datetime
from ferrox_stats.models import FinishedRequest
from tests.factories import BASE_AT_MS, archive, make_record


def archived(items: list[Pending]) -> None:
    """A batch written, and its rollup deltas folded (as the writer soon would)."""
    write_batch(items)
    fold("default")


@pytest.fixture(autouse=True)
def _no_legacy_partition_left() -> Iterator[None]:
    """Each test here that migrates forward past 0013 with rows archived leaves them in a
    ``_legacy`` partition (MINVALUE to tomorrow), which outlives the test's flush and
    would take every later test's day partitions: drop it after the test."""
    yield
    from ferrox_stats.archive import partitions

    for partition in partitions.partitions():
        if partition.name.endswith("_legacy"):
            partitions.drop(partition)


@pytest.mark.django_db
def test_makemigrations_finds_nothing_to_do() -> None:
    out = StringIO()
    call_command("makemigrations", "ferrox_stats", "--check", "--dry-run", stdout=out)
    assert out.getvalue() == "No changes detected in app 'ferrox_stats'\n"


@pytest.mark.django_db(transaction=True)
def test_0007_puts_rows_archived_before_it_in_the_ingest_namespace() -> None:
    before = [("ferrox_stats", "0005_api_token_infer_scope")]
    MigrationExecutor(connection).migrate(before)
    # A row as the previous release wrote it, naming no namespace column, its finish
    # time as Django stores one (on SQLite, the text a unique key compares).
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ferrox_stats_finishedrequest (request_id, finished_at, replica, "
            "instance, seq, outcome) VALUES ('eng-1', %s, 'gpu-1', 'p', 3, 'ok')",
            [connection.ops.adapt_datetimefield_value(at_ms_to_datetime(BASE_AT_MS))],
        )
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    assert list(FinishedRequest.objects.values_list("ingested", flat=True)) == [True]
    # (Its finish time too: since 0013 a record is known by its id and when it finished.)
    old = make_record(request_id="eng-1", replica="gpu-1", at_ms=BASE_AT_MS)
    # A producer's replay of it is still a duplicate; the server's own keys are apart.
    produced = Pending(3, old, "p", ingested=True)
    assert write_batch([produced]).outcomes == ["duplicate"]
    assert write_batch([produced._replace(ingested=False)]).outcomes == ["inserted"]


@pytest.mark.django_db(transaction=True)
def test_0008_keeps_tokens_issued_before_it_working_without_owner_or_expiry() -> None:
    MigrationExecutor(connection).migrate([("ferrox_stats", "0007_ingest_identity_namespace")])
    secret = tokens.SECRET_PREFIX + "issued-by-the-previous-release-0000000000000"
    # A token as the previous release wrote it, naming neither owner nor expiry.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ferrox_stats_apitoken (label, prefix, secret_hash, can_read, "
            "can_ingest, can_infer, replica, created_at) VALUES ('old', 'fxs_issu', %s, "
            "TRUE, FALSE, FALSE, '', '2026-01-01T00:00:00Z')",
            [tokens.hash_secret(secret)],
        )
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    token = tokens.check(secret)
    assert token is not None and token.label == "old"
    assert (token.owner, token.expires_at) == (None, None)


@pytest.mark.django_db(transaction=True)
def test_0010_packs_the_latency_of_rows_written_before_it_and_0009_gets_them_back() -> None:
    from ferrox_stats import fleet
    from ferrox_stats.fleet_rows import row_state
    from ferrox_stats.models import Instance
    from tests.states import BASE_MS, state_doc

    cell = {
        "model": "m",
        "route": "/v1/chat/completions",
        "outcome": "ok",
        "requests": 3,
        "input_tokens": 0,
        "output_tokens": 0,
        "duration": {"zeros": 1, "sum": 3.0, "counts": {"-1": 1, "31": 1}},
        **{f: {"zeros": 0, "sum": 0.0, "counts": {}} for f in ("ttft", "tpot", "input", "output")},
    }
    doc = state_doc("gpu-1/100/aaa", at_ms=BASE_MS, completed=3, breakdown=[cell])
    # Rows as the previous release wrote them: its breakdown emptied, the counts as lists.
    before = {**row_state(doc), "breakdown": []}
    broken = '{"version": 1, "latency": "hand-edited"}'
    previous = [("ferrox_stats", "0009_instance_heartbeats")]
    MigrationExecutor(connection).migrate(previous)
    with connection.cursor() as cursor:
        for instance, state in (("gpu-1/100/aaa", json.dumps(before)), ("gpu-2/1/b", broken)):
            cursor.execute(
                "INSERT INTO ferrox_stats_instance (instance, replica, host, pid, started_at, "
                "last_seen, heartbeat_s, stopped, state) VALUES (%s, 'gpu-1', 'h', 100, "
                "'2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', 2.0, FALSE, %s)",
                [instance, state],
            )
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    row = Instance.objects.get(instance="gpu-1/100/aaa")
    assert row.latency_counts is not None  # packed
    assert row.document() == {key: value for key, value in before.items() if key != "breakdown"}
    left = Instance.objects.get(instance="gpu-2/1/b")  # left to be counted unreadable
    assert (json.loads(left.state), left.latency_counts) == (json.loads(broken), None)
    document = fleet.compute(
        now_ms=BASE_MS, using="default", lost_s=30.0, heartbeat_s=2.0, instance="gpu-1/100/aaa"
    )
    assert document["totals"]["latency"]["duration_s"]["count"] == 3
    assert document["unreadable"] == 1

    try:
        MigrationExecutor(connection).migrate(previous)
        with connection.cursor() as cursor:
            cursor.execute("SELECT state FROM ferrox_stats_instance ORDER BY instance")
            states = [row[0] for row in cursor.fetchall()]
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    # The previous release reads its form again (the broken row is still what it was).
    assert [json.loads(s) if isinstance(s, str) else s for s in states] == [
        before,
        json.loads(broken),
    ]


@pytest.mark.django_db(transaction=True)
def test_0011_swaps_each_filter_index_for_a_keyset_one_and_back() -> None:
    old = {f"ferrox_fr_{c}_finished" for c in ("model", "route", "status", "outcome", "client")}
    old.add("ferrox_fr_replica_finished")
    new = {
        f"ferrox_fr_{c}_keyset"
        for c in ("model", "route", "client", "replica", "status", "outcome", "finish", "aborted")
    }

    def indexes() -> set[str]:
        with connection.cursor() as cursor:
            table = FinishedRequest._meta.db_table
            return set(connection.introspection.get_constraints(cursor, table))

    previous = [("ferrox_stats", "0010_instance_state_text_latency_counts_packed")]
    try:
        MigrationExecutor(connection).migrate(previous)
        before = indexes()
        # A row the previous release wrote, with a value each partial index keeps.
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO ferrox_stats_finishedrequest (request_id, finished_at, replica, "
                "status, error, finish_reason, outcome) VALUES ('old-1', "
                "'2026-01-01T00:00:00Z', 'gpu-1', 429, 'RateLimited', 'length', 'error')"
            )
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    after = indexes()

    assert old <= before and not new & before
    assert new <= after and not old & after
    for filters in ({"status": 429}, {"outcome": "error"}, {"finish_reason": "length"}):
        page = FinishedRequest.objects.matching(filters).newest_first(None, 10)
        assert [e["request_id"] for e in page.entries] == ["old-1"]


@pytest.mark.django_db(transaction=True)
def test_0013_keeps_the_archive_as_it_was_in_one_partition_and_0012_gets_it_back() -> None:
    from ferrox_stats.archive import partitions

    def stored() -> list[tuple[Any, ...]]:
        return list(
            FinishedRequest.objects.order_by("id").values_list(
                "id", "commit_seq", "request_id", "finished_at"
            )
        )

    MigrationExecutor(connection).migrate([("ferrox_stats", "0012_usage_rollups")])
    with connection.cursor() as cursor:
        for n, month in enumerate((1, 2)):
            # Finish times as Django stores them (on SQLite, the text a unique key compares).
            at = connection.ops.adapt_datetimefield_value(datetime(2026, month, 1, tzinfo=UTC))
            cursor.execute(
                "INSERT INTO ferrox_stats_finishedrequest (request_id, finished_at, replica, "
                "instance, seq, outcome) VALUES (%s, %s, 'gpu-1', 'p', %s, 'ok')",
                [f"old-{n}", at, n],
            )
    before = stored()
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    assert stored() == before
    if connection.vendor == "postgresql":
        assert partitions.is_partitioned()
        [legacy] = [p for p in partitions.partitions() if p.name.endswith("_legacy")]
        # Everything up to tomorrow stays in the old table, attached whole.
        assert legacy.lower is None and legacy.upper is not None
        assert legacy.upper > datetime.now(UTC)
    # The ids (and the commit order) go on after the old rows'.
    archive([make_record(request_id="new")])
    [(new_id, new_commit, *_)] = [row for row in stored() if row[2] == "new"]
    assert new_id > before[-1][0]
    if connection.vendor == "postgresql":
        assert new_commit > before[-1][1]
    # A replay of an old record is still a duplicate.
    replay = make_record(request_id="old-0", replica="gpu-1", at_ms=BASE_AT_MS)
    assert write_batch([Pending(0, replay, "p", ingested=True)]).outcomes == ["duplicate"]

    after = stored()
    executor = MigrationExecutor(connection)
    executor.migrate([("ferrox_stats", "0012_usage_rollups")])
    assert stored() == after
    assert not partitions.is_partitioned()
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert stored() == after


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("rollups_on")
def test_0015_merges_the_rollups_written_before_it_as_the_writer_merges_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib
    import math

    # Pages of three rows: buckets cut across pages, merged all the same.
    monkeypatch.setattr(
        importlib.import_module("ferrox_stats.migrations.0015_rollup_levels"), "CHUNK", 3
    )

    from ferrox_stats.archive.rollups import stored_tally
    from ferrox_stats.core.rollup import Tally
    from ferrox_stats.models import Rollup

    def stored() -> dict[tuple[Any, ...], tuple[tuple[Any, ...], Tally]]:
        result = {}
        for r in Rollup.objects.all():
            key = (r.span_s, r.bucket, r.level, r.group_key, r.model, r.replica, r.outcome)
            counters = (r.requests, r.prompt_tokens, r.completion_tokens, r.cached_tokens)
            tally = stored_tally(r)
            result[key] = ((*counters, r.errors, r.aborted), tally)
        return result

    records = [
        make_record(
            at_ms=BASE_AT_MS + n * 17 * 60_000,
            model=("a", "b", None)[n % 3],
            via_api_key=("k1", "k2")[n % 2],
            status=(200, 500)[n % 2],
            aborted=(None, None, "timeout")[n % 3],
            duration_ms=5.0 + n,
        )
        for n in range(20)
    ]
    archived([Pending(None, r, "inst") for r in records])
    written = stored()
    assert {key[2] for key in written} == set(range(11))  # 3-10 made again by 0019, 0020

    executor = MigrationExecutor(connection)
    executor.migrate([("ferrox_stats", "0014_rollup_covering_indexes")])
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM ferrox_stats_rollup")
        # Backwards the merged rows go: the groups' are left.
        assert cursor.fetchone()[0] == sum(1 for key in written if key[2] == 0)
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    migrated = stored()
    assert set(migrated) == set(written)
    for key, (counters, tally) in written.items():
        got_counters, got = migrated[key]
        assert got_counters == counters, key
        assert got.aborts == tally.aborts
        for name in ("duration", "ttft", "tpot"):
            a, b = getattr(got, name), getattr(tally, name)
            assert (a.zeros, a.counts) == (b.zeros, b.counts), (key, name)
            assert math.isclose(a.total, b.total, rel_tol=1e-12)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("rollups_on")
def test_0016_moves_the_known_abort_reasons_into_their_columns_and_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib

    from ferrox_stats.models import Rollup

    # Pages of two rows: the keyset crosses pages.
    monkeypatch.setattr(
        importlib.import_module("ferrox_stats.migrations.0016_rollup_known_abort_reasons"),
        "CHUNK",
        2,
    )
    reasons = ("timeout", "client_disconnect", "explicit", "preempted", None)
    archived(
        [
            Pending(
                None,
                make_record(at_ms=BASE_AT_MS + n * 11 * 60_000, aborted=reasons[n % 5]),
                "inst",
            )
            for n in range(25)
        ]
    )

    def by_row() -> dict[tuple[Any, ...], str]:
        # Only columns 0015 has: the model's others are not in the table then.
        rows = Rollup.objects.values_list("span_s", "bucket", "group_key", "aborts")
        return {tuple(row[:3]): row[3] for row in rows}

    def reasons_of(text: str) -> dict[str, int]:
        return json.loads(text) if text else {}

    columns = ("aborts_client_disconnect", "aborts_explicit", "aborts_timeout")
    written = {
        (r.span_s, r.bucket, r.group_key): ([getattr(r, c) for c in columns], r.aborts)
        for r in Rollup.objects.all()
    }
    # The label levels 0019 adds go backwards too (and are made again after).
    labels = {(r.span_s, r.bucket, r.group_key) for r in Rollup.objects.filter(level__gt=2)}
    # The writer counts the known reasons in their columns, the others in the JSON.
    assert all(set(reasons_of(text)) <= {"preempted"} for _, text in written.values())
    assert sum(sum(known) for known, _ in written.values()) > 0

    executor = MigrationExecutor(connection)
    executor.migrate([("ferrox_stats", "0015_rollup_levels")])
    before = by_row()
    # Backwards every reason is in the JSON again, with its count (0017's day rows
    # gone before, and made again after).
    assert {key for key in written if key[0] != 86400 and key not in labels} == set(before)
    for key, (known, text) in written.items():
        if key[0] == 86400 or key in labels:
            continue
        want = reasons_of(text)
        for reason, n in zip(("client_disconnect", "explicit", "timeout"), known, strict=True):
            if n:
                want[reason] = n
        assert reasons_of(before[key]) == want, key

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    migrated = {
        (r.span_s, r.bucket, r.group_key): ([getattr(r, c) for c in columns], r.aborts)
        for r in Rollup.objects.all()
    }
    assert migrated == written


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("rollups_on")
def test_0017_makes_the_day_rows_and_percentiles_the_writer_makes() -> None:
    from ferrox_stats.models import Rollup

    archived(
        [
            Pending(
                None,
                make_record(
                    at_ms=BASE_AT_MS + n * 53 * 60_000,  # over two UTC days
                    model=("a", "b")[n % 2],
                    aborted=(None, "timeout", "preempted")[n % 3],
                    duration_ms=3.0 + n * 7,
                ),
                "inst",
            )
            for n in range(60)
        ]
    )
    fields = ("requests", "aborts_timeout", "aborts", "duration", "ttft", "percentiles")

    def stored() -> dict[tuple[Any, ...], tuple[Any, ...]]:
        return {
            (r.span_s, r.bucket, r.group_key): tuple(getattr(r, f) for f in fields)
            for r in Rollup.objects.all()
        }

    written = stored()
    assert {key[0] for key in written} == {60, 3600, 86400}
    executor = MigrationExecutor(connection)
    executor.migrate([("ferrox_stats", "0016_rollup_known_abort_reasons")])
    left = Rollup.objects.values_list("span_s", flat=True)
    assert set(left) == {60, 3600}  # the day rows went backwards
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    migrated = stored()
    assert migrated.keys() == written.keys()
    for key, values in written.items():
        # The distributions' float sums up to their addition order: the counts, the
        # percentiles and the reasons exactly.
        got = migrated[key]
        assert (got[0], got[1], got[2], got[5]) == (values[0], values[1], values[2], values[5])
        for a, b in zip(got[3:5], values[3:5], strict=True):
            assert a.split(";")[::2] == b.split(";")[::2], key


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("rollups_on")
@pytest.mark.parametrize(
    ("migration", "before", "levels"),
    [
        ("0019_rollup_label_levels", "0018_rollup_statistics", {3, 4, 5, 6}),
        ("0020_rollup_counted_levels", "0019_rollup_label_levels", {7, 8, 9, 10}),
    ],
)
def test_the_level_migrations_make_the_rows_the_writer_makes(
    monkeypatch: pytest.MonkeyPatch, migration: str, before: str, levels: set[int]
) -> None:
    import importlib

    from ferrox_stats.models import Rollup

    # Pages of five rows, cells upserted five at a time: a cell written by one flush
    # is merged into by the next.
    monkeypatch.setattr(importlib.import_module(f"ferrox_stats.migrations.{migration}"), "CHUNK", 5)
    archived(
        [
            Pending(
                None,
                make_record(
                    at_ms=BASE_AT_MS + n * 53 * 60_000,  # over two UTC days
                    model=("a", "b")[n % 2],
                    via_api_key=("k1", "k2", None)[n % 3],
                    replica=("r1", "r2")[n // 2 % 2],
                    route=("/v1/chat/completions", "/v1/completions")[n // 3 % 2],
                    status=(200, 200, 500)[n % 3],
                    aborted=(None, "timeout", None, "preempted")[n % 4],
                    duration_ms=3.0 + n * 7,
                ),
                "inst",
            )
            for n in range(60)
        ]
    )
    fields = ("requests", "errors", "aborted", "aborts_timeout", "aborts", "percentiles")
    texts = ("duration", "ttft", "tpot")

    def stored() -> dict[tuple[Any, ...], tuple[Any, ...]]:
        return {
            (r.span_s, r.bucket, r.level, r.group_key): tuple(
                getattr(r, f) for f in (*fields, *texts)
            )
            for r in Rollup.objects.all()
        }

    written = stored()
    assert {key[2] for key in written} == set(range(11))
    assert {key[0] for key in written if key[2] in levels} == {60, 3600, 86400}
    executor = MigrationExecutor(connection)
    executor.migrate([("ferrox_stats", before)])
    left = set(Rollup.objects.values_list("level", flat=True))
    assert left == set(range(min(levels)))  # the migration's levels went backwards
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    migrated = stored()
    assert migrated.keys() == written.keys()
    for key, values in written.items():
        # The distributions' float sums up to their addition order: the counters, the
        # reasons and the percentiles exactly.
        got = migrated[key]
        assert got[: len(fields)] == values[: len(fields)], key
        for a, b in zip(got[len(fields) :], values[len(fields) :], strict=True):
            assert a.split(";")[::2] == b.split(";")[::2], key
