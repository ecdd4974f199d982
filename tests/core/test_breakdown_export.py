"""``Breakdown.export``: what a heartbeat publishes, cells at power-of-two resolution and
the time distributions merged over every cell at full resolution."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ferrox_stats.core.breakdown import DISTRIBUTIONS, TIMES, Breakdown
from ferrox_stats.core.distribution import Distribution, bucket_index
from ferrox_stats.core.requests import Record

records = st.builds(
    Record,
    model=st.sampled_from(["a", "b", "c", "d", None]),
    route=st.sampled_from(["/x", "/y", None]),
    prompt_tokens=st.none() | st.integers(0, 10_000),
    completion_tokens=st.none() | st.integers(0, 10_000),
    ttft_ms=st.none() | st.floats(0, 1e6),
    duration_ms=st.none() | st.floats(0, 1e6) | st.just(-1.0),  # -1: refused whole
    decode_ms=st.none() | st.floats(0, 1e6),
    aborted=st.none() | st.just("client_disconnect"),
    error=st.none() | st.just("E"),
)


def exported(breakdown: Breakdown) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    cells, times = breakdown.export()
    return json.loads(json.dumps(cells)), json.loads(json.dumps(times))


@given(st.lists(st.lists(records, max_size=15), max_size=5), st.integers(1, 8))
def test_export_matches_the_cells_whenever_it_is_asked(
    batches: list[list[Record]], fold_every: int
) -> None:
    # Cells appear between exports, and records reach cells that were exported before:
    # what the export keeps up to date between heartbeats must stay exact.
    breakdown = Breakdown(max_models=3, fold_every=fold_every)
    for batch in batches:
        for record in batch:
            breakdown.observe(record)
        cells, times = exported(breakdown)
        full = breakdown.cells()

        # The time distributions merged over every cell, at full resolution: exactly
        # Distribution.merged of the cells (their sums added in the same order).
        for name in TIMES:
            merged = Distribution.merged(getattr(cell, name) for cell in full.values())
            assert Distribution.from_dense(times[name]) == merged
            assert times[name] == merged.dense()

        # Every cell, sorted by key, its distributions at power-of-two resolution.
        assert [(c["model"], c["route"], c["outcome"]) for c in cells] == sorted(full)
        for wire in cells:
            cell = full[wire["model"], wire["route"], wire["outcome"]]
            assert (wire["requests"], wire["input_tokens"], wire["output_tokens"]) == (
                cell.requests,
                cell.input_tokens,
                cell.output_tokens,
            )
            for name in DISTRIBUTIONS:
                assert wire[name] == getattr(cell, name).octaves()
                coarse = Distribution.from_octaves(wire[name])
                fine = getattr(cell, name)
                assert (coarse.count, coarse.zeros, coarse.total) == (
                    fine.count,
                    fine.zeros,
                    fine.total,
                )
                for k in range(-12, 24):
                    assert coarse.count_at_most(2.0**k) == fine.count_at_most(2.0**k)


def test_an_empty_breakdown_exports_empty_forms() -> None:
    cells, times = Breakdown().export()
    empty = {"zeros": 0, "sum": 0.0, "offset": 0, "counts": []}
    assert (cells, times) == ([], dict.fromkeys(TIMES, empty))


def test_export_folds_what_is_queued() -> None:
    breakdown = Breakdown(fold_every=1000)
    breakdown.observe(Record(model="m", route="/x", duration_ms=1500.0))
    [cell], times = breakdown.export()
    assert cell["requests"] == 1
    assert cell["duration"] == {"zeros": 0, "sum": 1.5, "offset": 1, "counts": [1]}
    index = bucket_index(1.5)
    assert times["duration"] == {"zeros": 0, "sum": 1.5, "offset": index, "counts": [1]}
    assert times["ttft"]["counts"] == []
