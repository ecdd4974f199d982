"""The app's settings: one namespaced ``FERROX_STATS`` dict, read at access time.

Each key has a default and one typed accessor; ``checks.py`` validates them.
"""

from __future__ import annotations

import socket
from typing import Any

from django.conf import settings as django_settings

DEFAULTS: dict[str, Any] = {
    # Finished requests each process keeps in memory for the since-cursor poll.
    "RING_CAPACITY": 1024,
    # The most rows one poll returns, whatever ``limit`` asks; at most RING_CAPACITY.
    "MAX_PAGE": 256,
    # Seconds the decode/prefill throughput windows span.
    "RATE_WINDOW_S": 5.0,
    # Samples each throughput window keeps at most.
    "RATE_SAMPLE_CAP": 4096,
    # Seconds: the least span a rate divides by, so one fresh sample cannot explode.
    "RATE_MIN_SPAN_S": 1.0,
    # Seconds after which a gauge only some reports carry (pool occupancy, queue
    # depth) reads null again; None keeps the last report forever.
    "GAUGE_MAX_AGE_S": 60.0,
    # The name this process records as ``replica``; None means the host name.
    "REPLICA": None,
    # Dotted path of a callable returning the sink finished records are handed to
    # (the archive). None keeps records in memory only.
    "ARCHIVE_SINK": None,
}


class Settings:
    """Typed accessors over ``settings.FERROX_STATS``, falling back to ``DEFAULTS``."""

    def _get(self, name: str) -> Any:
        user = getattr(django_settings, "FERROX_STATS", {}) or {}
        return user.get(name, DEFAULTS[name])

    @property
    def user_settings(self) -> Any:
        return getattr(django_settings, "FERROX_STATS", {})

    @property
    def RING_CAPACITY(self) -> int:
        return int(self._get("RING_CAPACITY"))

    @property
    def MAX_PAGE(self) -> int:
        return int(self._get("MAX_PAGE"))

    @property
    def RATE_WINDOW_S(self) -> float:
        return float(self._get("RATE_WINDOW_S"))

    @property
    def RATE_SAMPLE_CAP(self) -> int:
        return int(self._get("RATE_SAMPLE_CAP"))

    @property
    def RATE_MIN_SPAN_S(self) -> float:
        return float(self._get("RATE_MIN_SPAN_S"))

    @property
    def GAUGE_MAX_AGE_S(self) -> float | None:
        value = self._get("GAUGE_MAX_AGE_S")
        return None if value is None else float(value)

    @property
    def REPLICA(self) -> str:
        value = self._get("REPLICA")
        return str(value) if value else socket.gethostname()

    @property
    def ARCHIVE_SINK(self) -> str | None:
        value = self._get("ARCHIVE_SINK")
        return None if value is None else str(value)


conf = Settings()
