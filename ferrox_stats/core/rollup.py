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
from collections.abc import Mapping
from typing import Any

from .distribution import Distribution
from .requests import Record

__all__ = ["MAX_SECONDS", "MAX_TOKENS", "TIMES", "Tally"]

MAX_TOKENS = 2**40
"""The largest token count a record adds to a sum (about 10**12; real requests: < 10**7)."""
MAX_SECONDS = 1e9
"""The largest time (s) a record adds to a distribution (about 31 years)."""
TIMES = ("duration", "ttft", "tpot")


def _dense(text: str) -> Distribution:
    return Distribution.from_dense(json.loads(text)) if text else Distribution()


def _text(distribution: Distribution) -> str:
    return json.dumps(distribution.dense(), separators=(",", ":")) if distribution.count else ""


class Tally:
    """The sums of one rollup cell; see the module docstring."""

    __slots__ = (
        "aborts",
        "cached_tokens",
        "completion_tokens",
        "duration",
        "out_of_range",
        "prompt_tokens",
        "requests",
        "tpot",
        "ttft",
    )

    def __init__(self) -> None:
        self.requests = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cached_tokens = 0
        self.out_of_range = 0
        self.aborts: dict[str, int] = {}
        self.duration = Distribution()
        self.ttft = Distribution()
        self.tpot = Distribution()

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
        self.requests += other.requests
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached_tokens += other.cached_tokens
        self.out_of_range += other.out_of_range
        for reason, n in other.aborts.items():
            self.aborts[reason] = self.aborts.get(reason, 0) + n
        self.duration.merge(other.duration)
        self.ttft.merge(other.ttft)
        self.tpot.merge(other.tpot)

    # -- storage ---------------------------------------------------------------------

    def texts(self) -> tuple[str, str, str, str]:
        """``aborts``, ``duration``, ``ttft``, ``tpot`` as stored: compact JSON (the
        distributions' dense form), ``""`` for an empty one."""
        aborts = json.dumps(self.aborts, separators=(",", ":"), sort_keys=True)
        return (
            aborts if self.aborts else "",
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
        self.duration.merge(_dense(duration))
        self.ttft.merge(_dense(ttft))
        self.tpot.merge(_dense(tpot))

    @classmethod
    def stored(cls, counters: tuple[int, int, int, int, int], texts: tuple[str, ...]) -> Tally:
        """The tally a stored row holds: ``(requests, prompt, completion, cached,
        out_of_range)`` and what ``texts`` wrote."""
        tally = cls()
        (
            tally.requests,
            tally.prompt_tokens,
            tally.completion_tokens,
            tally.cached_tokens,
            tally.out_of_range,
        ) = counters
        aborts, duration, ttft, tpot = texts
        tally.merge_texts(aborts, duration, ttft, tpot)
        return tally

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tally):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

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
