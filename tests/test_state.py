"""The process's state document and the sum of several: counters add, rates recombine
from amounts and spans, percentiles come from merged distributions."""

from __future__ import annotations

import json
import os
import socket
from typing import Any

import pytest

from ferrox_stats.archive.writer import ArchiveHealth
from ferrox_stats.core.distribution import RELATIVE_ERROR, Distribution
from ferrox_stats.core.requests import Record
from ferrox_stats.live import Recorder
from ferrox_stats.state import (
    STATE_VERSION,
    latency,
    latency_of,
    merge_states,
    merged_cells,
    process_state,
)
from tests.conftest import FakeClock


class HealthySink:
    """A sink that keeps nothing and reports the health it is given."""

    def __init__(self, health: ArchiveHealth) -> None:
        self._health = health

    def submit(self, seq: int, record: Record) -> None:
        pass

    def health(self) -> ArchiveHealth:
        return self._health


def make_recorder(clock: FakeClock, **kwargs: Any) -> Recorder:
    return Recorder(replica="r1", clock=clock, instance="r1/1/abc", **kwargs)


def serve(recorder: Recorder, duration_ms: float, **fields: Any) -> None:
    recorder.ingested(
        Record(
            model="m",
            route="/v1/chat/completions",
            duration_ms=duration_ms,
            ttft_ms=duration_ms / 2,
            **fields,
        )
    )


def test_document_shape_and_values(clock: FakeClock) -> None:
    recorder = make_recorder(
        clock,
        sink=HealthySink(ArchiveHealth(3, 2, 1, 1, {"queue_full": 4}, 5)),
    )
    clock.advance(2.0)
    with recorder.track(route="/v1/completions", model="m") as tracker:
        clock.advance(0.5)
        tracker.first_token()
        clock.advance(0.5)
        tracker.finish(status=200, prompt_tokens=100, completion_tokens=11)
    recorder.observe_gauges(pool_used=1, pool_total=4)
    recorder.observe_gauges(queue_depth=-1)  # refused
    clock.advance(0.25)

    state = process_state(recorder)

    assert json.loads(json.dumps(state)) == state
    assert {k: state[k] for k in ("version", "instance", "replica", "stopped")} == {
        "version": STATE_VERSION,
        "instance": "r1/1/abc",
        "replica": "r1",
        "stopped": False,
    }
    assert (state["host"], state["pid"]) == (socket.gethostname(), os.getpid())
    assert state["started_ms"] == 1_767_225_600_000
    assert state["at_ms"] == 1_767_225_603_250
    assert state["uptime_s"] == 3.25
    assert state["serving"] == {
        "active": 0,
        "completed": 1,
        "aborts": {},
        "prompt_tokens_total": 100,
        "completion_tokens_total": 11,
    }
    assert state["rates"]["decode"] == {
        "amount": 11.0,
        "span_s": 1.0,  # 0.25 s observed, floored at min_span_s
        "samples": 1,
        "window_s": 5.0,
        "per_second": 11.0,
    }
    [cell] = state["breakdown"]
    assert (cell["model"], cell["route"], cell["outcome"], cell["requests"]) == (
        "m",
        "/v1/completions",
        "ok",
        1,
    )
    # Version 2: the cells at power-of-two resolution, the times merged at full resolution.
    assert state["resolution"] == "octave"
    assert cell["duration"] == {"zeros": 0, "sum": 1.0, "offset": 0, "counts": [1]}  # (0.5, 1]
    assert cell["ttft"] == {"zeros": 0, "sum": 0.5, "offset": -1, "counts": [1]}  # (0.25, 0.5]
    [full] = recorder.breakdown.cells().values()
    assert state["latency"] == {
        "duration_s": full.duration.dense(),
        "ttft_s": full.ttft.dense(),
        "tpot_s": full.tpot.dense(),
    }
    assert state["gauges"] == {
        "pool_occupancy": {"value": 0.25, "age_s": 0.25},
        "queue_depth": None,
        "refused": 1,
    }
    assert state["recorded_total"] == 1
    assert state["sink_errors"] == 0
    assert state["breakdown_refused"] == 0
    assert state["archive"] == {
        "accepted": 3,
        "persisted": 2,
        "duplicates": 1,
        "pending": 1,
        "dead_lettered": 5,
        "dropped": {"queue_full": 4},
    }
    assert process_state(recorder, stopped=True)["stopped"] is True


def test_without_an_archive_it_is_null(clock: FakeClock) -> None:
    assert process_state(make_recorder(clock))["archive"] is None


def test_merge_sums_counters_and_archives(clock: FakeClock) -> None:
    a = make_recorder(clock, sink=HealthySink(ArchiveHealth(3, 2, 0, 1, {"queue_full": 1}, 0)))
    b = make_recorder(clock, sink=HealthySink(ArchiveHealth(5, 5, 1, 0, {"shutdown": 2}, 1)))
    serve(a, 10.0, prompt_tokens=7)
    serve(a, 10.0, aborted="timeout")
    serve(b, 20.0, error="E", completion_tokens=3)
    b.ingested(Record(duration_ms=-5.0))  # refused by the breakdown
    states = [process_state(a), process_state(b), process_state(make_recorder(clock))]

    merged = merge_states(json.loads(json.dumps(states)))

    assert json.loads(json.dumps(merged)) == merged
    assert merged["instances"] == 3
    assert merged["serving"] == {
        "active": 0,
        "completed": 3,
        "aborts": {"error": 1, "timeout": 1},
        "prompt_tokens_total": 7,
        "completion_tokens_total": 3,
    }
    assert merged["recorded_total"] == 4
    assert merged["breakdown_refused"] == 1
    assert merged["archive"] == {
        "accepted": 8,
        "persisted": 7,
        "duplicates": 1,
        "pending": 1,
        "dead_lettered": 1,
        "dropped": {"queue_full": 1, "shutdown": 2},
    }
    assert [(c["model"], c["outcome"], c["requests"]) for c in merged["breakdown"]] == [
        ("m", "aborted", 1),
        ("m", "error", 1),
        ("m", "ok", 1),
    ]
    for key in ("instance", "replica", "host", "pid", "gauges", "stopped", "uptime_s"):
        assert key not in merged
    # A merged document merges again, counting its instances.
    again = merge_states([merged, states[0]])
    assert again["instances"] == 4
    assert again["serving"]["completed"] == 4


def test_archive_is_null_when_no_part_has_one(clock: FakeClock) -> None:
    state = process_state(make_recorder(clock))
    assert merge_states([state, state])["archive"] is None
    assert merge_states([])["instances"] == 0


def test_rates_combine_as_amounts_over_the_longest_span(clock: FakeClock) -> None:
    # One process has seen 100 tokens over 4 s, the other 10 over its 1 s floor:
    # 110 tokens over 4 s is 27.5 tok/s, not the mean of 25 and 10.
    busy, idle = make_recorder(clock), make_recorder(clock)
    busy.serving.observe_tokens(clock.now, completion=50)
    clock.advance(4.0)
    busy.serving.observe_tokens(clock.now, completion=50)
    idle.serving.observe_tokens(clock.now, completion=10)
    states = [process_state(busy), process_state(idle)]
    assert [s["rates"]["decode"]["per_second"] for s in states] == [25.0, 10.0]

    decode = merge_states(states)["rates"]["decode"]

    assert decode == {
        "amount": 110.0,
        "span_s": 4.0,
        "samples": 3,
        "window_s": 5.0,
        "per_second": 27.5,
    }
    assert merge_states(states)["rates"]["prefill"]["per_second"] == 0.0


def test_percentiles_come_from_merged_distributions_not_averaged(clock: FakeClock) -> None:
    # 99 fast requests (0.1 s) in one process, 1 slow one (10 s) in another. Across
    # all 100 requests p50 is 0.1 s; the mean of the two processes' p50s is ~5 s.
    fast, slow = make_recorder(clock), make_recorder(clock)
    for _ in range(99):
        serve(fast, 100.0)
    serve(slow, 10_000.0)
    states = json.loads(json.dumps([process_state(fast), process_state(slow)]))
    each = [latency(s)["duration_s"]["p50"] for s in states]
    averaged = sum(each) / 2  # type: ignore[arg-type]

    # Full resolution: the documents' "latency", merged bucket by bucket (as the fleet does).
    merged = {
        name: Distribution.merged(Distribution.from_dense(s["latency"][name]) for s in states)
        for name in ("duration_s", "ttft_s", "tpot_s")
    }

    assert merged["duration_s"].count == 100
    assert merged["duration_s"].quantile(50) == pytest.approx(0.1, rel=RELATIVE_ERROR)
    assert merged["duration_s"].quantile(99) == pytest.approx(0.1, rel=RELATIVE_ERROR)
    assert merged["ttft_s"].quantile(50) == pytest.approx(0.05, rel=RELATIVE_ERROR)
    assert averaged == pytest.approx(5.05, rel=RELATIVE_ERROR)
    assert merged["tpot_s"].count == 0
    # The merged breakdown, at power-of-two resolution (/metrics): exact at each bound.
    [cell] = merged_cells(states).values()
    assert cell.duration.count_at_most(0.125) == 99
    assert cell.duration.count_at_most(8.0) == 99
    assert cell.duration.count_at_most(16.0) == 100


@pytest.mark.parametrize(
    "bad",
    [
        {"version": 2},
        {"version": 1},
        {"version": 1, "serving": "x"},
        "not a mapping",
    ],
)
def test_merge_refuses_what_is_not_a_state(clock: FakeClock, bad: Any) -> None:
    good = process_state(make_recorder(clock))
    with pytest.raises(ValueError):
        merge_states([good, bad])


def test_merge_reads_version_1_documents_beside_version_2(clock: FakeClock) -> None:
    # A rolling upgrade: the older release's documents carry full-resolution cells.
    old, new = make_recorder(clock), make_recorder(clock)
    for ms in (10.0, 20.0, 4000.0):
        serve(old, ms)
        serve(new, ms)
    v1 = {**process_state(old), "version": 1, "breakdown": old.breakdown.to_wire()}
    del v1["latency"], v1["resolution"]
    v2 = process_state(new)

    merged = merge_states(json.loads(json.dumps([v1, v2])))

    assert merged["serving"]["completed"] == 6
    [cell] = merged_cells([v1, v2]).values()
    assert cell.duration.count == 6
    for k in range(-8, 14):
        assert cell.duration.count_at_most(2.0**k) == 2 * old.breakdown.cells()[
            "m", "/v1/chat/completions", "ok"
        ].duration.count_at_most(2.0**k)
    assert latency(v1) == latency(v2)


def test_merge_refuses_a_hostile_breakdown(clock: FakeClock) -> None:
    state = process_state(make_recorder(clock))
    state["breakdown"] = [{"model": "m"}]
    with pytest.raises(ValueError, match="route"):
        merge_states([state])


def test_latency_of_parsed_cells_matches_latency(clock: FakeClock) -> None:
    recorder = make_recorder(clock)
    for ms in (10.0, 20.0, 4000.0):
        serve(recorder, ms)
    state = process_state(recorder)
    assert latency_of(recorder.breakdown.cells()) == latency(state)
    assert latency_of(merged_cells([state, state]))["duration_s"]["count"] == 6


# -- merge_states over the octave form (state version 2) -----------------------------------


def test_merge_of_octave_form_documents_sums_cells_by_octave_and_latency(clock: FakeClock) -> None:
    from ferrox_stats import host_state, octave

    recorder = make_recorder(clock)
    for ms in (10.0, 20.0, 4000.0):
        serve(recorder, ms)
    # A version 1 document, as the previous release wrote it: the keyed breakdown.
    current = process_state(recorder)
    v1 = {
        **{k: v for k, v in current.items() if k not in ("latency", "resolution")},
        "version": 1,
        "breakdown": recorder.breakdown.to_wire(),
    }
    v2 = host_state.octave_document(v1)
    dense = {"zeros": 1, "sum": 2.0, "offset": -40, "counts": [1, 0, 2]}
    v2["latency"] = {name: dense for name in ("duration_s", "ttft_s", "tpot_s")}
    shifted = {**dense, "offset": -38, "counts": [5]}
    other = {**v2, "latency": {name: shifted for name in ("duration_s", "ttft_s", "tpot_s")}}

    merged = merge_states(json.loads(json.dumps([v2, other])))

    assert merged["version"] == octave.VERSION
    [cell] = merged["breakdown"]
    assert cell["requests"] == 6
    # 10 ms and 20 ms are in (2^-7, 2^-6] and (2^-6, 2^-5]; 4 s in (2^1, 2^2].
    assert cell["duration"] == {
        "zeros": 0,
        "sum": 8.06,
        "offset": -6,
        "counts": [2, 2, *[0] * 6, 2],
    }
    assert merged["latency"]["ttft_s"] == {
        "zeros": 2,
        "sum": 4.0,
        "offset": -40,
        "counts": [1, 0, 7],
    }
    # A version 1 part is read into the octave form; one without latency leaves it out.
    mixed = merge_states([v1, v2])
    assert mixed["version"] == octave.VERSION and "latency" not in mixed
    assert mixed["breakdown"][0]["duration"]["counts"] == [2, 2, *[0] * 6, 2]
    assert merge_states([v1, v1])["version"] == 1  # all version 1: a version 1 sum
    cells = merged_cells([v2, v1])
    assert cells[("m", "/v1/chat/completions", "ok")].duration.count_at_most(2**-5) == 4


def test_merge_refuses_a_hostile_octave_breakdown(clock: FakeClock) -> None:
    from ferrox_stats import host_state

    state = host_state.octave_document(process_state(make_recorder(clock)))
    state["breakdown"] = [{"model": "m"}]
    with pytest.raises(ValueError, match="octave form"):
        merge_states([state])
