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

import threading
from collections import _count_elements, deque  # type: ignore[attr-defined]
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from functools import partial
from itertools import accumulate, compress, count, pairwise, repeat, starmap
from operator import is_not, itemgetter, lt, sub, truediv
from typing import Any

from .distribution import ZERO_INDEX, Distribution, bits_indices, int_indices, sort_checked
from .requests import Record

_INF = float("inf")

__all__ = ["ABORTED", "DISTRIBUTIONS", "ERROR", "OK", "OTHER", "Breakdown", "Cell", "CellKey"]

OK = "ok"
ERROR = "error"
ABORTED = "aborted"
OUTCOMES = (OK, ERROR, ABORTED)
OTHER = "other"
"""The label of every model (route) past the first ``max_models`` (``max_routes``)."""

DISTRIBUTIONS = ("duration", "ttft", "tpot", "input", "output")
TIMES = ("duration", "ttft", "tpot")
"""The distributions ``Breakdown.export`` also merges over every cell."""

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
        """The key and cell ``wire`` describes (its distributions in the wire form or,
        as a version 2 state document has them, the octave form); ``ValueError`` for
        anything else."""
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
            setattr(cell, name, _distribution(wire[name]))
        return (key[0], key[1], key[2]), cell


def _distribution(wire: Any) -> Distribution:
    # A cell's distribution: the octave form (a version 2 state document's, a list of
    # counts) or the wire form (version 1, keyed by bucket index).
    if isinstance(wire, Mapping) and isinstance(wire.get("counts"), list):
        return Distribution.from_octaves(wire)
    return Distribution.from_wire(wire)


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _column(name: str) -> Callable[[Record], Any]:
    return itemgetter(Record._fields.index(name))


_MODEL = _column("model")
_ROUTE = _column("route")
_ABORTED = _column("aborted")
_ERROR = _column("error")
_PROMPT = _column("prompt_tokens")
_COMPLETION = _column("completion_tokens")
_TTFT = _column("ttft_ms")
_DURATION = _column("duration_ms")
_DECODE = _column("decode_ms")
_PRESENT = partial(is_not, None)
_GROUP = itemgetter(*map(Record._fields.index, ("model", "route", "aborted", "error")))

DEFAULT_FOLD_EVERY = 1024
"""Queued records at which a request folds them itself while no reader folds."""
DEFAULT_MAX_QUEUED = 16384
"""Queued records at which a request folds them itself although readers fold: they fell
behind (a heartbeat every 2 s keeps the queue under ``2 * requests/s``)."""


class Breakdown:
    """Thread-safe per-``(model, route, outcome)`` cells of finished requests.

    ``observe`` only queues the record (one ``deque.append`` and a length check: the
    request path pays nothing more); readers fold the queue into the cells in batches
    (the heartbeat every ``HEARTBEAT_S``, a scrape, ``/v1/stats``), paying that cost on
    their own thread. A batch is folded in C-level passes over all of it, whatever its
    cells: the records put in order of their cell, each of the five columns' bucket
    indexes computed at once (from the floats' bits; token counts from a table), then
    each cell's slice of them counted (``Distribution.add_counted``): in CPython a
    fraction of the cost of bucketing each record as it comes (``docs/benchmarks.md``).
    A record with an impossible value (a negative or non-finite time, a token count
    that is not an integer >= 0) is left out whole and counted in ``refused``: a batch
    holding one is folded cell by cell, checked, as before.

    A request folds only as a last resort, and how soon depends on whether readers do.
    While none has folded since a request last did (no heartbeat: ``HEARTBEAT_S =
    None`` or no archive sink; or before the first heartbeat), the request that finds
    ``fold_every`` records queued folds them, in batches small enough to still be in
    the CPU's caches. Once a reader folds, requests leave the queue to readers up to
    ``max_queued`` records (at least ``fold_every``): only readers that fell that far
    behind leave a request to fold. Each fold by a request is counted in
    ``request_folds``. So at most ``max_queued`` records wait (``2 * max_queued``
    while a reader holds the lock that long; a request then waits for it), each
    costing the queue 8 bytes and, once the ring (``RING_CAPACITY``) no longer holds
    it, the record itself: about 0.3-0.5 KiB (a ``Record`` tuple with its own floats,
    ints and id string). At the default 16384, about 5-8 MiB at most.
    """

    def __init__(
        self,
        max_models: int = 20,
        max_routes: int = 20,
        *,
        fold_every: int = DEFAULT_FOLD_EVERY,
        max_queued: int = DEFAULT_MAX_QUEUED,
    ) -> None:
        self.max_models = _positive_int(max_models, "max_models")
        self.max_routes = _positive_int(max_routes, "max_routes")
        self.fold_every = _positive_int(fold_every, "fold_every")
        self.max_queued = max(_positive_int(max_queued, "max_queued"), fold_every)
        self.refused = 0
        self.request_folds = 0  # folds done by observe: no reader folded for that long
        # deque.append and popleft are atomic: observe takes no lock.
        self._queue: deque[Record] = deque()
        # Queued records at which observe folds: fold_every until a reader folds, then
        # max_queued until a request has to fold again. Written with the lock held.
        self._fold_at = self.fold_every
        # Held to fold and to read the cells; never by observe below 2 * max_queued.
        self._lock = threading.Lock()
        self._cells: dict[CellKey, Cell] = {}
        self._models: set[str] = set()
        self._routes: set[str] = set()
        # TIMES merged over every cell: each cell's distribution tees into these from
        # the first export that sees it (``export``), so none is merged at a heartbeat.
        self._times = {name: Distribution() for name in TIMES}

    def observe(self, record: Record) -> None:
        """Count a finished record in its cell (at the next fold). Cheap; never raises."""
        self.observe_many((record,))

    def observe_many(self, records: Iterable[Record]) -> None:
        """``observe`` each of ``records``, in order: one ``deque.extend``."""
        queue = self._queue
        queue.extend(records)
        # The last resort (readers fold): fold unless another thread is folding (it
        # drains these records too); only a queue of 2 * max_queued (a reader holding the
        # lock that long) waits, so it stays bounded.
        if len(queue) >= self._fold_at and self._lock.acquire(
            blocking=len(queue) >= 2 * self.max_queued
        ):
            try:
                self.request_folds += 1
                self._fold()
                # No reader folded for _fold_at records: fold small, cache-warm batches.
                self._fold_at = self.fold_every
            finally:
                self._lock.release()

    def _fold(self) -> None:
        # With the lock held. Only the records queued now: later ones wait for the next.
        # A reader's fold (observe resets this after its own): readers fold, so requests
        # leave the queue to them up to max_queued.
        self._fold_at = self.max_queued
        queue = self._queue
        # Exactly the records queued now (only a folder pops), in a C-level pass.
        batch = list(starmap(queue.popleft, repeat((), len(queue))))
        if not batch:
            return
        if not self._fold_batch(batch):
            self._fold_checked(batch)

    def _fold_batch(self, batch: list[Record]) -> bool:
        # The usual batch, whatever its cells, in C-level passes over the whole batch:
        # the records put in order of their cell (first arrival first), each column's
        # values in that order, every bucket index from the floats' bits at once; then
        # per cell and distribution a slice of them, counted in C. False, with nothing
        # counted, for a batch the checked path must take (an impossible value, a
        # subnormal or a -0.0): it finds the records to refuse.
        first: dict[tuple[Any, ...], int] = {}
        try:
            # Each record's group: the position of its group's first record. Grouped by
            # abort reason and error rather than outcome (one C pass); by outcome if
            # those are too varied (many groups of one cell).
            groups = list(map(first.setdefault, map(_GROUP, batch), count()))
            present: Callable[[Any], bool] = _PRESENT
            if len(first) > 3 * len({key[:2] for key in first}):
                first = {}
                keys = zip(
                    map(_MODEL, batch),
                    map(_ROUTE, batch),
                    map(_PRESENT, map(_ABORTED, batch)),
                    map(_PRESENT, map(_ERROR, batch)),
                    strict=True,
                )
                groups = list(map(first.setdefault, keys, count()))
                present = bool  # the keys say whether the record has one
        except TypeError:  # a label that is not hashable: refused record by record
            return False
        n = len(batch)
        if len(first) == 1:
            ordered, bounds = batch, [0, n]
        else:
            sizes: dict[int, int] = {}
            _count_elements(sizes, groups)  # in order of first arrival, as ``first``
            ordered = list(map(batch.__getitem__, sorted(range(n), key=groups.__getitem__)))
            bounds = list(accumulate(sizes.values(), initial=0))
        try:
            columns = _columns(ordered, bounds)
        except (TypeError, ValueError, ArithmeticError):
            return False
        if columns is None:
            return False
        position = 0
        for (model, route, abort, error), end, duration, ttft, tpot, prompt, output in zip(
            first, bounds[1:], *columns, strict=True
        ):
            outcome = ABORTED if present(abort) else ERROR if present(error) else OK
            cell = self._cell_for(model, route, outcome)
            cell.requests += end - position
            position = end
            if duration is not None:
                cell.duration.add_counted(*duration)
            if ttft is not None:
                cell.ttft.add_counted(*ttft)
            if tpot is not None:
                cell.tpot.add_counted(*tpot)
            if prompt is not None:
                cell.input_tokens += prompt[0]
                cell.input.add_counted(*prompt)
            if output is not None:
                cell.output_tokens += output[0]
                cell.output.add_counted(*output)
        return True

    def _fold_checked(self, batch: list[Record]) -> None:
        # Group by group, each checked: a group with an impossible value goes record
        # by record, and each such record is refused.
        models = list(map(_MODEL, batch))
        routes = list(map(_ROUTE, batch))
        aborted = list(map(_ABORTED, batch))
        errors = list(map(_ERROR, batch))
        n = len(batch)
        if (
            models.count(models[0]) == n
            and routes.count(routes[0]) == n
            and aborted.count(None) == n
            and errors.count(None) == n
        ):
            # The usual batch: one model, one route, all ok.
            self._fold_group((models[0], routes[0], OK), batch)
            return
        groups: dict[tuple[str | None, str | None, str], list[Record]] = {}
        for record, model, route, abort, error in zip(
            batch, models, routes, aborted, errors, strict=True
        ):
            if abort is not None:
                outcome = ABORTED
            elif error is not None:
                outcome = ERROR
            else:
                outcome = OK
            groups.setdefault((model, route, outcome), []).append(record)
        # In order of first arrival: the first max_models models keep their names.
        for key, records in groups.items():
            self._fold_group(key, records)

    def _fold_group(self, key: tuple[str | None, str | None, str], records: list[Record]) -> None:
        try:
            values = _measurements(records)
        except ValueError:
            # Someone's impossible value: find it, one record at a time.
            for record in records:
                try:
                    single = _measurements([record])
                except ValueError:
                    self.refused += 1
                else:
                    _count(self._cell_for(*key), 1, single)
            return
        _count(self._cell_for(*key), len(records), values)

    def _cell_for(self, model: str | None, route: str | None, outcome: str) -> Cell:
        # With the lock held; only for a record that counts, so a refused one takes no
        # label and leaves no empty cell.
        model_label = self._label(model or "", self._models, self.max_models)
        route_label = self._label(route or "", self._routes, self.max_routes)
        key = (model_label, route_label, outcome)
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = Cell()
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
        """Every cell, with every record observed so far, as a consistent deep copy."""
        with self._lock:
            self._fold()
            return {key: cell.copy() for key, cell in self._cells.items()}

    def to_wire(self) -> list[dict[str, Any]]:
        """The JSON-able form: one dict per cell (see ``Cell.to_wire``), sorted by key."""
        # Written under the lock rather than from a copy: observe() does not wait for it.
        with self._lock:
            self._fold()
            return [cell.to_wire(key) for key, cell in sorted(self._cells.items())]

    def export(self) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
        """What a heartbeat publishes, in one pass under the lock: every cell as
        ``Cell.to_wire`` has it (sorted by key) but each distribution in the octave form
        (``Distribution.octaves``), and ``TIMES`` merged over every cell at full
        resolution in the dense form (``Distribution.dense``).

        The merged ones are kept as records are folded, not merged here: the cost is the
        cells' octaves, a few numbers each, however many buckets they hold.
        """
        with self._lock:
            self._fold()
            times = self._times
            cells = []
            for key, cell in sorted(self._cells.items()):
                duration, ttft, tpot = cell.duration, cell.ttft, cell.tpot
                # Merged in once, for a cell new since the last export; then kept.
                duration.tee(times["duration"])
                ttft.tee(times["ttft"])
                tpot.tee(times["tpot"])
                model, route, outcome = key
                cells.append(
                    {
                        "model": model,
                        "route": route,
                        "outcome": outcome,
                        "requests": cell.requests,
                        "input_tokens": cell.input_tokens,
                        "output_tokens": cell.output_tokens,
                        "duration": duration.octaves(),
                        "ttft": ttft.octaves(),
                        "tpot": tpot.octaves(),
                        "input": cell.input.octaves(),
                        "output": cell.output.octaves(),
                    }
                )
            merged = {}
            for name, distribution in times.items():
                merged[name] = dense = distribution.dense()
                # The sum as Distribution.merged adds it: the cells' sums, in their order.
                total = 0.0
                for cell in self._cells.values():
                    total += getattr(cell, name).total
                dense["sum"] = total
            return cells, merged

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


# Folding helpers.

# Durations, TTFTs, TPOTs (seconds), input and output tokens (integers), each sorted.
_Measurements = tuple[list[float], list[float], list[float], list[float], list[float]]


def _measurements(records: list[Record]) -> _Measurements:
    """The records' durations, TTFTs and TPOTs (seconds) and input and output tokens,
    each sorted for ``Distribution.add_sorted``; ``ValueError`` if one is impossible."""
    prompts = list(filter(_PRESENT, map(_PROMPT, records)))
    completions = list(map(_COMPLETION, records))
    try:
        try:
            # The usual batch, in C: decode / 1000.0 / (completion - 1) for each. A None
            # raises TypeError here (in min, or in truediv), and so does a batch with a
            # completion under 2: both go the long way.
            if min(completions) < 2:
                raise TypeError
            tpots = list(
                map(
                    truediv,
                    map(truediv, map(_DECODE, records), repeat(1000.0)),
                    map(sub, completions, repeat(1)),
                )
            )
        except TypeError:
            tpots = [
                decode / 1000.0 / (completion - 1)
                for decode, completion in zip(map(_DECODE, records), completions, strict=True)
                if decode is not None and completion is not None and completion > 1
            ]
        durations = _seconds(_DURATION, records)
        ttfts = _seconds(_TTFT, records)
    except (TypeError, ArithmeticError):
        raise ValueError("a time is not a number") from None
    outputs = list(filter(_PRESENT, completions))
    for tokens in (prompts, outputs):
        # Integers only: a float's sum is a float (and a str's raises).
        try:
            integers = not tokens or type(sum(tokens)) is int
        except TypeError:
            integers = False
        if not integers:
            raise ValueError("a token count is not an integer")
    # Fresh lists: sorted in place.
    return (
        sort_checked(durations),
        sort_checked(ttfts),
        sort_checked(tpots),
        sort_checked(prompts),
        sort_checked(outputs),
    )


def _seconds(column: Callable[[Record], Any], records: list[Record]) -> list[float]:
    """The records' present ``column`` values (ms) in seconds; ``TypeError`` for one that
    is not a number."""
    try:
        # The usual batch, in C, with no None to filter out (a None raises TypeError).
        return list(map(truediv, map(column, records), repeat(1000.0)))
    except TypeError:
        return list(map(truediv, filter(_PRESENT, map(column, records)), repeat(1000.0)))


# A column of a batch, per group: the sum, the zeros and the other values' bucket
# indexes (``Distribution.add_counted``), or None for a group without a value.
_Counted = list[tuple[float, int, list[int]] | None]


def _columns(ordered: list[Record], bounds: list[int]) -> list[_Counted] | None:
    """The durations, TTFTs, TPOTs, input and output tokens of ``ordered`` (records in
    groups: ``bounds[i]`` to ``bounds[i + 1]``), each counted per group; None (or an
    exception) if one is impossible, or a subnormal or -0.0: the checked path's."""
    completions = list(map(_COMPLETION, ordered))
    decodes = list(map(_DECODE, ordered))
    if None not in completions and None not in decodes and min(completions) >= 2:
        tpots = list(
            map(
                truediv,
                map(truediv, decodes, repeat(1000.0)),
                map(sub, completions, repeat(1)),
            )
        )
        tpot_bounds = bounds
    elif None not in completions and None not in decodes:
        # Some with fewer than two tokens: no TPOT for those.
        kept = list(map(lt, repeat(1), completions))
        tpots = list(
            map(
                truediv,
                map(truediv, compress(decodes, kept), repeat(1000.0)),
                map(sub, compress(completions, kept), repeat(1)),
            )
        )
        tpot_bounds = _kept_bounds(kept, bounds)
    else:
        kept = [
            decode is not None and completion is not None and completion > 1
            for decode, completion in zip(decodes, completions, strict=True)
        ]
        tpots = [
            decode / 1000.0 / (completion - 1)
            for decode, completion in compress(zip(decodes, completions, strict=True), kept)
        ]
        tpot_bounds = _kept_bounds(kept, bounds)
    durations, duration_bounds = _present(list(map(_DURATION, ordered)), bounds)
    ttfts, ttft_bounds = _present(list(map(_TTFT, ordered)), bounds)
    prompts, prompt_bounds = _present(list(map(_PROMPT, ordered)), bounds)
    outputs, output_bounds = _present(completions, bounds)
    columns = []
    for values, value_bounds, integers in (
        (list(map(truediv, durations, repeat(1000.0))), duration_bounds, False),
        (list(map(truediv, ttfts, repeat(1000.0))), ttft_bounds, False),
        (tpots, tpot_bounds, False),
        (prompts, prompt_bounds, True),
        (outputs, output_bounds, True),
    ):
        column = _counted(values, value_bounds, integers)
        if column is None:
            return None
        columns.append(column)
    return columns


def _present(values: list[Any], bounds: list[int]) -> tuple[list[Any], list[int]]:
    """``values`` without their Nones, and ``bounds`` moved to match."""
    if None not in values:
        return values, bounds
    kept = list(map(_PRESENT, values))
    return list(compress(values, kept)), _kept_bounds(kept, bounds)


def _kept_bounds(kept: list[bool], bounds: list[int]) -> list[int]:
    # How many values are kept before each bound.
    before = list(accumulate(kept, initial=0))
    return list(map(before.__getitem__, bounds))


def _counted(values: list[Any], bounds: list[int], integers: bool) -> _Counted | None:
    """``values`` counted per group (see ``_Counted``); None if one is impossible (not
    a number >= 0 with a finite sum; for ``integers``, not an int), or a subnormal or
    -0.0 (the checked path takes those)."""
    # Each group's sum is checked below (its own, as the checked path checks it).
    some_zeros = False
    if values:
        lowest = min(values)
        if not lowest >= 0:
            return None
        some_zeros = lowest == 0
    indices = None
    if integers:
        with suppress(IndexError):  # a count past the table: from the bits
            indices = int_indices(values)
    if indices is None:
        indices = bits_indices(values)
    if indices is None:
        return None
    result: _Counted = []
    for start, end in pairwise(bounds):
        if start == end:
            result.append(None)
            continue
        part = indices[start:end]
        total = sum(values[start:end])
        if (integers and type(total) is not int) or not float(total) < _INF:
            return None
        zeros = part.count(ZERO_INDEX) if some_zeros else 0
        if zeros:
            part = list(filter(ZERO_INDEX.__ne__, part))
        result.append((total, zeros, part))
    return result


def _count(cell: Cell, requests: int, values: _Measurements) -> None:
    durations, ttfts, tpots, prompts, outputs = values
    cell.requests += requests
    cell.input_tokens += int(sum(prompts))
    cell.output_tokens += int(sum(outputs))
    cell.duration.add_sorted(durations)
    cell.ttft.add_sorted(ttfts)
    cell.tpot.add_sorted(tpots)
    cell.input.add_sorted(prompts)
    cell.output.add_sorted(outputs)
