"""Per-(model, route, outcome) cells: labels bounded, values in seconds and tokens, mergeable."""

from __future__ import annotations

import json
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
def test_an_impossible_value_raises_before_anything_is_counted(field: str, value: float) -> None:
    breakdown = Breakdown()
    with pytest.raises((ValueError, OverflowError)):
        breakdown.observe(record(prompt_tokens=3, **{field: value}))
    assert breakdown.cells() == {}


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


def test_observe_is_thread_safe() -> None:
    breakdown = Breakdown()
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
