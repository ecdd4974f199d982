"""The fleet document (``ferrox_stats.fleet``) from heartbeat rows, at an injected now."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrox_stats import fleet, fleet_rows
from ferrox_stats.core.distribution import RELATIVE_ERROR, Distribution
from ferrox_stats.core.summary import nearest_rank
from ferrox_stats.fleet import LIVE, LOST, STALE, STOPPED, instance_state
from ferrox_stats.models import Instance
from tests.states import BASE_MS, archive_counts, save, state_doc

NOW = BASE_MS + 3_600_000
LOST_S = 30.0


def compute(instance: str | None = None, now_ms: int = NOW) -> dict[str, Any]:
    return fleet.compute(
        now_ms=now_ms, using="default", lost_s=LOST_S, heartbeat_s=2.0, instance=instance
    )


# -- states from ages ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("age_ms", "stopped", "expected"),
    [
        (0, False, LIVE),
        (6_000, False, LIVE),  # three heartbeats of 2 s
        (6_001, False, STALE),
        (30_000, False, STALE),
        (30_001, False, LOST),
        (86_400_000, False, LOST),
        (-5_000, False, LIVE),  # a clock ahead of ours
        (0, True, STOPPED),
        (86_400_000, True, STOPPED),
    ],
)
def test_the_state_follows_the_age_of_the_last_heartbeat(
    age_ms: int, stopped: bool, expected: str
) -> None:
    assert instance_state(NOW - age_ms, 2.0, stopped, NOW, LOST_S) == expected


def test_an_instance_is_judged_by_the_interval_it_promised() -> None:
    # A slow heartbeat (10 s) is live at 25 s; a fast one (2 s) is stale by then.
    assert instance_state(NOW - 25_000, 10.0, False, NOW, 60.0) == LIVE
    assert instance_state(NOW - 25_000, 2.0, False, NOW, 60.0) == STALE


# -- the document -------------------------------------------------------------------------


def _durations(values: list[float]) -> list[dict[str, Any]]:
    """One breakdown cell holding these durations (seconds) and nothing else measured."""
    duration = Distribution()
    for value in values:
        duration.add(value)
    empty = Distribution().to_wire()
    return [
        {
            "model": "llama",
            "route": "/v1/chat/completions",
            "outcome": "ok",
            "requests": len(values),
            "input_tokens": 0,
            "output_tokens": 0,
            "duration": duration.to_wire(),
            "ttft": empty,
            "tpot": empty,
            "input": empty,
            "output": empty,
        }
    ]


@pytest.fixture
def a_fleet() -> dict[str, list[float]]:
    """Two live instances, one stale, one lost, one stopped; returns the live durations."""
    fast = [0.1 + i / 1000 for i in range(100)]
    slow = [2.0 + i / 100 for i in range(10)]
    save(
        state_doc(
            "gpu-1/100/aaa",
            at_ms=NOW - 1_000,
            active=2,
            completed=100,
            aborts={"client_disconnect": 3},
            prompt_tokens=1000,
            completion_tokens=5000,
            decode=(500.0, 5.0, 50),
            prefill=(100.0, 5.0, 10),
            breakdown=_durations(fast),
            archive=archive_counts(accepted=100, persisted=95, pending=5),
        )
    )
    save(
        state_doc(
            "gpu-2/200/bbb",
            at_ms=NOW - 3_000,
            active=1,
            completed=10,
            aborts={"client_disconnect": 1, "upstream_timeout": 2},
            prompt_tokens=200,
            completion_tokens=700,
            decode=(300.0, 4.0, 30),
            prefill=(0.0, 0.0, 0),
            breakdown=_durations(slow),
            archive=archive_counts(accepted=10, persisted=10),
        )
    )
    save(
        state_doc(
            "gpu-3/300/ccc",
            at_ms=NOW - 10_000,
            completed=999,
            breakdown=_durations([50.0] * 999),
            archive=archive_counts(accepted=999, pending=999),
        )
    )
    save(
        state_doc(
            "gpu-4/400/ddd",
            at_ms=NOW - 120_000,
            completed=77,
            archive=archive_counts(accepted=77, persisted=65, pending=12),
        )
    )
    save(
        state_doc(
            "gpu-5/500/eee",
            at_ms=NOW - 20_000,
            stopped=True,
            completed=40,
            archive=archive_counts(accepted=40, persisted=33, dropped={"shutdown_deadline": 7}),
        )
    )
    return {"fast": fast, "slow": slow}


@pytest.mark.django_db
def test_totals_sum_the_live_instances_exactly(a_fleet: Any) -> None:
    document = compute()
    totals = document["totals"]
    assert totals["instances"] == 2
    assert (totals["active"], totals["completed"]) == (3, 110)
    assert totals["aborts"] == {"client_disconnect": 4, "upstream_timeout": 2}
    assert (totals["prompt_tokens_total"], totals["completion_tokens_total"]) == (1200, 5700)
    # Amounts over the longest span: (500 + 300) / 5, never the mean of 100 and 75.
    assert totals["decode_tps"] == pytest.approx(160.0)
    assert totals["prefill_tps"] == pytest.approx(20.0)
    assert totals["archive"] == {
        "accepted": 110,
        "persisted": 105,
        "pending": 5,
        "dropped": {},
        "dead_lettered": 0,
    }
    assert (document["scope"], document["at_ms"], document["heartbeat_s"]) == ("fleet", NOW, 2.0)
    assert document["relative_error"] == RELATIVE_ERROR


@pytest.mark.django_db
def test_each_instance_is_listed_newest_first_with_its_state(a_fleet: Any) -> None:
    entries = compute()["instances"]
    assert [(e["instance"], e["state"]) for e in entries] == [
        ("gpu-1/100/aaa", LIVE),
        ("gpu-2/200/bbb", LIVE),
        ("gpu-3/300/ccc", STALE),
        ("gpu-5/500/eee", STOPPED),
        ("gpu-4/400/ddd", LOST),
    ]
    first = entries[0]
    assert first == {
        "instance": "gpu-1/100/aaa",
        "replica": "gpu-1",
        "host": "host-gpu-1",
        "pid": 100,
        "started_ms": NOW - 1_000 - 60_000,
        "uptime_s": 60.0,
        "last_seen_ms": NOW - 1_000,
        "age_s": 1.0,
        "state": LIVE,
        "active": 2,
        "completed": 100,
        "decode_tps": pytest.approx(100.0),
        "prefill_tps": pytest.approx(20.0),
        "pending": 5,
        "dropped": {},
        "not_archived": None,
    }


@pytest.mark.django_db
def test_a_stale_instance_is_named_and_never_summed(a_fleet: Any) -> None:
    document = compute()
    assert document["stale"] == ["gpu-3/300/ccc"]
    # Its 999 requests of 50 s are in neither the counters nor the percentiles.
    assert document["totals"]["completed"] == 110
    assert document["totals"]["latency"]["duration_s"]["count"] == 110


@pytest.mark.django_db
def test_a_lost_instance_shows_what_it_had_not_archived(a_fleet: Any) -> None:
    document = compute()
    assert document["lost"] == [
        {"instance": "gpu-4/400/ddd", "last_seen_ms": NOW - 120_000, "not_archived": 12}
    ]
    [lost] = [e for e in document["instances"] if e["state"] == LOST]
    assert (lost["pending"], lost["not_archived"]) == (12, 12)


@pytest.mark.django_db
def test_a_shutdown_that_dropped_records_shows_them(a_fleet: Any) -> None:
    [stopped] = [e for e in compute()["instances"] if e["state"] == STOPPED]
    assert stopped["dropped"] == {"shutdown_deadline": 7}
    assert stopped["not_archived"] is None  # it said exactly what it dropped


@pytest.mark.django_db
def test_percentiles_come_from_the_merged_distributions(a_fleet: Any) -> None:
    values = sorted(a_fleet["fast"] + a_fleet["slow"])
    latency = compute()["totals"]["latency"]["duration_s"]
    for name, percentile in (("p50", 50), ("p95", 95), ("p99", 99)):
        exact = nearest_rank(values, percentile)
        assert latency[name] == pytest.approx(exact, rel=RELATIVE_ERROR), name
    # Averaging the instances' p95s would say about 1.1 s; 110 requests say 2 s.
    assert latency["p95"] > 2.0 * (1 - RELATIVE_ERROR)


@pytest.mark.django_db
def test_instance_narrows_the_totals_to_one_instance_in_any_state(a_fleet: Any) -> None:
    document = compute(instance="gpu-3/300/ccc")
    assert document["instance"] == "gpu-3/300/ccc"
    assert document["totals"]["instances"] == 1
    assert document["totals"]["completed"] == 999
    assert len(document["instances"]) == 5  # the list stays whole
    with pytest.raises(fleet.UnknownInstance):
        compute(instance="gpu-9/900/zzz")


@pytest.mark.django_db
def test_an_empty_fleet() -> None:
    document = compute()
    assert document["instances"] == document["stale"] == document["lost"] == []
    totals = document["totals"]
    assert (totals["instances"], totals["completed"], totals["archive"]) == (0, 0, None)
    assert totals["latency"]["duration_s"] == {"count": 0, "p50": None, "p95": None, "p99": None}


@pytest.mark.django_db
def test_a_fleet_without_archives_has_null_archive_totals() -> None:
    save(state_doc("gpu-1/100/aaa", at_ms=NOW, completed=3))
    document = compute()
    assert document["totals"]["archive"] is None
    assert document["instances"][0]["pending"] is None


# -- one answer per heartbeat interval ----------------------------------------------------


@pytest.mark.django_db
def test_repeated_calls_within_the_cache_window_agree(a_fleet: Any) -> None:
    def read(monotonic: float) -> dict[str, Any]:
        return fleet.fleet_document(
            now_ms=NOW, monotonic=monotonic, using="default", lost_s=LOST_S, heartbeat_s=2.0
        )

    first = read(1000.0)
    # A heartbeat lands; within a quarter interval the same document is served, unread.
    save(state_doc("gpu-1/100/aaa", at_ms=NOW, completed=101))
    with CaptureQueriesContext(connection) as queries:
        assert read(1000.0 + 0.49) == first
    assert queries.captured_queries == []
    assert read(1000.0 + 0.5)["totals"]["completed"] == 111


@pytest.mark.django_db
def test_a_row_that_is_not_a_state_document_is_skipped_and_counted(a_fleet: Any) -> None:
    broken = state_doc("gpu-6/600/fff", at_ms=NOW)
    save(broken)
    Instance.objects.filter(instance="gpu-6/600/fff").update(state='["not", "a", "document"]')
    save({**state_doc("gpu-7/700/ggg", at_ms=NOW), "version": 99})  # another release's
    document = compute()
    assert document["unreadable"] == 2
    assert document["totals"]["completed"] == 110
    assert "gpu-6/600/fff" not in [e["instance"] for e in document["instances"]]


def _packed_row(instance: str, **latency: Any) -> None:
    """A live row of ``completed=5`` whose stored latency heads are edited by hand."""
    save(state_doc(instance, at_ms=NOW, completed=5, breakdown=_durations([0.5, 1.0])))
    row = Instance.objects.get(instance=instance)
    state = json.loads(row.state)
    state["latency"]["duration_s"].update(latency)
    Instance.objects.filter(instance=instance).update(state=json.dumps(state))


HOSTILE_STATES = [
    "not json at all",
    "[" * 100_000 + "]" * 100_000,  # deeper than the JSON decoder goes
    "null",
    '"a string"',
    "{}",
]


@pytest.mark.django_db
@pytest.mark.parametrize("text", HOSTILE_STATES)
def test_a_hand_edited_state_never_fails_the_fleet(a_fleet: Any, text: str) -> None:
    save(state_doc("gpu-6/600/fff", at_ms=NOW, completed=1))
    Instance.objects.filter(instance="gpu-6/600/fff").update(state=text)
    document = compute()
    assert document["unreadable"] == 1
    assert document["totals"]["completed"] == 110


@pytest.mark.django_db
@pytest.mark.parametrize(
    "edit",
    [
        {"offset": 10**9},  # a span beyond any float's buckets: refused, never allocated
        {"offset": -(10**9)},
        {"offset": "3"},
        {"buckets": 10**9},
        {"buckets": -1},
        {"buckets": True},
        {"zeros": -1},
        {"zeros": 1.5},
        {"sum": "NaN"},
        {"sum": -1.0},
        {"sum": None},
    ],
)
def test_a_hand_edited_latency_head_is_skipped_and_counted(a_fleet: Any, edit: Any) -> None:
    _packed_row("gpu-6/600/fff", **edit)
    document = compute()
    assert document["unreadable"] == 1
    assert document["totals"]["completed"] == 110
    assert document["totals"]["latency"]["duration_s"]["count"] == 110
    # It is still listed: only its sums are left out.
    assert "gpu-6/600/fff" in [e["instance"] for e in document["instances"]]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "blob",
    [
        lambda n: b"",  # fewer bytes than the buckets it claims
        lambda n: b"\x01\x00" * n + b"\x00",  # one byte more
        lambda n: b"\x01" * n,  # lanes of 1 byte: no headroom at all
        lambda n: b"\x01" + b"\x00" * (9 * n - 1),  # lanes of 9 bytes
        lambda n: b"\x01\x00\x00\x00" * (n - 1) + b"\x01\x00\x00\x01",  # top byte used
        lambda n: b"\x01" + b"\x00" * (8 * n - 2) + b"\x01",  # nor in 8 bytes
    ],
)
def test_hand_edited_counts_are_skipped_and_counted(a_fleet: Any, blob: Any) -> None:
    _packed_row("gpu-6/600/fff")
    row = Instance.objects.get(instance="gpu-6/600/fff")
    buckets = sum(part["buckets"] for part in json.loads(row.state)["latency"].values())
    Instance.objects.filter(instance="gpu-6/600/fff").update(latency_counts=blob(buckets))
    document = compute()
    assert document["unreadable"] == 1
    assert document["totals"]["completed"] == 110


@pytest.mark.django_db
@pytest.mark.parametrize(
    "counts",
    [[1, "2"], [1, -2], [True], [1.0], [2**63], "[1, 2]", None],
)
def test_hand_edited_count_lists_are_skipped_and_counted(a_fleet: Any, counts: Any) -> None:
    doc = state_doc("gpu-6/600/fff", at_ms=NOW, completed=5)
    row = fleet_rows.row_state(doc)
    row["latency"]["duration_s"] = {"zeros": 0, "sum": 1.0, "offset": 0, "counts": counts}
    save(doc)
    Instance.objects.filter(instance="gpu-6/600/fff").update(
        state=json.dumps(row), latency_counts=None
    )
    document = compute()
    assert document["unreadable"] == 1
    assert document["totals"]["completed"] == 110


def _window(**fields: Any) -> dict[str, Any]:
    return {"amount": 1.0, "span_s": 1.0, "samples": 1, "window_s": 5.0, **fields}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "edit",
    [
        {"serving": {"active": 1}},
        {"serving": "busy"},
        {"rates": {"decode": {"amount": "x"}}},
        {"archive": {"accepted": [1]}},
        {"version": True},
        {"version": 99},
        # Numbers the answer could not carry (JSON has no Infinity or NaN) or sum.
        {"rates": {"decode": _window(amount=1e308), "prefill": _window()}},
        {"rates": {"decode": _window(span_s=-1.0), "prefill": _window()}},
        {"rates": {"decode": _window(samples=0.5), "prefill": _window()}},
        {"archive": {"accepted": 1.5, "persisted": 0, "pending": 0, "dead_lettered": 0}},
        {
            "archive": {
                "accepted": 1,
                "persisted": 0,
                "pending": 0,
                "dead_lettered": 0,
                "dropped": {"closed": -1},
            }
        },
    ],
)
def test_hand_edited_counters_are_skipped_and_counted(a_fleet: Any, edit: Any) -> None:
    save(state_doc("gpu-6/600/fff", at_ms=NOW, completed=5))
    row = Instance.objects.get(instance="gpu-6/600/fff")
    state = {**json.loads(row.state), **edit}
    Instance.objects.filter(instance="gpu-6/600/fff").update(state=json.dumps(state))
    document = compute()
    assert document["unreadable"] == 1
    assert document["totals"]["completed"] == 110
    assert document["totals"]["aborts"] == {"client_disconnect": 4, "upstream_timeout": 2}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('"uptime_s":60.0', '"uptime_s":1e999'),  # Python reads it as inf
        ('"uptime_s":60.0', '"uptime_s":NaN'),
        ('"completed":5', '"completed":5e0'),
        ('"completed":5', '"completed":' + "9" * 5000),  # more digits than int() takes
        ('"at_ms":1767229199000', '"at_ms":' + "9" * 400),
    ],
)
def test_numbers_json_cannot_answer_are_skipped_and_counted(
    a_fleet: Any, old: str, new: str
) -> None:
    save(state_doc("gpu-6/600/fff", at_ms=NOW - 1_000, completed=5))
    text = Instance.objects.get(instance="gpu-6/600/fff").state
    assert old in text
    Instance.objects.filter(instance="gpu-6/600/fff").update(state=text.replace(old, new))
    document = compute()
    assert document["unreadable"] == 1
    assert document["totals"]["completed"] == 110
    json.dumps(document, allow_nan=False)  # what the API renders


@pytest.mark.django_db
def test_a_rate_over_a_vanishing_span_stays_a_number(a_fleet: Any) -> None:
    save(state_doc("gpu-6/600/fff", at_ms=NOW, decode=(1e300, 1e-300, 1)))
    document = compute()
    assert document["unreadable"] == 0
    json.dumps(document, allow_nan=False)


# -- the row's storage --------------------------------------------------------------------


def _distribution(values: list[float]) -> Distribution:
    distribution = Distribution()
    for value in values:
        distribution.add(value)
    return distribution


def _with_count(distribution: Distribution, count: int) -> Distribution:
    """The distribution with its first bucket's count set to ``count``."""
    if distribution.counts:
        distribution.counts[min(distribution.counts)] = count
    return distribution


values = st.lists(
    st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False), max_size=30
)
# Counts that take a row to lanes of 2 to 8 bytes, or keep it in lists.
big_counts = st.sampled_from([1, 255, 256, 2**24 - 1, 2**24, 2**40, 2**56 - 1, 2**56, 2**63 - 2])


# A row from the subnormals to 1e6 spans ~34 000 buckets: up to ~70 ms an example on
# an idle machine, so no deadline (the shared test machine missed the default 200 ms).
@settings(deadline=None)
@given(st.lists(st.tuples(values, big_counts), max_size=6))
def test_packed_rows_merge_exactly_and_give_the_distributions_percentiles(
    rows: list[tuple[list[float], int]],
) -> None:
    distributions = [_with_count(_distribution(part), count) for part, count in rows]
    parts = []
    for distribution in distributions:
        wire = fleet_rows.dense(distribution.to_wire())
        doc = {"latency": dict.fromkeys(fleet_rows.LATENCY, wire)}
        text, blob = fleet_rows.pack(doc)
        parts.append(fleet_rows.read_latency(json.loads(text), blob)[0])
    zeros, offset, counts = fleet_rows.merge_parts(parts)
    expected = Distribution.merged(distributions)
    assert zeros == expected.zeros
    assert {offset + i: n for i, n in enumerate(counts) if n} == expected.counts
    # Percentiles from the merged counts are the Distribution's own.
    assert fleet_rows.summary(zeros, offset, counts) == {
        "count": expected.count,
        **{f"p{p}": expected.quantile(p) for p in fleet_rows.PERCENTILES},
    }


@pytest.mark.parametrize(
    ("count", "lane"),
    [
        (1, 2),
        (255, 2),
        (256, 3),
        (2**16, 4),
        (2**24 - 1, 4),
        (2**24, 5),
        (2**56 - 1, 8),
        (2**56, None),
    ],
)
def test_a_row_packs_its_counts_in_the_narrowest_lane_with_headroom(
    count: int, lane: int | None
) -> None:
    wire = fleet_rows.dense(_with_count(_distribution([0.5, 1.0, 2.0]), count).to_wire())
    text, blob = fleet_rows.pack({"latency": dict.fromkeys(fleet_rows.LATENCY, wire)})
    if lane is None:
        assert blob is None  # the lists stay in the JSON (form D)
        assert json.loads(text)["latency"]["duration_s"] == wire
    else:
        assert blob is not None and len(blob) == 3 * len(wire["counts"]) * lane
        assert fleet_rows.read_document(text, blob)["latency"]["duration_s"] == wire


def test_headroom_covers_every_row_the_fleet_reads() -> None:
    assert fleet.MAX_INSTANCES <= fleet_rows.HEADROOM
    # More parts than the headroom allows are merged through lists, still exactly.
    part = fleet_rows.Part(0, 10, 1, 3, (2**16 - 1).to_bytes(3, "little"))
    _, offset, counts = fleet_rows.merge_parts([part] * (fleet_rows.HEADROOM + 1))
    assert (offset, list(counts)) == (10, [(2**16 - 1) * (fleet_rows.HEADROOM + 1)])


@given(st.lists(values, max_size=5))
def test_merging_on_the_wire_equals_merging_distributions(parts: list[list[float]]) -> None:
    distributions = [_distribution(part) for part in parts]
    wires = [d.to_wire() for d in distributions]
    merged = Distribution.from_wire(fleet_rows.merge_wires(wires))
    # The dense form merges to the same distribution.
    dense = [fleet_rows.dense(w) for w in wires]
    assert Distribution.from_wire(fleet_rows.merge_dense(dense)) == merged
    expected = Distribution.merged(distributions)
    assert (merged.count, merged.zeros, merged.counts) == (
        expected.count,
        expected.zeros,
        expected.counts,
    )
    assert merged.total == pytest.approx(expected.total)


def test_a_row_keeps_the_latency_merged_across_cells_not_the_breakdown() -> None:
    # State version 1: only the full-resolution breakdown; its cells are merged.
    doc = state_doc("gpu-1/1/a", breakdown=_durations([0.5, 1.0]) + _other_cell([2.0]))
    row = fleet_rows.row_state(doc)
    assert "breakdown" not in row
    assert Distribution.from_wire(fleet_rows.merge_dense([row["latency"]["duration_s"]])) == (
        _distribution([0.5, 1.0, 2.0])
    )
    assert fleet.latency([fleet.summand(row)]) == fleet.latency([fleet.summand(doc)])


def test_a_version_2_row_keeps_the_documents_own_latency() -> None:
    latency = {
        name: fleet_rows.dense(_distribution([0.25 * (i + 1)]).to_wire())
        for i, name in enumerate(fleet_rows.LATENCY)
    }
    # Its breakdown is in octave form (for /metrics); the row never reads it.
    doc = {**state_doc("gpu-1/1/a"), "version": 2, "resolution": "octave", "latency": latency}
    doc["breakdown"] = [{"model": "m", "duration": {"offset": 0, "counts": [1]}}]
    row = fleet_rows.row_state(doc)
    assert "breakdown" not in row and row["latency"] == latency
    text, blob = fleet_rows.pack(doc)
    assert fleet_rows.read_document(text, blob) == row
    summed = fleet.latency([fleet.summand(json.loads(text), blob)])
    half = _distribution([0.5]).quantile(50)  # the midpoint of 0.5's bucket
    assert summed["ttft_s"] == {"count": 1, "p50": half, "p95": half, "p99": half}


def _other_cell(values: list[float]) -> list[dict[str, Any]]:
    [cell] = _durations(values)
    return [{**cell, "model": "qwen", "outcome": "error"}]


def test_a_row_whose_buckets_span_more_than_any_distribution_is_refused() -> None:
    far = {"zeros": 0, "sum": 1.0, "offset": 10**9, "counts": [1]}
    near = {"zeros": 0, "sum": 1.0, "offset": 0, "counts": [1]}
    with pytest.raises(ValueError, match="span"):
        fleet_rows.merge_dense([near, far])


@pytest.mark.django_db
def test_rows_of_the_previous_release_and_of_this_one_are_summed_alike() -> None:
    fast = [0.1 + i / 1000 for i in range(100)]
    slow = [2.0 + i / 100 for i in range(10)]
    save(state_doc("gpu-1/100/aaa", at_ms=NOW, completed=100, breakdown=_durations(fast)))
    # The previous release's row: state version 1, jsonb with the counts as lists.
    old = fleet_rows.row_state(
        state_doc("gpu-2/200/bbb", at_ms=NOW, completed=10, breakdown=_durations(slow))
    )
    save(state_doc("gpu-2/200/bbb", at_ms=NOW))
    Instance.objects.filter(instance="gpu-2/200/bbb").update(
        state=json.dumps({**old, "breakdown": []}), latency_counts=None
    )
    document = compute()
    assert document["unreadable"] == 0
    assert document["totals"]["completed"] == 110
    latency = document["totals"]["latency"]["duration_s"]
    expected = _distribution(fast + slow)
    assert latency == {"count": 110, **{f"p{p}": expected.quantile(p) for p in (50, 95, 99)}}


@pytest.mark.django_db
def test_the_admins_view_of_a_row_is_its_document_with_the_counts_as_lists() -> None:
    doc = state_doc("gpu-1/100/aaa", at_ms=NOW, completed=3, breakdown=_durations([0.5]))
    save(doc)
    row = Instance.objects.get()
    assert isinstance(row.latency_counts, bytes | memoryview)
    assert row.document() == fleet_rows.row_state(doc)
