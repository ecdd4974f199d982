"""Per-(model, route, outcome) cells: labels bounded, values in seconds and tokens, mergeable."""

from __future__ import annotations

import json
import math
import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferrox_stats.core.breakdown import OTHER, Breakdown, Cell
from ferrox_stats.core.distribution import Distribution
from ferrox_stats.core.requests import Record


def record(**fields: Any) -> Record:
    base: dict[str, Any] = {"model": "m", "route": "/v1/chat/completions"}
    return Record(**(base | fields))


def test_a_record_lands_in_its_cell_in_seconds_and_tokens() -> None:
    breakdown = Breakdown()
    breakdown.observe(
        record(
            prompt_tokens=512,
            completion_tokens=129,
            ttft_ms=250.0,
            duration_ms=2000.0,
            decode_ms=1000.0,
        )
    )
    [(key, cell)] = breakdown.cells().items()
    assert key == ("m", "/v1/chat/completions", "ok")
    assert (cell.requests, cell.input_tokens, cell.output_tokens) == (1, 512, 129)
    assert cell.duration.count_at_most(2.0) == 1 and cell.duration.total == 2.0
    assert cell.duration.count_at_most(1.0) == 0
    assert cell.ttft.count_at_most(0.25) == 1 and cell.ttft.count_at_most(0.125) == 0
    # 1 s of decode for 128 tokens after the first.
    assert cell.tpot.total == 1 / 128 and cell.tpot.count_at_most(2.0**-7) == 1
    assert (cell.input.total, cell.output.total) == (512.0, 129.0)


def test_missing_values_are_skipped_never_zero() -> None:
    breakdown = Breakdown()
    breakdown.observe(Record())
    [(key, cell)] = breakdown.cells().items()
    assert key == ("", "", "ok")
    assert cell.requests == 1
    assert (cell.input_tokens, cell.output_tokens) == (0, 0)
    for name in ("duration", "ttft", "tpot", "input", "output"):
        assert getattr(cell, name).count == 0


@pytest.mark.parametrize(
    ("completion_tokens", "decode_ms"), [(None, 10.0), (0, 10.0), (1, 10.0), (5, None)]
)
def test_tpot_needs_a_decode_time_and_two_tokens(
    completion_tokens: int | None, decode_ms: float | None
) -> None:
    breakdown = Breakdown()
    breakdown.observe(record(completion_tokens=completion_tokens, decode_ms=decode_ms))
    [cell] = breakdown.cells().values()
    assert cell.tpot.count == 0


def test_zero_values_are_measurements() -> None:
    breakdown = Breakdown()
    breakdown.observe(record(prompt_tokens=0, completion_tokens=0, ttft_ms=0.0, duration_ms=0.0))
    [cell] = breakdown.cells().values()
    assert (cell.input.zeros, cell.output.zeros, cell.ttft.zeros, cell.duration.zeros) == (
        1,
        1,
        1,
        1,
    )


@pytest.mark.parametrize(
    ("aborted", "error", "outcome"),
    [
        (None, None, "ok"),
        (None, "Timeout", "error"),
        ("client_disconnect", None, "aborted"),
        ("client_disconnect", "CancelledError", "aborted"),
    ],
)
def test_outcome(aborted: str | None, error: str | None, outcome: str) -> None:
    breakdown = Breakdown()
    breakdown.observe(record(aborted=aborted, error=error))
    assert list(breakdown.cells()) == [("m", "/v1/chat/completions", outcome)]


def test_models_and_routes_past_the_caps_count_as_other() -> None:
    breakdown = Breakdown(max_models=2, max_routes=1)
    for model in ["a", "b", "c", "d", "a", None]:
        breakdown.observe(record(model=model, route="/r"))
    breakdown.observe(record(model="a", route="/s"))
    requests = {key: cell.requests for key, cell in breakdown.cells().items()}
    assert requests == {
        ("a", "/r", "ok"): 2,
        ("b", "/r", "ok"): 1,
        (OTHER, "/r", "ok"): 3,  # c, d and the model-less one came after the cap
        ("a", OTHER, "ok"): 1,
    }


def test_cells_is_a_deep_copy() -> None:
    breakdown = Breakdown()
    breakdown.observe(record(duration_ms=10.0))
    copy = breakdown.cells()
    breakdown.observe(record(duration_ms=10.0))
    [cell] = copy.values()
    assert cell.requests == 1 and cell.duration.count == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_caps_must_be_positive_integers(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_models"):
        Breakdown(max_models=bad)
    with pytest.raises(ValueError, match="max_routes"):
        Breakdown(max_routes=bad)


@pytest.mark.parametrize("field", ["duration_ms", "ttft_ms"])
@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_a_record_with_an_impossible_time_is_refused_whole(field: str, value: float) -> None:
    breakdown = Breakdown()
    breakdown.observe(record(prompt_tokens=3, duration_ms=1.0))
    breakdown.observe(record(prompt_tokens=5, **{field: value}))  # never raises
    breakdown.observe(record(prompt_tokens=7, duration_ms=2.0))
    [cell] = breakdown.cells().values()
    assert breakdown.refused == 1
    # The batch's other records still count, and nothing of the refused one does.
    assert (cell.requests, cell.input_tokens, cell.input.count) == (2, 10, 2)
    assert cell.duration.total == 0.003


def test_wire_is_json_and_round_trips() -> None:
    breakdown = Breakdown()
    breakdown.observe(record(prompt_tokens=3, completion_tokens=4, duration_ms=5.0))
    breakdown.observe(record(model="n", error="E"))
    wire = json.loads(json.dumps(breakdown.to_wire()))
    assert [(w["model"], w["outcome"]) for w in wire] == [("m", "ok"), ("n", "error")]
    assert set(wire[0]) == {
        "model",
        "route",
        "outcome",
        "requests",
        "input_tokens",
        "output_tokens",
        "duration",
        "ttft",
        "tpot",
        "input",
        "output",
    }
    merged = Breakdown.merge_wire([wire])
    assert {key: c.to_wire(key) for key, c in merged.items()} == {
        key: c.to_wire(key) for key, c in breakdown.cells().items()
    }


def good_cell(**changes: Any) -> dict[str, Any]:
    return Cell().to_wire(("m", "r", "ok")) | changes


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ([{"not": "a list"}], "list of cells"),
        (["text"], "list of cells"),
        ([[42]], "mapping"),
        ([[good_cell(model=None)]], "model"),
        ([[good_cell(route=7)]], "route"),
        ([[good_cell(outcome="maybe")]], "outcome"),
        ([[good_cell(requests=-1)]], "requests"),
        ([[good_cell(input_tokens=1.5)]], "input_tokens"),
        ([[good_cell(output_tokens=None)]], "output_tokens"),
        ([[{k: v for k, v in good_cell().items() if k != "tpot"}]], "tpot"),
        ([[good_cell(ttft={"zeros": -1, "sum": 0, "counts": {}})]], "zeros"),
    ],
)
def test_merge_wire_refuses_hostile_input(parts: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Breakdown.merge_wire(parts)


@pytest.mark.parametrize("fold_every", [1, 7, 4096])
def test_observe_is_thread_safe(fold_every: int) -> None:
    # Small fold_every: the feeding threads fold (and race to) as they go.
    breakdown = Breakdown(fold_every=fold_every)
    per_thread = 2000

    def feed() -> None:
        for i in range(per_thread):
            breakdown.observe(record(duration_ms=float(i), prompt_tokens=1))

    threads = [threading.Thread(target=feed) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    [cell] = breakdown.cells().values()
    assert cell.requests == cell.duration.count == cell.input_tokens == 4 * per_thread


records = st.builds(
    Record,
    model=st.sampled_from(["a", "b", "c", None]),
    route=st.sampled_from(["/x", "/y", None]),
    prompt_tokens=st.none() | st.integers(0, 10_000),
    completion_tokens=st.none() | st.integers(0, 10_000),
    ttft_ms=st.none() | st.floats(0, 1e6),
    duration_ms=st.none() | st.floats(0, 1e6),
    decode_ms=st.none() | st.floats(0, 1e6),
    aborted=st.none() | st.just("client_disconnect"),
    error=st.none() | st.just("E"),
)


def comparable(cells: dict[tuple[str, str, str], Cell]) -> dict[Any, Any]:
    """Cells as wire dicts, the float sums rounded (summing in another order may differ
    in the last bits)."""
    result = {}
    for key, cell in cells.items():
        wire = cell.to_wire(key)
        for name in ("duration", "ttft", "tpot", "input", "output"):
            wire[name]["sum"] = round(wire[name]["sum"], 6)
        result[key] = wire
    return result


@given(st.lists(records, max_size=40), st.integers(1, 5), st.data())
def test_merging_wires_of_split_records_equals_one_breakdown_of_all(
    items: list[Record], n: int, data: st.DataObject
) -> None:
    # Caps above the label set: which labels count as "other" depends on arrival order.
    whole = Breakdown()
    parts = [Breakdown() for _ in range(n)]
    for item in items:
        whole.observe(item)
        parts[data.draw(st.integers(0, n - 1))].observe(item)
    merged = Breakdown.merge_wire(json.loads(json.dumps(p.to_wire())) for p in parts)
    assert comparable(merged) == comparable(whole.cells())
    assert sum(c.requests for c in merged.values()) == len(items)
    for name in ("duration", "ttft"):
        assert Distribution.merged(getattr(c, name) for c in merged.values()).count == sum(
            getattr(i, f"{name}_ms") is not None for i in items
        )


@pytest.mark.parametrize("tokens", [0, 1, 2, 3, 64, 1000, 16383, 16384, 100_000, 2**40])
def test_token_counts_share_the_distribution_buckets(tokens: int) -> None:
    breakdown = Breakdown()
    breakdown.observe(record(prompt_tokens=tokens, completion_tokens=tokens))
    [cell] = breakdown.cells().values()
    expected = Distribution()
    expected.add(tokens)
    assert cell.input == expected
    assert cell.output == expected


@pytest.mark.parametrize("tokens", [-1, 2.5, 1e9, "12"])
def test_a_record_with_a_token_count_that_is_not_a_count_is_refused(tokens: Any) -> None:
    breakdown = Breakdown()
    breakdown.observe(record(prompt_tokens=tokens, duration_ms=1.0))
    assert breakdown.cells() == {}
    assert breakdown.refused == 1


def test_records_are_folded_as_the_queue_reaches_fold_every() -> None:
    # Nobody reads: the request that finds fold_every records queued folds them.
    breakdown = Breakdown(fold_every=3)
    for _ in range(2):
        breakdown.observe(record())
    assert len(breakdown._queue) == 2
    breakdown.observe(record())
    assert (len(breakdown._queue), breakdown.request_folds) == (0, 1)
    breakdown.observe(record())
    assert [cell.requests for cell in breakdown.cells().values()] == [4]
    assert len(breakdown._queue) == 0


def test_once_a_reader_folds_requests_leave_the_queue_to_readers_up_to_max_queued() -> None:
    breakdown = Breakdown(fold_every=3, max_queued=10)
    breakdown.to_wire()  # a reader (the heartbeat) folded
    for _ in range(9):
        breakdown.observe(record())
    assert (len(breakdown._queue), breakdown.request_folds) == (9, 0)
    breakdown.cells()
    for _ in range(10):
        breakdown.observe(record())
    # The reader fell behind by max_queued: the request folded, as a last resort...
    assert (len(breakdown._queue), breakdown.request_folds) == (0, 1)
    # ... and until a reader folds again, requests fold every fold_every.
    for _ in range(3):
        breakdown.observe(record())
    assert (len(breakdown._queue), breakdown.request_folds) == (0, 2)
    [cell] = breakdown.cells().values()
    assert cell.requests == 22


@pytest.mark.parametrize(
    ("fold_every", "max_queued", "expected"), [(5, 3, 5), (5, 5, 5), (1, 9, 9)]
)
def test_max_queued_is_at_least_fold_every(fold_every: int, max_queued: int, expected: int) -> None:
    assert Breakdown(fold_every=fold_every, max_queued=max_queued).max_queued == expected


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_fold_bounds_must_be_positive_integers(bad: Any) -> None:
    with pytest.raises(ValueError, match="fold_every"):
        Breakdown(fold_every=bad)
    with pytest.raises(ValueError, match="max_queued"):
        Breakdown(max_queued=bad)


def test_labels_go_to_the_first_models_in_arrival_order_within_a_batch() -> None:
    breakdown = Breakdown(max_models=2)
    for model, error in [("c", "E"), ("a", None), ("b", None), ("c", None)]:
        breakdown.observe(record(model=model, error=error))
    assert sorted(breakdown.cells()) == [
        ("a", "/v1/chat/completions", "ok"),
        ("c", "/v1/chat/completions", "error"),
        ("c", "/v1/chat/completions", "ok"),
        (OTHER, "/v1/chat/completions", "ok"),
    ]


hostile_records = st.builds(
    Record,
    model=st.sampled_from(["a", "b"]),
    prompt_tokens=st.none() | st.integers(-2, 10_000),
    completion_tokens=st.none() | st.integers(0, 10_000) | st.just(2.5),
    duration_ms=st.none() | st.floats(0, 1e6) | st.sampled_from([-1.0, math.nan, math.inf]),
    decode_ms=st.none() | st.floats(0, 1e6),
    error=st.none() | st.just("E"),
)


@pytest.mark.parametrize("fold_every", [1, 2, 5, 4096])
@given(items=st.lists(records | hostile_records, max_size=30))
def test_folding_in_batches_of_any_size_counts_the_same(
    fold_every: int, items: list[Record]
) -> None:
    one_by_one = Breakdown(fold_every=1)
    batched = Breakdown(fold_every=fold_every)
    for item in items:
        one_by_one.observe(item)
        batched.observe(item)
    assert comparable(batched.cells()) == comparable(one_by_one.cells())
    assert batched.refused == one_by_one.refused


# One step of a process: a request finishes (a record), or a reader reads the cells.
READ = None
steps = st.lists(st.none() | records, max_size=60)


@given(steps, st.integers(1, 4), st.integers(1, 8))
def test_cells_after_any_interleaving_of_observe_and_read_are_those_of_all_records(
    items: list[Record | None], fold_every: int, max_queued: int
) -> None:
    breakdown = Breakdown(fold_every=fold_every, max_queued=max_queued)
    reference = Breakdown(fold_every=1)  # each record folded as it comes
    seen: list[Record] = []
    for item in items:
        if item is READ:
            # What a reader sees counts every record observed so far, exactly once.
            assert comparable(breakdown.cells()) == comparable(reference.cells())
            assert len(breakdown._queue) == 0
        else:
            breakdown.observe(item)
            reference.observe(item)
            seen.append(item)
        # Bounded whoever reads: at most max_queued wait (fold_every until one reads).
        assert len(breakdown._queue) < breakdown.max_queued
    assert comparable(breakdown.cells()) == comparable(reference.cells())
    assert sum(cell.requests for cell in breakdown.cells().values()) == len(seen)


@given(st.lists(st.none() | records | hostile_records, max_size=40))
def test_impossible_values_are_refused_and_counted_whoever_folds(
    items: list[Record | None],
) -> None:
    breakdown = Breakdown(fold_every=2, max_queued=5)
    reference = Breakdown(fold_every=1)
    for item in items:
        if item is READ:
            breakdown.to_wire()
        else:
            breakdown.observe(item)
            reference.observe(item)
    assert comparable(breakdown.cells()) == comparable(reference.cells())
    assert breakdown.refused == reference.refused


@pytest.mark.parametrize(("fold_every", "max_queued"), [(1, 1), (7, 50), (4096, 16384)])
def test_observe_and_readers_on_many_threads_count_each_record_once(
    fold_every: int, max_queued: int
) -> None:
    breakdown = Breakdown(fold_every=fold_every, max_queued=max_queued)
    per_thread = 2000
    done = threading.Event()
    reads = []

    def feed() -> None:
        for i in range(per_thread):
            breakdown.observe(record(duration_ms=float(i), prompt_tokens=1))

    def read() -> None:
        # The heartbeat and scrapes: read (and fold) while requests finish.
        while not done.is_set():
            reads.append(sum(cell.requests for cell in breakdown.cells().values()))
            breakdown.to_wire()

    feeders = [threading.Thread(target=feed) for _ in range(4)]
    reader = threading.Thread(target=read)
    reader.start()
    for thread in feeders:
        thread.start()
    for thread in feeders:
        thread.join()
    done.set()
    reader.join()
    [cell] = breakdown.cells().values()
    assert cell.requests == cell.duration.count == cell.input_tokens == 4 * per_thread
    assert reads == sorted(reads)  # a reader never sees a record counted then uncounted
