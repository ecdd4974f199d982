"""The usage answers' JSON (``v1/usage``), written from the rows' values, not their dicts.

A 3 600-row answer (30 days by model at hour buckets) spent about 48 ms making the rows'
dicts (``UsageRow.as_dict``) and 29 ms having DRF encode them (docs/benchmarks.md, "Usage
API, second pass"): more than the query. ``UsageRenderer`` writes each row into a
template made once per answer (its keys fixed by what the answer groups by and which
latency it gives), each value as the JSON encoder writes it. The bytes are those
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

from ..archive.usage import SUMMARY_KEYS, Usage, UsageRow
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
    for name, rows, bucketed in (("rows", answer.rows, True), ("totals", data.totals, False)):
        template = _template(answer.group_by, answer.latency, bucketed, encode, separators)
        written = _rows(rows, template, answer.latency, bucketed, encode, labels, separators)
        parts += [encode(name), colon, "[", item.join(written), "]", item]
    parts[-1] = "}"
    return "".join(parts)


def _template(
    group_by: Iterable[str],
    latency: Iterable[str],
    bucketed: bool,
    encode: Callable[[Any], str],
    separators: tuple[str, str],
) -> str:
    """One row's JSON with a ``%s`` for each value, in ``_rows``' order."""
    item, colon = separators
    keys = [*(["bucket", "bucket_ms"] if bucketed else []), *group_by, *COUNTERS]
    fields = [encode(key) + colon + "%s" for key in keys]
    if bucketed:  # an ISO 8601 moment is JSON as it is, quoted
        fields[0] = encode("bucket") + colon + '"%s"'
    summaries = [
        encode(f"{name}_s")
        + colon
        + "{"
        + item.join(encode(key) + colon + "%s" for key in SUMMARY_KEYS)
        + "}"
        for name in latency
    ]
    fields.append(encode("latency") + colon + "{" + item.join(summaries) + "}")
    return "{" + item.join(fields) + "}"


def _aborts(
    aborts: dict[str, int],
    reasons: dict[str, str],
    encode: Callable[[Any], str],
    separators: tuple[str, str],
) -> str:
    """A row's abort reasons as the encoder writes the dict: each reason's JSON and
    colon made once per answer (``reasons``), its count (an int) as ``str``. Every row
    of an answer by replica or model counts some: the encoder's pass over each cost
    more than the rest of the row's values."""
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


def _rows(
    rows: list[UsageRow],
    template: str,
    latency: tuple[str, ...],
    bucketed: bool,
    encode: Callable[[Any], str],
    labels: dict[str | None, str],
    separators: tuple[str, str],
) -> list[str]:
    """Each row written into ``template``: its values as the JSON encoder writes them
    (a number as ``repr``, as ``json`` writes ints and floats; ``_Refused`` for one
    strict JSON refuses; an abort reason's count, an int, as ``str``)."""
    # One loop, every value inline: a function call per value cost more than the rest.
    isfinite = math.isfinite
    reasons: dict[str, str] = {}  # each abort reason's JSON key, once per answer
    at_in_stored = [TIMES.index(name) for name in latency]
    written = []
    buckets: dict[datetime, list[Any]] = {}  # a bucket's groups share its start's JSON
    for row in rows:
        tally, cost, replica_cost = row.tally, row.cost, row.replica_cost
        if bucketed:
            start = buckets.get(row.bucket)
            if start is None:
                moment = row.bucket
                start = buckets[moment] = [moment.isoformat(), int(moment.timestamp()) * 1000]
            values = start.copy()
        else:
            values = []
        for label in row.group.values():
            text = labels.get(label)
            if text is None:
                text = labels[label] = encode(label)
            values.append(text)
        values += (
            tally.requests,
            tally.prompt_tokens,
            tally.completion_tokens,
            tally.cached_tokens,
            tally.out_of_range,
            _aborts(tally.aborts, reasons, encode, separators) if tally.aborts else "{}",
            row.errors,
            row.aborted,
            "null" if cost is None else repr(cost) if isfinite(cost) else _refused(cost),
            row.unpriced_requests,
            "null"
            if replica_cost is None
            else repr(replica_cost)
            if isfinite(replica_cost)
            else _refused(replica_cost),
        )
        if latency and row.percentiles:
            # Written by ``rollups.percentiles_text`` as compact, strict JSON, a list
            # per ``TIMES`` of numbers alone: each number's text is what json writes.
            stored = row.percentiles[2:-2].split("],[")
            for at in at_in_stored:
                values += stored[at].split(",")
        elif latency:
            for summary in row.summaries(latency):
                values += [
                    "null" if value is None else repr(value) if isfinite(value) else _refused(value)
                    for value in summary
                ]
        written.append(template % tuple(values))
    return written
