"""The token database's circuit breaker: once a lookup failed, no request waits on it.

``tokens`` asks it before each lookup; while it is open callers answer from what
they already know (or raise ``Unavailable``) and one probe a ``RETRY_S`` asks the
database in the background.
"""

from __future__ import annotations

import logging
import math
import threading

__all__ = ["RETRY_S", "Breaker", "Unavailable"]

logger = logging.getLogger("ferrox_stats.tokens")

# Seconds between probes of a database taken as unreachable.
RETRY_S = 1.0


class Unavailable(Exception):
    """The database could not be asked and this process has no answer it may still give;
    ask again after ``retry_after_s`` seconds (answer 503 with ``Retry-After``)."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"the token database is unreachable; retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


class Breaker:
    """A circuit breaker: whether the token database is taken as unreachable.

    Open after a lookup failed: no caller waits on the database any more, each answers
    at once from the last good answers (or with ``Unavailable``), and one probe a
    ``RETRY_S`` asks the database in the background; its answer closes the breaker.
    """

    def __init__(self) -> None:
        self._retry_at: float | None = None
        self._lock = threading.Lock()

    @property
    def open(self) -> bool:
        return self._retry_at is not None

    def claim_probe(self, now: float) -> bool:
        """Whether a probe is due at ``now``; the caller that gets True makes it."""
        with self._lock:
            if self._retry_at is None or now < self._retry_at:
                return False
            self._retry_at = now + RETRY_S
            return True

    def failed(self, now: float, exc: BaseException | None) -> None:
        with self._lock:
            opened = self._retry_at is None
            self._retry_at = now + RETRY_S
        if opened:
            logger.warning(
                "ferrox_stats: the token database is unreachable (%s); answering from "
                "tokens checked within TOKEN_STALE_S, others get 503",
                type(exc).__name__ if exc is not None else "no answer in time",
            )

    def answered(self) -> None:
        with self._lock:
            closed = self._retry_at is not None
            self._retry_at = None
        if closed:
            logger.warning("ferrox_stats: the token database answers again")

    def retry_after_s(self, now: float) -> int:
        retry_at = self._retry_at
        return max(1, math.ceil(retry_at - now)) if retry_at is not None else 1

    def reset(self) -> None:
        """Forget any outage (tests)."""
        with self._lock:
            self._retry_at = None
