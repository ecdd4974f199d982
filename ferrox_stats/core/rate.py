"""What the recent throughput is, and how to report a value nothing has measured.

Ported from FreeToken's ``server/stats.py`` by way of ferrox's ``stats::rate``.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

DEFAULT_SAMPLE_CAP = 4096
DEFAULT_MIN_SPAN_S = 1.0


@dataclass(frozen=True, slots=True)
class RateReading:
    """A rate and what it was computed over.

    ``per_second`` is 0.0 for an observed window with nothing in it (a measured
    zero). ``span_s`` is the span actually divided by; ``samples`` how many samples
    the window held; ``amount`` what they add up to (``per_second * span_s``). Readings
    of several processes combine as amounts over spans, never as averaged rates.
    """

    per_second: float
    window_s: float
    samples: int
    span_s: float
    amount: float = 0.0


class RateWindow:
    """Amounts observed over a sliding window, read as a per-second rate.

    The rate divides the amount in the window by the span actually observed
    (``now`` minus the oldest retained sample, floored at ``min_span_s``), not by
    the window length: 50 tok/s read one second into a 5 s window reads 50, not 10.
    The floor keeps a lone fresh sample from reading as an enormous rate.
    At most ``sample_cap`` samples are kept; past it the oldest go first, which
    shortens the observed span along with the amount.
    """

    def __init__(
        self,
        window_s: float,
        sample_cap: int = DEFAULT_SAMPLE_CAP,
        min_span_s: float | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        if not (isinstance(window_s, int | float) and math.isfinite(window_s) and window_s > 0):
            raise ValueError(f"window_s must be positive seconds, got {window_s!r}")
        if min_span_s is None:
            # The default floor, but never longer than the window itself.
            min_span_s = min(DEFAULT_MIN_SPAN_S, window_s)
        if not isinstance(sample_cap, int) or isinstance(sample_cap, bool) or sample_cap < 1:
            raise ValueError(f"sample_cap must be a positive integer, got {sample_cap!r}")
        if not 0 < min_span_s <= window_s:
            raise ValueError(f"min_span_s must be in (0, window_s], got {min_span_s!r}")
        self.window_s = float(window_s)
        self.sample_cap = sample_cap
        self.min_span_s = float(min_span_s)
        self._samples: deque[tuple[float, float]] = deque(maxlen=sample_cap)
        # An owner that updates several windows at once (ServingStats) shares its
        # lock, so one acquisition covers them all; see ``observe_locked``.
        self._lock = lock if lock is not None else threading.Lock()

    def observe(self, now: float, amount: float) -> None:
        """Record ``amount`` (>= 0) at monotonic time ``now``."""
        if not (amount >= 0 and math.isfinite(amount)):
            raise ValueError(f"amount must be a finite number >= 0, got {amount!r}")
        with self._lock:
            self._samples.append((now, amount))

    def observe_locked(self, now: float, amount: float) -> None:
        """``observe`` for an owner already holding the lock it passed in; no checks."""
        self._samples.append((now, amount))

    def observe_many_locked(self, samples: list[tuple[float, float]]) -> None:
        """``observe_locked`` each ``(now, amount)`` of ``samples``, in order."""
        self._samples.extend(samples)

    def reading(self, now: float) -> RateReading:
        """The rate over the window ending at ``now``; drops samples older than the window."""
        cutoff = now - self.window_s
        with self._lock:
            samples = self._samples
            # One exactly at the cutoff stays.
            while samples and samples[0][0] < cutoff:
                samples.popleft()
            count = len(samples)
            if not count:
                return RateReading(0.0, self.window_s, 0, 0.0)
            span = max(now - samples[0][0], self.min_span_s)
            total = sum(amount for _, amount in samples)
        return RateReading(total / span, self.window_s, count, span, total)

    def per_second(self, now: float) -> float:
        """Shorthand for ``reading(now).per_second``."""
        return self.reading(now).per_second


class LastKnown(Generic[T]):
    """A value only some reports carry: ``None`` until one did, and after ``max_age_s``.

    A report without the value (``None``) does not overwrite what is known.
    """

    def __init__(self, max_age_s: float | None = None) -> None:
        if max_age_s is not None and not max_age_s > 0:
            raise ValueError(f"max_age_s must be positive or None, got {max_age_s!r}")
        self.max_age_s = max_age_s
        self._value: T | None = None
        self._at: float | None = None
        self._lock = threading.Lock()

    def observe(self, now: float, value: T | None) -> None:
        """Take ``value`` reported at ``now``; ``None`` means the report did not carry it."""
        if value is None:
            return
        with self._lock:
            self._value = value
            self._at = now

    def get(self, now: float) -> T | None:
        """The last reported value, or ``None`` if none was reported or it is too old."""
        with self._lock:
            value, at = self._value, self._at
        if at is None:
            return None
        if self.max_age_s is not None and now - at > self.max_age_s:
            return None
        return value

    def age_s(self, now: float) -> float | None:
        """Seconds since the last report that carried the value, or ``None``."""
        with self._lock:
            at = self._at
        return None if at is None else now - at


def pool_occupancy(used: float | None, total: float | None) -> float | None:
    """The fraction of a pool in use, or ``None`` when the report does not describe a pool.

    A report with ``total`` 0 (or missing) is no report, not an empty pool.
    """
    if used is None or total is None or total <= 0:
        return None
    if not 0 <= used <= total:
        raise ValueError(f"used must be in [0, total={total!r}], got {used!r}")
    return used / total


# The most a gauge may report. Pool sizes may count bytes, blocks or tokens: 2**53
# (about 9.0e15) is the largest integer a float holds exactly. A billion requests
# waiting in one queue is no measurement but a producer's bug.
GAUGE_MAXIMA = {"pool_used": float(2**53), "pool_total": float(2**53), "queue_depth": 1e9}


def gauge_problem(
    pool_used: object = None, pool_total: object = None, queue_depth: object = None
) -> str | None:
    """Why a gauge report cannot be a measurement, or ``None`` if it can.

    A gauge that is present (not ``None``) is a number (not a bool), finite, from 0 to
    its ``GAUGE_MAXIMA``; ``pool_used`` never exceeds ``pool_total``.
    """
    values = {"pool_used": pool_used, "pool_total": pool_total, "queue_depth": queue_depth}
    for name, value in values.items():
        if value is None:
            continue
        most = GAUGE_MAXIMA[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{name} must be a number"
        # An int is compared as it is: float() of a huge one would raise.
        if not (isinstance(value, int) or math.isfinite(value)) or not 0 <= value <= most:
            return f"{name} must be a finite number from 0 to {most:.0f}"
    if (
        isinstance(pool_used, int | float)
        and isinstance(pool_total, int | float)
        and pool_used > pool_total
    ):
        return "pool_used exceeds pool_total"
    return None
