"""``api.usage_json``: a usage answer written from its rows' values, byte for byte as DRF
writes the rows' dicts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ferrox_stats.api.base import FerroxJSONRenderer
from ferrox_stats.api.usage_json import UsageDocument, UsageRenderer
from ferrox_stats.archive.rollups import percentiles_text
from ferrox_stats.archive.usage import DIMENSIONS, Cells, Usage, UsageRow
from ferrox_stats.core.rollup import TIMES, Tally
from tests.api.test_wire import outcome

START = datetime(2026, 11, 1, tzinfo=UTC)
# Labels and abort reasons as any caller could send them: the JavaScript line
# separators DRF escapes, NUL, a lone surrogate (which UTF-8 refuses), any Unicode.
texts = st.lists(
    st.characters() | st.sampled_from(["\u2028", "\u2029", "\x00", "\ud800", "é", "%s", '"']),
    max_size=6,
).map("".join)
counts = st.integers(0, 2**63)
# NaN and the infinities: strict JSON refuses them, whichever path writes the answer.
money = st.none() | st.floats() | st.floats(0, 1e6)
durations = st.floats(0, 1e4) | st.integers(0, 10).map(float)


@st.composite
def answers(draw: Any) -> tuple[Usage, list[UsageRow]]:
    group_by = tuple(draw(st.lists(st.sampled_from(list(DIMENSIONS)), unique=True, max_size=3)))
    latency = tuple(draw(st.lists(st.sampled_from(TIMES), unique=True)))
    rows = []
    for _ in range(draw(st.integers(0, 4))):
        at = START + timedelta(hours=draw(st.integers(0, 1000)))
        row = UsageRow(at, {name: draw(st.none() | texts) for name in group_by})
        tally = row.tally
        tally.requests, tally.prompt_tokens, tally.completion_tokens = (draw(counts),) * 3
        tally.cached_tokens, tally.out_of_range = draw(counts), draw(counts)
        tally.aborts.update(draw(st.dictionaries(texts, counts, max_size=3)))
        row.errors, row.aborted, row.unpriced_requests = draw(counts), draw(counts), draw(counts)
        row.cost, row.replica_cost = draw(money), draw(money)
        if draw(st.booleans()):  # a merged level's stored percentiles, as the writer stores
            stored = Tally()
            for name in TIMES:
                getattr(stored, name).add_many(draw(st.lists(durations, max_size=4)))
            row.percentiles = percentiles_text(stored, level=1, span=3600)
        else:  # the tally's distributions, merged from the rows
            for name in latency:
                getattr(tally, name).add_many(draw(st.lists(durations, max_size=4)))
        rows.append(row)
    answer = Usage(
        START, START + timedelta(days=2), "hour", group_by, Cells.of_rows(rows), latency=latency
    )
    return answer, answer.totals()


HEAD = {"since": START.isoformat(), "group_by": ["model"], "filters": {"key": "\u2028é"}}


def drf(document: UsageDocument, media_type: str = "application/json") -> bytes:
    """What the view wrote before: the document's dicts through DRF's JSON renderer."""
    return FerroxJSONRenderer().render(document.document(), media_type, {})


def ours(document: UsageDocument, media_type: str = "application/json") -> bytes:
    return UsageRenderer().render(document, media_type, {})


@settings(max_examples=300)
@given(answer=answers(), head=st.sampled_from([HEAD, {}]))
def test_an_answer_is_the_bytes_drf_writes_for_its_dicts(
    answer: tuple[Usage, list[UsageRow]], head: dict[str, Any]
) -> None:
    document = UsageDocument(head, *answer)
    assert outcome(lambda: ours(document)) == outcome(lambda: drf(document))


def test_an_indented_answer_and_any_other_data_take_drfs_path() -> None:
    row = UsageRow(START, {"model": "m"})
    answer = Usage(START, START, "hour", ("model",), Cells.of_rows([row]))
    document = UsageDocument(HEAD, answer, [row])
    indented = "application/json; indent=2"
    assert ours(document, indented) == drf(document, indented)
    assert b'\n  "rows"' in ours(document, indented)
    assert UsageRenderer().render({"detail": "x"}, "application/json", {}) == b'{"detail":"x"}'


@settings(max_examples=200)
@given(answer=answers(), data=st.data())
def test_totals_are_each_groups_rows_added_in_turn(
    answer: tuple[Usage, list[UsageRow]], data: st.DataObject
) -> None:
    # Usage.totals sums a column at a time; UsageRow.add_row, row by row, says what
    # that must give: the same integers, the same float additions in the same order
    # (NaN and the infinities included), abort reasons and distributions. Rows share
    # groups here (each takes an earlier row's, or keeps its own).
    drawn = answer[0]
    rows = drawn.rows
    for at, row in enumerate(rows):
        row.group = dict(rows[data.draw(st.integers(0, at))].group)
    usage = Usage(
        drawn.since, drawn.until, "hour", drawn.group_by, Cells.of_rows(rows), latency=drawn.latency
    )
    totals = usage.totals()
    want: dict[tuple[str | None, ...], UsageRow] = {}
    for row in usage.rows:
        key = tuple(row.group.values())
        if key not in want:
            want[key] = UsageRow(usage.since, dict(row.group))
        want[key].add_row(row)

    def summed(row: UsageRow) -> tuple[Any, ...]:
        costs = (repr(row.cost), repr(row.replica_cost), row.unpriced_requests)
        return (row.bucket, row.group, row.errors, row.aborted, *costs)

    assert len(totals) == len(want)
    for total in totals:
        expected = want[tuple(total.group.values())]
        assert summed(total) == summed(expected)
        assert Tally.__eq__(total, expected) is True
        assert list(total.aborts.items()) == list(expected.aborts.items())  # same order
