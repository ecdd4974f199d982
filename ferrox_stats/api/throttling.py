"""Throttles whose rates come from ``FERROX_STATS["THROTTLE_RATES"]``, not DRF's global setting."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import ScopedRateThrottle

from ..conf import conf
from ..models import ApiToken


class FerroxScopedRateThrottle(ScopedRateThrottle):
    def get_rate(self) -> str | None:
        return conf.THROTTLE_RATES.get(self.scope or "")

    def get_cache_key(self, request: Request, view: Any) -> str:
        # Each token has its own budget (a token's user has no pk to key on), each
        # staff user theirs, and anonymous callers share one per address.
        if isinstance(request.auth, ApiToken):
            ident = f"token-{request.auth.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user-{request.user.pk}"
        else:
            ident = f"addr-{self.get_ident(request)}"
        return str(self.cache_format % {"scope": self.scope, "ident": ident})
