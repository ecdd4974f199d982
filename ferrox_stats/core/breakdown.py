"""Per-label aggregates of finished requests, with a bounded label set.

A ``Cell`` sums the requests of one ``(model, route, outcome)``: how many, their tokens,
and five ``Distribution``s (duration, time to first token, time per output token,
input and output tokens per request). ``model`` and ``route`` are the record's (``""``
when it has none); ``outcome`` is ``"aborted"`` (an abort reason), else ``"error"`` (an
error), else ``"ok"``. The first ``max_models`` distinct models keep their name, later
ones count as ``"other"``; the same for routes. So a host whose clients send any model
name they like cannot grow the label set (or a Prometheus scrape) without bound.

Units: seconds for durations, tokens for token counts. A value a record lacks is
skipped, never counted as 0. Cells are summed across processes with ``merge_wire``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Any

from .distribution import Distribution, bucket_index
from .requests import Record

__all__ = ["ABORTED", "DISTRIBUTIONS", "ERROR", "OK", "OTHER", "Breakdown", "Cell", "CellKey"]

OK = "ok"
ERROR = "error"
ABORTED = "aborted"
OUTCOMES = (OK, ERROR, ABORTED)
OTHER = "other"
"""The label of every model (route) past the first ``max_models`` (``max_routes``)."""

DISTRIBUTIONS = ("duration", "ttft", "tpot", "input", "output")

CellKey = tuple[str, str, str]
"""``(model, route, outcome)``."""


class Cell:
    """The requests of one ``(model, route, outcome)``: counts, token sums, distributions.

    ``duration`` and ``ttft`` are seconds from arrival; ``tpot`` is the decode loop's
    seconds per output token after the first (OpenTelemetry's time per output token);
    ``input`` and ``output`` are tokens per request.
    """

    __slots__ = (
        "duration",
        "input",
        "input_tokens",
        "output",
        "output_tokens",
        "requests",
        "tpot",
        "ttft",
    )

    def __init__(self) -> None:
        self.requests = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.duration = Distribution()
        self.ttft = Distribution()
        self.tpot = Distribution()
        self.input = Distribution()
        self.output = Distribution()

    def copy(self) -> Cell:
        """An independent deep copy."""
        result = Cell()
        result.merge(self)
        return result

    def merge(self, other: Cell) -> None:
        """Add ``other``'s requests to this cell (exact)."""
        self.requests += other.requests
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.duration.merge(other.duration)
        self.ttft.merge(other.ttft)
        self.tpot.merge(other.tpot)
        self.input.merge(other.input)
        self.output.merge(other.output)

    def to_wire(self, key: CellKey) -> dict[str, Any]:
        """The JSON-able form of this cell under ``key``."""
        model, route, outcome = key
        return {
            "model": model,
            "route": route,
            "outcome": outcome,
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "duration": self.duration.to_wire(),
            "ttft": self.ttft.to_wire(),
            "tpot": self.tpot.to_wire(),
            "input": self.input.to_wire(),
            "output": self.output.to_wire(),
        }

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> tuple[CellKey, Cell]:
        """The key and cell ``wire`` describes; ``ValueError`` for anything else."""
        if not isinstance(wire, Mapping):
            raise ValueError(f"a cell must be a mapping, got {type(wire).__name__}")
        key: list[str] = []
        for name in ("model", "route", "outcome"):
            label = wire.get(name)
            if not isinstance(label, str) or len(label) > 1000:
                raise ValueError(f"a cell's {name} must be a string, got {label!r}")
            key.append(label)
        if key[2] not in OUTCOMES:
            raise ValueError(f"a cell's outcome must be one of {OUTCOMES}, got {key[2]!r}")
        cell = cls()
        for name in ("requests", "input_tokens", "output_tokens"):
            value = wire.get(name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"a cell's {name} must be an integer >= 0, got {value!r}")
            setattr(cell, name, value)
        for name in DISTRIBUTIONS:
            if name not in wire:
                raise ValueError(f"a cell needs {name!r}")
            setattr(cell, name, Distribution.from_wire(wire[name]))
        return (key[0], key[1], key[2]), cell


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


# The record's fields observe() reads, in one C call rather than nine attribute lookups.
_FIELDS = itemgetter(
    *(
        Record._fields.index(name)
        for name in (
            "model",
            "route",
            "prompt_tokens",
            "completion_tokens",
            "ttft_ms",
            "duration_ms",
            "decode_ms",
            "aborted",
            "error",
        )
    )
)


class Breakdown:
    """Thread-safe per-``(model, route, outcome)`` cells of finished requests."""

    def __init__(self, max_models: int = 20, max_routes: int = 20) -> None:
        self.max_models = _positive_int(max_models, "max_models")
        self.max_routes = _positive_int(max_routes, "max_routes")
        self._lock = threading.Lock()
        self._cells: dict[CellKey, Cell] = {}
        self._models: set[str] = set()
        self._routes: set[str] = set()
        # The record's own (model, route, outcome) -> its cell, for labels kept as they
        # are: one dict lookup per request. Labels counted as "other" are not cached
        # here, so this stays as bounded as the label set.
        self._fast: dict[tuple[str | None, str | None, str], Cell] = {}

    def observe(self, record: Record) -> None:
        """Count a finished record in its cell. Cheap: the request path calls it.

        ``ValueError`` (or ``OverflowError``) for a time that is negative or not finite,
        raised before anything is counted.
        """
        # Written out rather than factored into helpers: this runs once per request,
        # and in CPython a call costs about as much as the work it would hide.
        # Anything that can raise does so before the lock, so nothing is half counted.
        model, route, prompt, completion, ttft, duration, decode, aborted, error = _FIELDS(record)
        if aborted is not None:
            outcome = ABORTED
        elif error is not None:
            outcome = ERROR
        else:
            outcome = OK
        # Times: a finite number >= 0 (NaN fails every comparison).
        if not (duration is None or 0 <= duration < _INF):
            raise ValueError(f"duration_ms must be a finite number >= 0, got {duration!r}")
        if not (ttft is None or 0 <= ttft < _INF):
            raise ValueError(f"ttft_ms must be a finite number >= 0, got {ttft!r}")
        if not (decode is None or 0 <= decode < _INF):
            raise ValueError(f"decode_ms must be a finite number >= 0, got {decode!r}")
        # Token counts: one list lookup for the usual ones; _ZERO for 0.
        table = _TOKEN_INDEX
        i_index = o_index = None
        if prompt is not None:
            i_index = table[prompt] if 0 <= prompt < _TOKEN_TABLE else _token_index(prompt)
        if completion is not None:
            o_index = (
                table[completion] if 0 <= completion < _TOKEN_TABLE else _token_index(completion)
            )
        frexp = _frexp
        ceil = _ceil
        with self._lock:
            cell = self._fast.get((model, route, outcome)) or self._cell_for(model, route, outcome)
            cell.requests += 1
            # Each value: the sum, then zeros apart or its bucket (see distribution.py).
            if duration is not None:
                value = duration / 1000.0
                dist = cell.duration
                dist.total += value
                if value:
                    m, e = frexp(value)
                    index = e * 32 + ceil(m * 64) - 33
                    counts = dist.counts
                    counts[index] = counts.get(index, 0) + 1
                else:
                    dist.zeros += 1
            if ttft is not None:
                value = ttft / 1000.0
                dist = cell.ttft
                dist.total += value
                if value:
                    m, e = frexp(value)
                    index = e * 32 + ceil(m * 64) - 33
                    counts = dist.counts
                    counts[index] = counts.get(index, 0) + 1
                else:
                    dist.zeros += 1
            if i_index is not None:
                cell.input_tokens += prompt
                dist = cell.input
                dist.total += prompt
                if i_index is _ZERO:
                    dist.zeros += 1
                else:
                    counts = dist.counts
                    counts[i_index] = counts.get(i_index, 0) + 1
            if o_index is not None:
                cell.output_tokens += completion
                dist = cell.output
                dist.total += completion
                if o_index is _ZERO:
                    dist.zeros += 1
                else:
                    counts = dist.counts
                    counts[o_index] = counts.get(o_index, 0) + 1
                if decode is not None and completion > 1:
                    value = decode / 1000.0 / (completion - 1)
                    dist = cell.tpot
                    dist.total += value
                    if value:
                        m, e = frexp(value)
                        index = e * 32 + ceil(m * 64) - 33
                        counts = dist.counts
                        counts[index] = counts.get(index, 0) + 1
                    else:
                        dist.zeros += 1

    def _cell_for(self, model: str | None, route: str | None, outcome: str) -> Cell:
        # Called with the lock held, the first time a (model, route, outcome) is seen
        # and for every request whose model or route counts as "other".
        model_label = self._label(model or "", self._models, self.max_models)
        route_label = self._label(route or "", self._routes, self.max_routes)
        key = (model_label, route_label, outcome)
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = Cell()
        if model_label != OTHER and route_label != OTHER:
            self._fast[(model, route, outcome)] = cell
        return cell

    @staticmethod
    def _label(name: str, known: set[str], most: int) -> str:
        if name in known:
            return name
        if len(known) < most:
            known.add(name)
            return name
        return OTHER

    def cells(self) -> dict[CellKey, Cell]:
        """Every cell, as a consistent deep copy."""
        with self._lock:
            return {key: cell.copy() for key, cell in self._cells.items()}

    def to_wire(self) -> list[dict[str, Any]]:
        """The JSON-able form: one dict per cell (see ``Cell.to_wire``), sorted by key."""
        return [cell.to_wire(key) for key, cell in sorted(self.cells().items())]

    @staticmethod
    def merge_wire(parts: Iterable[Iterable[Mapping[str, Any]]]) -> dict[CellKey, Cell]:
        """Cells summed key by key across wire lists (of several processes).

        ``ValueError`` for a list or cell that ``to_wire`` could not have produced.
        """
        merged: dict[CellKey, Cell] = {}
        for part in parts:
            if isinstance(part, str | bytes | Mapping):
                raise ValueError("a breakdown must be a list of cells")
            for wire in part:
                key, cell = Cell.from_wire(wire)
                if (mine := merged.get(key)) is None:
                    merged[key] = cell
                else:
                    mine.merge(cell)
        return merged


# Hot-path helpers.

_frexp = math.frexp
_ceil = math.ceil
_INF = math.inf


# The bucket "index" of a zero: told apart by identity.
_ZERO: Any = object()

# Token counts below this are bucketed by one list lookup instead of frexp and ceil.
_TOKEN_TABLE = 1 << 14


def _token_index(tokens: int) -> Any:
    """The bucket of a token count (an int >= 0): ``_ZERO`` for 0, else its index."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"a token count must be an integer >= 0, got {tokens!r}")
    return _ZERO if tokens == 0 else bucket_index(tokens)


def _token_table() -> list[Any]:
    # Each index is one int object, shared by every count in its bucket.
    indices: dict[int, int] = {}
    return [_ZERO] + [indices.setdefault(i, i) for i in map(bucket_index, range(1, _TOKEN_TABLE))]


_TOKEN_INDEX = _token_table()
