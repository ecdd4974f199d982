"""When the archive writer tries a failed batch again, and when it only probes the database.

A batch that could not commit is retried with exponential backoff, up to
``ARCHIVE_RETRY_MAX_S``, so a batch that fails for its own reasons does not hammer
the database. While it waits, the database is probed (a connection and ``SELECT 1``)
every ``probe_s``: a probe that answers after one that did not means the database came
back, and the batch is due at once (once: should it fail again with the database up,
the backoff stands). So the backlog resumes within about ``probe_s``
of the database answering, not after what is left of the backoff.
"""

from __future__ import annotations

__all__ = ["PROBE", "RETRY", "Retry"]

RETRY = "retry"  # write the batch at the head of the queue again
PROBE = "probe"  # ask the database whether it answers, nothing more


class Retry:
    """The writer's retry schedule; ``now`` is passed in (seconds, monotonic)."""

    def __init__(self, retry_max_s: float, probe_s: float = 1.0, first_s: float = 0.1) -> None:
        self.retry_max_s = retry_max_s
        self.probe_s = probe_s
        self.first_s = first_s
        self.backoff = 0.0
        self._retry_at: float | None = None
        self._probe_at: float | None = None
        self._unreachable = False

    @property
    def waiting(self) -> bool:
        """Whether a failed batch waits for its retry."""
        return self._retry_at is not None

    def failed(self, now: float) -> None:
        """The batch could not commit at ``now``: back off, and probe meanwhile."""
        self.backoff = min(max(self.backoff * 2, self.first_s), self.retry_max_s)
        self._retry_at = now + self.backoff
        self._probe_at = now + self.probe_s if self.probe_s < self.backoff else None
        # A probe that failed before stays known: the database has not answered since.

    def succeeded(self) -> None:
        """The batch committed: no backoff any more."""
        self.backoff = 0.0
        self._retry_at = self._probe_at = None
        self._unreachable = False

    def due(self, now: float) -> str | None:
        """What to do at ``now`` while waiting: ``RETRY``, ``PROBE`` or nothing yet."""
        if self._retry_at is None or now >= self._retry_at:
            return RETRY
        if self._probe_at is not None and now >= self._probe_at:
            return PROBE
        return None

    def wait_s(self, now: float) -> float:
        """Seconds from ``now`` until something is due (0 when something is)."""
        if self._retry_at is None:
            return 0.0
        until = self._retry_at if self._probe_at is None else min(self._retry_at, self._probe_at)
        return max(0.0, until - now)

    def probed(self, now: float, answered: bool) -> None:
        """A probe at ``now`` found the database answering, or not."""
        if not answered:
            self._unreachable = True
            self._probe_at = now + self.probe_s
        elif self._unreachable:
            # It was unreachable and answers again: the batch is due now.
            self._unreachable = False
            self._retry_at = now
            self._probe_at = None
        else:
            # Reachable all along: the batch failed for its own reasons; wait the backoff out.
            self._probe_at = None
