"""What one rollup cell sums about its finished requests: ``Tally``.

A cell is one time bucket and one group of the archive's rollups (``archive/rollups``):
how many requests, their token sums, their abort reasons, and three mergeable latency
distributions (``core.distribution``) in seconds, as ``core.breakdown``'s cells have them:

- ``duration``: arrival to end (``duration_ms / 1000``);
- ``ttft``: arrival to first token (``ttft_ms / 1000``);
- ``tpot``: the decode loop's seconds per output token after the first
  (``decode_ms / 1000 / (completion_tokens - 1)``, for 2 tokens or more).

A value a record lacks is skipped, never counted as 0. A value no real request has (a
token count above ``MAX_TOKENS``, a time above ``MAX_SECONDS``, or one that is negative
or not finite; the archive's CHECKs refuse the last two) is left out of its sum or
distribution and counted in ``out_of_range`` instead, so no record can overflow a sum
and make every later batch of the archive fail. Tallies merge exactly (counts and
buckets; the float sums of the distributions up to rounding).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from functools import reduce
from itertools import accumulate, chain, compress
from operator import add, lt
from typing import Any, TypeVar

from .distribution import MAX_COUNT, MAX_INDEX, MIN_INDEX, ZERO_INDEX, Distribution, bits_indices
from .requests import Record

K = TypeVar("K", bound=Hashable)
_NONE = type(None)

__all__ = [
    "KNOWN_ABORTS",
    "MAX_SECONDS",
    "MAX_TOKENS",
    "TIMES",
    "Tally",
    "canonical_ints",
    "merge_stored",
    "stored_distribution",
]

MAX_TOKENS = 2**40
"""The largest token count a record adds to a sum (about 10**12; real requests: < 10**7)."""
MAX_SECONDS = 1e9
"""The largest time (s) a record adds to a distribution (about 31 years)."""
TIMES = ("duration", "ttft", "tpot")
_SLOTS = tuple((name, f"_{name}") for name in TIMES)  # each distribution's slot
KNOWN_ABORTS = ("client_disconnect", "explicit", "timeout")
"""The abort reasons every feeder gives (``core.serving``): a rollup row counts each
in a column of its own, summed by the database; any other reason in its JSON."""


# Built once: json.dumps with any argument builds an encoder per call.
_encode_sorted = json.JSONEncoder(separators=(",", ":"), sort_keys=True).encode


_decode_ints = json.JSONDecoder().decode
# What a canonical list of integers holds besides: deleted by ``str.translate``.
_INTEGER_TEXT = str.maketrans("", "", "0123456789,-")


def canonical_ints(text: str) -> list[int] | None:
    """The integers of ``text`` if it is one or more comma-separated canonical integers
    (as ``str`` writes them: no sign but a minus, no leading zero, no -0, no space),
    else None. JSON's C parser reads them twice as fast as int() each; given digits,
    commas and minus signs alone it accepts exactly ``-?(0|[1-9][0-9]*)`` items, -0
    aside: checked so, in a tenth of a regular expression's full match."""
    if not text or text.translate(_INTEGER_TEXT) or "-0" in text:
        return None
    try:
        return _decode_ints(f"[{text}]")  # type: ignore[no-any-return]
    except ValueError:  # not items (",,", "1-2"), or more digits than int() reads
        return None


def _stored_parts(text: str) -> tuple[int, float, list[int], list[int]]:
    """``zeros``, ``total``, and the bucket indexes and counts of a non-empty text that
    ``_text`` wrote; ``ValueError`` for anything it could not have."""
    try:
        zeros_text, total_text, pairs = text.split(";")
        zeros, total = int(zeros_text), float(total_text)
        numbers = canonical_ints(pairs) if pairs else []
        canonical = numbers is not None
        numbers = numbers or []
    except ValueError:  # too many digits for int()
        raise ValueError(f"not a stored distribution: {text[:40]!r}") from None
    indices, counts = numbers[0::2], numbers[1::2]
    if not (
        # Canonical numbers only (int() and float() take " 1", "+1", "1_0", "1e0"...),
        # indexes ascending (no bucket twice), counts and zeros in range.
        canonical
        and str(zeros) == zeros_text
        and repr(total) == total_text
        and len(indices) == len(counts)
        and 0 <= zeros <= MAX_COUNT
        and math.isfinite(total)
        and total >= 0
        and (not counts or (min(counts) >= 1 and max(counts) <= MAX_COUNT))
        and (not indices or (indices[0] >= MIN_INDEX and indices[-1] <= MAX_INDEX))
        and all(map(lt, indices, indices[1:]))
        and (zeros or counts)
    ):
        raise ValueError(f"not a stored distribution: {text[:40]!r}")
    if zeros + sum(counts) > MAX_COUNT:
        raise ValueError(f"a distribution may hold at most {MAX_COUNT} values")
    return zeros, total, indices, counts


def stored_distribution(text: str) -> Distribution:
    """The distribution ``_text`` wrote; ``ValueError`` for anything it could not have."""
    result = Distribution()
    if text:
        result.zeros, result.total, indices, counts = _stored_parts(text)
        result.counts = dict(zip(indices, counts, strict=True))
    return result


def merge_stored(into: Distribution, text: str) -> None:
    """Add the distribution ``_text`` wrote to ``into``: ``into.merge`` of
    ``stored_distribution(text)`` without making it (no dict of its buckets to build
    and walk again: merging a range's day rows per key was half parsing, half merging).
    ``ValueError`` for anything ``_text`` could not have written, ``into`` unchanged."""
    if text:
        into.merge_buckets(*_stored_parts(text))


def _text(distribution: Distribution) -> str:
    """``zeros;sum;index,count,index,count,...`` (the non-empty buckets, ascending): a
    sparse form, since a cell's values fill a few of the buckets their range spans;
    ``""`` for an empty distribution."""
    if not distribution.count:
        return ""
    pairs = ",".join(map(str, chain.from_iterable(sorted(distribution.counts.items()))))
    return f"{distribution.zeros};{distribution.total!r};{pairs}"


def _given(value: object) -> bool:
    return value is not None


def _seconds(
    values: Sequence[float | None], bounds: list[int], scale: float
) -> tuple[list[float], list[int], list[int], bool] | None:
    """``values`` (``scale`` to a second, None for none) as seconds without the Nones, their bucket
    indexes, each group's bounds in them, and whether a zero is among them; None if one
    is not a number ``Tally.add`` counts."""
    kinds = set(map(type, values))
    if not kinds <= {float, int, _NONE}:
        return None
    if _NONE in kinds:
        kept = list(map(_given, values))
        present: list[float] = list(compress(values, kept))  # type: ignore[arg-type]
        running = [0, *accumulate(kept)]
        starts = [running[b] for b in bounds]
    else:
        present, starts = list(values), bounds  # type: ignore[arg-type]  # no None
    try:
        seconds = [v / scale for v in present] if scale != 1.0 else present
    except OverflowError:
        return None
    if seconds and not (
        min(seconds) >= 0 and max(seconds) <= MAX_SECONDS and math.isfinite(sum(seconds))
    ):
        return None
    indices = bits_indices(seconds)
    if indices is None:
        return None  # a subnormal or a -0.0: add() takes them one at a time
    return seconds, indices, starts, ZERO_INDEX in indices


class _MadeWhenRead:
    """A ``Tally`` distribution made the first time it is read: a tally read for its
    counters alone (most usage answers) makes none, so holds three objects fewer of
    the many the garbage collector walks."""

    __slots__ = ("slot",)

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = owner.__dict__[f"_{name}"]  # the slot behind it

    def __get__(self, tally: Tally, owner: type | None = None) -> Distribution:
        try:
            made: Distribution = self.slot.__get__(tally, owner)
        except AttributeError:
            made = Distribution()
            self.slot.__set__(tally, made)
        return made

    def __set__(self, tally: Tally, distribution: Distribution) -> None:
        self.slot.__set__(tally, distribution)


def positions(keys: Iterable[K]) -> dict[K, list[int]]:
    """Each distinct key's positions in ``keys``, the keys in order of first arrival."""
    found: dict[K, list[int]] = {}
    for i, key in enumerate(keys):
        seen = found.get(key)
        if seen is None:
            found[key] = [i]
        else:
            seen.append(i)
    return found


class Tally:
    """The sums of one rollup cell; see the module docstring."""

    __slots__ = (
        "_duration",
        "_tpot",
        "_ttft",
        "aborted",
        "aborts",
        "cached_tokens",
        "completion_tokens",
        "errors",
        "out_of_range",
        "prompt_tokens",
        "requests",
    )
    _FIELDS = (
        "aborted",
        "aborts",
        "cached_tokens",
        "completion_tokens",
        "duration",
        "errors",
        "out_of_range",
        "prompt_tokens",
        "requests",
        "tpot",
        "ttft",
    )
    duration = _MadeWhenRead()
    ttft = _MadeWhenRead()
    tpot = _MadeWhenRead()

    def __init__(self) -> None:
        self.requests = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cached_tokens = 0
        self.out_of_range = 0
        # The requests of the error and of the aborted outcome: the caller's to count
        # (the archive's outcome, ``archive.rows.outcome``); ``merge`` sums them.
        self.errors = 0
        self.aborted = 0
        self.aborts: dict[str, int] = {}

    def add(self, record: Record) -> None:
        """Count one finished request."""
        self.requests += 1
        self.prompt_tokens += self._tokens(record.prompt_tokens)
        completion = record.completion_tokens
        self.completion_tokens += self._tokens(completion)
        self.cached_tokens += self._tokens(record.cached_tokens)
        if record.aborted is not None:
            self.aborts[record.aborted] = self.aborts.get(record.aborted, 0) + 1
        if record.duration_ms is not None:
            self._time(self.duration, record.duration_ms / 1000.0)
        if record.ttft_ms is not None:
            self._time(self.ttft, record.ttft_ms / 1000.0)
        decode = record.decode_ms
        if decode is not None and isinstance(completion, int) and completion > 1:
            # As core.breakdown computes it: decode seconds per token after the first.
            self._time(self.tpot, decode / 1000.0 / (completion - 1))

    def _tokens(self, value: int | None) -> int:
        if value is None:
            return 0
        if isinstance(value, int) and 0 <= value <= MAX_TOKENS:
            return value
        self.out_of_range += 1
        return 0

    def _time(self, distribution: Distribution, seconds: float) -> None:
        if isinstance(seconds, float) and math.isfinite(seconds) and 0 <= seconds <= MAX_SECONDS:
            distribution.add(seconds)
        else:
            self.out_of_range += 1

    def merge(self, other: Tally) -> None:
        """Add ``other``'s requests to this tally."""
        self.merge_counters(other)
        # Only the distributions ``other`` made (by reading them) and filled.
        for name, slot in _SLOTS:
            theirs: Distribution | None = getattr(other, slot, None)
            if theirs is not None and theirs.count:
                getattr(self, name).merge(theirs)

    def merge_counters(self, other: Tally) -> None:
        """Add ``other``'s counters and abort reasons, not its distributions: what a
        rollup level that keeps counts only sums (``archive.rollups.COUNTED_LEVELS``)."""
        self.requests += other.requests
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached_tokens += other.cached_tokens
        self.out_of_range += other.out_of_range
        self.errors += other.errors
        self.aborted += other.aborted
        for reason, n in other.aborts.items():
            self.aborts[reason] = self.aborts.get(reason, 0) + n

    # -- storage ---------------------------------------------------------------------

    def known_aborts(self) -> tuple[int, ...]:
        """How many requests each of ``KNOWN_ABORTS`` aborted."""
        aborts = self.aborts
        return tuple(aborts.get(reason, 0) for reason in KNOWN_ABORTS)

    def texts(self, *, known_aborts: bool = True) -> tuple[str, str, str, str]:
        """``aborts``, ``duration``, ``ttft``, ``tpot`` as stored: the aborts as compact
        JSON (without ``KNOWN_ABORTS`` when ``known_aborts`` is False: a row counts them
        in columns), each distribution as ``zeros;sum;index,count,...`` (its non-empty
        buckets, ascending); ``""`` for an empty one."""
        aborts = self.aborts
        if not known_aborts and aborts:
            aborts = {reason: n for reason, n in aborts.items() if reason not in KNOWN_ABORTS}
        return (
            _encode_sorted(aborts) if aborts else "",
            _text(self.duration),
            _text(self.ttft),
            _text(self.tpot),
        )

    def merge_texts(self, aborts: str, duration: str, ttft: str, tpot: str) -> None:
        """Add what ``texts`` stored (counters are the caller's); ``ValueError`` for
        anything ``texts`` could not have written."""
        if aborts:
            stored = json.loads(aborts)
            if not isinstance(stored, Mapping):
                raise ValueError("aborts must be a JSON object")
            for reason, n in stored.items():
                if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                    raise ValueError(f"abort count of {reason!r} must be an integer >= 0")
                self.aborts[reason] = self.aborts.get(reason, 0) + n
        merge_stored(self.duration, duration)
        merge_stored(self.ttft, ttft)
        merge_stored(self.tpot, tpot)

    @classmethod
    def stored(
        cls, counters: Sequence[int], texts: tuple[str, ...], known_aborts: Sequence[int] = ()
    ) -> Tally:
        """The tally a stored row holds: ``(requests, prompt, completion, cached,
        out_of_range[, errors, aborted])``, what ``texts`` wrote and the counts of
        ``KNOWN_ABORTS`` kept apart from them (``known_aborts``, in that order)."""
        tally = cls()
        (
            tally.requests,
            tally.prompt_tokens,
            tally.completion_tokens,
            tally.cached_tokens,
            tally.out_of_range,
        ) = counters[:5]
        if len(counters) > 5:
            tally.errors, tally.aborted = counters[5:]
        for reason, n in zip(KNOWN_ABORTS, known_aborts, strict=False):
            if n:
                tally.aborts[reason] = n
        aborts, duration, ttft, tpot = texts
        tally.merge_texts(aborts, duration, ttft, tpot)
        return tally

    @classmethod
    def grouped(cls, keys: Sequence[K], records: Sequence[Record]) -> dict[K, Tally] | None:
        """The tally of each key's records (``keys[i]`` is ``records[i]``'s), equal to
        ``add``-ing them one at a time in order, computed a column at a time (C-level
        passes, no Python step per record and value); None if some value is one that
        ``add`` leaves out (out of range, not a number), for the caller to ``add``."""
        members = positions(keys)
        order = [i for group in members.values() for i in group]
        bounds = [0, *accumulate(map(len, members.values()))]
        columns = list(zip(*map(records.__getitem__, order), strict=True))
        if not columns:
            return {}
        fields = Record._fields
        column = dict(zip(fields, columns, strict=True))
        tokens = [column[name] for name in ("prompt_tokens", "completion_tokens", "cached_tokens")]
        for values in tokens:
            if not set(map(type, values)) <= {int, _NONE}:
                return None
            present = list(filter(None, values))
            if present and not (min(present) >= 0 and max(present) <= MAX_TOKENS):
                return None
        completions = column["completion_tokens"]
        decodes = column["decode_ms"]
        if not set(map(type, decodes)) <= {float, int, _NONE}:
            return None
        try:
            # As add() computes it (the same float operations, in the same order).
            tpot: Sequence[float | None] = [
                d / 1000.0 / (c - 1) if d is not None and c is not None and c > 1 else None
                for d, c in zip(decodes, completions, strict=True)
            ]
        except OverflowError:
            return None
        times = []
        timed_columns: tuple[tuple[Sequence[float | None], float], ...] = (
            (column["duration_ms"], 1000.0),
            (column["ttft_ms"], 1000.0),
            (tpot, 1.0),
        )
        for timed_values, scale in timed_columns:
            timed = _seconds(timed_values, bounds, scale)
            if timed is None:
                return None
            times.append(timed)
        aborted = column["aborted"]
        result: dict[K, Tally] = {}
        for n, key in enumerate(members):
            lo, hi = bounds[n], bounds[n + 1]
            tally = result[key] = cls()
            tally.requests = hi - lo
            tally.prompt_tokens, tally.completion_tokens, tally.cached_tokens = (
                sum(filter(None, values[lo:hi])) for values in tokens
            )
            reasons = aborted[lo:hi]
            if reasons.count(None) != hi - lo:
                tally.aborts = dict(Counter(filter(_given, reasons)))
            for distribution, (seconds, indices, starts, zeros) in zip(
                (tally.duration, tally.ttft, tally.tpot), times, strict=True
            ):
                a, b = starts[n], starts[n + 1]
                if a == b:
                    continue
                part = indices[a:b]
                nil = part.count(ZERO_INDEX) if zeros else 0
                if nil:
                    part = [i for i in part if i != ZERO_INDEX]
                # The sum in record order, as add() would have summed it.
                distribution.add_counted(reduce(add, seconds[a:b], 0.0), nil, part)
        return result

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tally):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self._FIELDS)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"<Tally requests={self.requests}>"

    def wire(self) -> dict[str, Any]:
        """The counters as a dict (the distributions left to the caller)."""
        return {
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "out_of_range": self.out_of_range,
            "aborts": dict(self.aborts),
        }
