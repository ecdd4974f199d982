"""Throttles whose rates come from ``FERROX_STATS["THROTTLE_RATES"]``, not DRF's global setting."""

from __future__ import annotations

from rest_framework.throttling import ScopedRateThrottle

from ..conf import conf


class FerroxScopedRateThrottle(ScopedRateThrottle):
    def get_rate(self) -> str | None:
        return conf.THROTTLE_RATES.get(self.scope)
