"""What is in flight right now, and what completed or aborted.

Counting rules are FreeToken's, pinned by its tests:

- ``begin(key)`` puts a request in flight.
- ``abort(key, reason)`` counts ``aborts[reason]`` once; the request stays in flight,
  marked aborting, until its terminal report.
- ``finish(key, error)`` is the terminal report. An aborting request counts nothing
  more (not a completion, and its error is not counted again). Any other counts as
  completed, and one that carried an error counts ``aborts["error"]`` too.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass, field
from operator import itemgetter

from .rate import DEFAULT_SAMPLE_CAP, RateReading, RateWindow

_AMOUNT = itemgetter(1)

CLIENT_DISCONNECT = "client_disconnect"
EXPLICIT = "explicit"
TIMEOUT = "timeout"
ERROR = "error"


@dataclass(frozen=True, slots=True)
class ServingSnapshot:
    """The counters and rates at one instant."""

    active: int
    completed: int
    aborts: dict[str, int] = field(default_factory=dict)
    prompt_tokens_total: int = 0
    completion_tokens_total: int = 0
    decode: RateReading | None = None
    prefill: RateReading | None = None


class ServingStats:
    """Thread-safe in-flight set, completion and abort counters, token totals and rates.

    Each public method takes the lock itself. An owner that batches updates (the
    ``Recorder``, which queues its requests' reports and folds them when read) holds
    ``lock`` once and calls the ``*_locked`` forms; ``leave`` takes none in the usual
    case. A ``Tracker`` puts itself in flight with one store into the in-flight dict
    (unique keys, begun once: ``begin``'s check is its own).
    """

    def __init__(
        self,
        window_s: float = 5.0,
        sample_cap: int = DEFAULT_SAMPLE_CAP,
        min_span_s: float | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self.lock = self._lock
        # key -> aborting?
        self._inflight: dict[Hashable, bool] = {}
        self._completed = 0
        self._aborts: dict[str, int] = {}
        self._prompt_tokens_total = 0
        self._completion_tokens_total = 0
        self.decode = RateWindow(window_s, sample_cap, min_span_s, lock=self._lock)
        self.prefill = RateWindow(window_s, sample_cap, min_span_s, lock=self._lock)

    def begin(self, key: Hashable) -> None:
        """Put ``key`` in flight; a key already in flight is an error in the caller."""
        with self._lock:
            if key in self._inflight:
                raise ValueError(f"request {key!r} is already in flight")
            self._inflight[key] = False

    def abort(self, key: Hashable, reason: str = CLIENT_DISCONNECT) -> bool:
        """Count an abort of ``key`` under ``reason``; it stays in flight until ``finish``.

        Returns whether it was counted: a request not in flight, or already aborting,
        is not counted twice.
        """
        with self._lock:
            # Taken out and put back, so a ``leave`` racing this waits for the lock.
            aborting = self._inflight.pop(key, None)
            if aborting is None:
                return False
            self._inflight[key] = True
            if aborting:
                return False
            self._aborts[reason] = self._aborts.get(reason, 0) + 1
            return True

    def finish(self, key: Hashable, error: bool = False) -> bool:
        """The terminal report for ``key``: it leaves flight. Returns whether it was in flight."""
        with self._lock:
            return self.finish_locked(key, error)

    def finish_locked(self, key: Hashable, error: bool = False) -> bool:
        """``finish`` for an owner holding ``lock``."""
        aborting = self._inflight.pop(key, None)
        if aborting is None:
            return False
        if not aborting:
            self.count_finished_locked(None, error)
        return True

    def count_completed_locked(self, completed: int, errors: int) -> None:
        """``completed`` requests (``count_finished`` without an abort), ``errors`` of them
        with an error; for an owner holding ``lock``."""
        self._completed += completed
        if errors:
            self._aborts[ERROR] = self._aborts.get(ERROR, 0) + errors

    def leave(self, key: Hashable) -> bool | None:
        """Take ``key`` out of flight without counting it; whether it was aborting
        (``None``: it was not in flight). The caller counts it later, as ``finish`` would
        have: nothing if aborting, else ``count_finished_locked(None, error)``.

        No lock in the usual case (``dict.pop`` is atomic in CPython); only when the key
        is missing, it waits for an ``abort`` that may be between taking it out and
        putting it back.
        """
        aborting = self._inflight.pop(key, None)
        if aborting is None:
            with self._lock:
                aborting = self._inflight.pop(key, None)
        return aborting

    def count_finished(self, aborted: str | None = None, error: bool = False) -> None:
        """Count a request that was never in flight here (reported after it finished).

        The same rules as ``abort`` + ``finish``: an aborted one counts under its reason
        only; any other is a completion, and an ``error`` one counts ``aborts["error"]`` too.
        """
        with self._lock:
            self.count_finished_locked(aborted, error)

    def count_finished_locked(self, aborted: str | None = None, error: bool = False) -> None:
        """``count_finished`` for an owner holding ``lock``."""
        if aborted is not None:
            self._aborts[aborted] = self._aborts.get(aborted, 0) + 1
        else:
            self._completed += 1
            if error:
                self._aborts[ERROR] = self._aborts.get(ERROR, 0) + 1

    def observe_tokens(self, now: float, prompt: int = 0, completion: int = 0) -> None:
        """Token deltas seen at ``now``: they grow the lifetime totals and feed the rates."""
        # ``not >= 0`` also refuses NaN, which would poison the rates.
        if not (prompt >= 0 and completion >= 0):
            raise ValueError(f"token deltas must be >= 0, got {prompt!r}, {completion!r}")
        with self._lock:
            self.observe_tokens_locked(now, prompt, completion)

    def observe_tokens_locked(self, now: float, prompt: int = 0, completion: int = 0) -> None:
        """``observe_tokens`` for an owner holding ``lock``, with deltas it checked."""
        if prompt:
            self._prompt_tokens_total += prompt
            self.prefill.observe_locked(now, prompt)
        if completion:
            self._completion_tokens_total += completion
            self.decode.observe_locked(now, completion)

    def observe_many_locked(
        self, prefill: list[tuple[float, int]], decode: list[tuple[float, int]]
    ) -> None:
        """``observe_tokens_locked`` of many reports, split: each ``(now, delta)`` with a
        prompt delta, then each with a completion delta, each list in report order."""
        if prefill:
            self._prompt_tokens_total += sum(map(_AMOUNT, prefill))
            self.prefill.observe_many_locked(prefill)  # type: ignore[arg-type]
        if decode:
            self._completion_tokens_total += sum(map(_AMOUNT, decode))
            self.decode.observe_many_locked(decode)  # type: ignore[arg-type]

    @property
    def active(self) -> int:
        return len(self._inflight)

    def is_inflight(self, key: Hashable) -> bool:
        return key in self._inflight

    def snapshot(self, now: float) -> ServingSnapshot:
        """Every counter, and both rates read at ``now``."""
        with self._lock:
            active = len(self._inflight)
            completed = self._completed
            aborts = dict(self._aborts)
            prompt_total = self._prompt_tokens_total
            completion_total = self._completion_tokens_total
        # Read outside our lock: the windows take it themselves.
        return ServingSnapshot(
            active=active,
            completed=completed,
            aborts=aborts,
            prompt_tokens_total=prompt_total,
            completion_tokens_total=completion_total,
            decode=self.decode.reading(now),
            prefill=self.prefill.reading(now),
        )
