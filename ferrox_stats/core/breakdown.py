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

from .distribution import Distribution
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
        """Count a finished record in its cell. Cheap (the request path calls it)."""
        model, route, prompt, completion, ttft, duration, decode, aborted, error = _FIELDS(record)
        outcome = (
            OK if aborted is None and error is None else ABORTED if aborted is not None else ERROR
        )
        # Everything that could raise is computed before any count changes.
        duration_s = None if duration is None else _bucket(duration / 1000.0)
        ttft_s = None if ttft is None else _bucket(ttft / 1000.0)
        tpot_s = (
            _bucket(decode / 1000.0 / (completion - 1))
            if decode is not None and completion is not None and completion > 1
            else None
        )
        inputs = None if prompt is None else _bucket(prompt)
        outputs = None if completion is None else _bucket(completion)
        with self._lock:
            cell = self._fast.get((model, route, outcome)) or self._cell_for(model, route, outcome)
            cell.requests += 1
            if inputs is not None:
                cell.input_tokens += prompt
                _count(cell.input, inputs)
            if outputs is not None:
                cell.output_tokens += completion
                _count(cell.output, outputs)
            if duration_s is not None:
                _count(cell.duration, duration_s)
            if ttft_s is not None:
                _count(cell.ttft, ttft_s)
            if tpot_s is not None:
                _count(cell.tpot, tpot_s)

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


# Hot-path helpers: a bucket is computed before the lock, counted under it.

_frexp = math.frexp
_ceil = math.ceil


def _bucket(value: float) -> tuple[float, int]:
    """``(value, bucket index)``, the index -1 << 40 for zero; ``ValueError`` for a value
    that is negative or not finite."""
    if value > 0:
        m, e = _frexp(value)  # ceil() raises OverflowError for inf
        return value, e * 32 + _ceil(m * 64) - 33
    if value == 0:
        return 0.0, _ZERO_INDEX
    raise ValueError(f"not a measurement: {value!r}")


_ZERO_INDEX = -(1 << 40)


def _count(distribution: Distribution, bucket: tuple[float, int]) -> None:
    value, index = bucket
    distribution.total += value
    if index == _ZERO_INDEX:
        distribution.zeros += 1
    else:
        counts = distribution.counts
        counts[index] = counts.get(index, 0) + 1
