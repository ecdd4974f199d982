"""The usage answers' JSON (``v1/usage``), written from the rows' values, not their dicts.

A 3 600-row answer (30 days by model at hour buckets) spent about 48 ms making the rows'
dicts (``UsageRow.as_dict``) and 29 ms having DRF encode them (docs/benchmarks.md, "Usage
API, second pass"): more than the query. ``UsageRenderer`` writes each cell into a
template made once per answer (its keys fixed by what the answer groups by and which
latency it gives), each value as the JSON encoder writes it, from the answer's columns
(``archive.usage.Cells``: no object made per cell). The bytes are those
``FerroxJSONRenderer`` writes for ``UsageDocument.document()``
(tests/api/test_usage_json.py holds it to that for arbitrary answers); an indented
answer (``Accept: application/json; indent=N``), and one holding a number strict JSON
refuses (which it then refuses), take the renderer's own path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..archive.usage import SUMMARY_KEYS, Cells, Usage, UsageRow, bucket_start, summaries
from ..core.rollup import TIMES
from .wire import PreparedRenderer

__all__ = ["UsageDocument", "UsageRenderer", "total_dict"]

COUNTERS = tuple(UsageRow(datetime(1970, 1, 1, tzinfo=UTC), {}).as_dict(()))[2:-1]
"""A row's keys after its bucket and groups, before ``latency``: ``UsageRow.as_dict``'s."""


def total_dict(row: UsageRow, latency: tuple[str, ...]) -> dict[str, Any]:
    """A group's total over the range as the wire has it: a row without its bucket."""
    wire = row.as_dict(latency)
    del wire["bucket"], wire["bucket_ms"]
    return wire


@dataclass(frozen=True, slots=True)
class UsageDocument:
    """A ``v1/usage`` answer, left for ``UsageRenderer`` to write: ``head`` (the range,
    bucket, groups...), then the answer's ``rows`` and its groups' ``totals``."""

    head: dict[str, Any]
    answer: Usage
    totals: list[UsageRow]

    def document(self) -> dict[str, Any]:
        """The document as a dict: what the renderer writes, and what it writes from."""
        latency = self.answer.latency
        return {
            **self.head,
            "rows": [row.as_dict(latency) for row in self.answer.rows],
            "totals": [total_dict(row, latency) for row in self.totals],
        }


class _Refused(ValueError):
    """A value strict JSON refuses (NaN, an infinity): the renderer's path raises it."""


class UsageRenderer(PreparedRenderer):
    """Writes a ``UsageDocument``'s rows from their values."""

    prepared = UsageDocument

    def write(self, data: Any, encoder: Any, separators: tuple[str, str]) -> bytes | None:
        try:
            text = _write(data, encoder.encode, separators)
        except _Refused:
            return None
        # As JSONRenderer.render: U+2028 and U+2029 escaped, for JavaScript.
        return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode()


def _write(
    data: UsageDocument,
    encode: Callable[[Any], str],
    separators: tuple[str, str],
) -> str:
    item, colon = separators
    answer = data.answer
    parts = ["{"]
    if data.head:
        parts += [encode(data.head)[1:-1], item]
    labels: dict[str | None, str] = {None: "null"}  # each label's JSON, once per answer
    totals = Cells.of_rows(data.totals)
    for name, cells, bucketed in (("rows", answer.cells, True), ("totals", totals, False)):
        template = _template(answer.group_by, bucketed, encode, separators)
        written = _rows(cells, template, answer, bucketed, encode, labels, separators)
        parts += [encode(name), colon, "[", item.join(written), "]", item]
    parts[-1] = "}"
    return "".join(parts)


def _template(
    group_by: Iterable[str],
    bucketed: bool,
    encode: Callable[[Any], str],
    separators: tuple[str, str],
) -> str:
    """One row's JSON with a ``%s`` for each value, in ``_rows``' order (its latency
    one value: ``_latency_template``'s)."""
    item, colon = separators
    keys = [*(["bucket", "bucket_ms"] if bucketed else []), *group_by, *COUNTERS, "latency"]
    fields = [encode(key) + colon + "%s" for key in keys]
    if bucketed:  # an ISO 8601 moment is JSON as it is, quoted
        fields[0] = encode("bucket") + colon + '"%s"'
    return "{" + item.join(fields) + "}"


def _latency_template(
    latency: Iterable[str], encode: Callable[[Any], str], separators: tuple[str, str]
) -> str:
    """A row's ``latency`` object with a ``%s`` for each count and percentile."""
    item, colon = separators
    summaries = [
        encode(f"{name}_s")
        + colon
        + "{"
        + item.join(encode(key) + colon + "%s" for key in SUMMARY_KEYS)
        + "}"
        for name in latency
    ]
    return "{" + item.join(summaries) + "}"


def _aborts(
    aborts: dict[str, int],
    reasons: dict[str, str],
    encode: Callable[[Any], str],
    separators: tuple[str, str],
) -> str:
    """A cell's abort reasons as the encoder writes the dict: each reason's JSON and
    colon made once per answer (``reasons``), its count (an int) as ``str``. Every cell
    of an answer by replica or model counts some: the encoder's pass over each cost
    more than the rest of the cell's values."""
    item, colon = separators
    parts = []
    for reason, n in aborts.items():
        key = reasons.get(reason)
        if key is None:
            key = reasons[reason] = encode(reason) + colon
        parts.append(key + str(n))
    return "{" + item.join(parts) + "}"


def _refused(value: float) -> str:
    raise _Refused(value)


def _numbers(values: Iterable[float | int | None]) -> list[str]:
    """``values`` as the JSON encoder writes them: ``null`` for None, a number as
    ``repr``; ``_Refused`` for one strict JSON refuses."""
    isfinite = math.isfinite
    return [
        "null" if value is None else repr(value) if isfinite(value) else _refused(value)
        for value in values
    ]


def _rows(
    cells: Cells,
    template: str,
    answer: Usage,
    bucketed: bool,
    encode: Callable[[Any], str],
    labels: dict[str | None, str],
    separators: tuple[str, str],
) -> list[str]:
    """Each cell written into ``template``: its values as the JSON encoder writes them
    (a number as ``repr``, as ``json`` writes ints and floats; ``_Refused`` for one
    strict JSON refuses; an abort reason's count, an int, as ``str``), a column at a
    time, then a row at a time by ``%``."""
    columns: list[list[Any]] = []
    if bucketed:
        starts: dict[int, str] = {}  # a bucket's groups share its start's JSON
        for at_s in cells.at_s:
            if at_s not in starts:
                starts[at_s] = bucket_start(at_s).isoformat()
        columns += [[starts[at_s] for at_s in cells.at_s], [at_s * 1000 for at_s in cells.at_s]]
    written: dict[tuple[str | None, ...], list[str]] = {}  # each group's labels' JSON
    for group in cells.group:
        if group not in written:
            texts = written[group] = []
            for label in group:
                text = labels.get(label)
                if text is None:
                    text = labels[label] = encode(label)
                texts.append(text)
    for at in range(len(answer.group_by)):
        columns.append([written[group][at] for group in cells.group])
    reasons: dict[str, str] = {}  # each abort reason's JSON key, once per answer
    columns += [
        cells.requests,
        cells.prompt_tokens,
        cells.completion_tokens,
        cells.cached_tokens,
        cells.out_of_range,
        [
            _aborts(aborts, reasons, encode, separators) if aborts else "{}"
            for aborts in cells.aborts
        ],
        cells.errors,
        cells.aborted,
        _numbers(cells.cost),
        cells.unpriced_requests,
        _numbers(cells.replica_cost),
        _latency(cells, answer.latency, encode, separators),
    ]
    return [template % values for values in zip(*columns, strict=True)]


def _latency(
    cells: Cells,
    latency: tuple[str, ...],
    encode: Callable[[Any], str],
    separators: tuple[str, str],
) -> list[str]:
    """Each cell's ``latency`` object: the percentiles a merged level stored, as they
    are, else its distributions' (``summaries``)."""
    if not latency:
        return ["{}"] * len(cells)
    template = _latency_template(latency, encode, separators)
    at_in_stored = [TIMES.index(name) for name in latency]
    written = []
    for index, percentiles in enumerate(cells.percentiles):
        values: list[str] = []
        if percentiles:
            # Written by ``rollups.percentiles_text`` as compact, strict JSON, a list
            # per ``TIMES`` of numbers alone: each number's text is what json writes.
            stored = percentiles[2:-2].split("],[")
            for at in at_in_stored:
                values += stored[at].split(",")
        else:
            for summary in summaries(cells, index, latency):
                values += _numbers(summary)
        written.append(template % tuple(values))
    return written
