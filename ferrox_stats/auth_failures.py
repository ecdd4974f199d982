"""Failed authentications per client address, and when an address must wait.

Every place that checks an API key asks ``admit`` before the check and tells ``settle``
after it. An address that used up its budget (``AUTH_FAILURE_RATE``, "20/minute": 20
failures at once, then one every 3 s) gets the seconds to wait instead of a check, so a
guesser learns nothing and the database sees none of its guesses.

A blocked address is refused before the check, except with a key this process has
verified before: one client's bad key behind a shared address (a NAT, a cluster's
egress) would otherwise lock out every other client there. A guesser cannot use that
door: the keys it guesses were never verified. What remains is that a key new to this
process waits out the address's block.

In memory, per process, bounded (``MAX_ADDRESSES``, ``MAX_VERIFIED``), never touching
the database, on the recorder's clock (tests move time without sleeping).
"""

from __future__ import annotations

import ipaddress
import math
import threading
from collections import OrderedDict
from functools import lru_cache
from typing import cast

from django.http import HttpRequest
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from . import live
from .conf import conf
from .models import ApiToken
from .tokens import hash_secret

# Periods as DRF's throttles read them: the first letter of "second", "minute", ...
PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# Absorbs float rounding in ``k * interval``, so the n-th failure is not refused early.
_EPSILON = 1e-9


def parse_rate(rate: object) -> tuple[int, float]:
    """``"20/minute"`` → ``(20, 60.0)``, as DRF parses rates; ``ValueError`` otherwise."""
    if not isinstance(rate, str):
        raise ValueError(f"{rate!r} is not a string like '20/minute'")
    count, _, period = rate.partition("/")
    if not count.strip().isdigit() or int(count) <= 0 or period.strip()[:1] not in PERIODS:
        raise ValueError(f"{rate!r} is not '<n>/<second|minute|hour|day>' with n > 0")
    return int(count), PERIODS[period.strip()[0]]


_parsed = lru_cache(maxsize=8)(parse_rate)


def client_address(request: HttpRequest | Request) -> str:
    """The caller's address: ``REMOTE_ADDR`` (the ASGI/WSGI server's peer, or what it was
    told to trust, e.g. uvicorn ``--proxy-headers``), or DRF's rule when the host set
    ``REST_FRAMEWORK["NUM_PROXIES"]``. An unconfigured ``X-Forwarded-For`` is ignored:
    anyone can send one, and a new one per guess would escape the budget."""
    if api_settings.NUM_PROXIES is not None:
        # get_ident reads only ``headers`` and ``META``, which a plain HttpRequest has.
        return str(BaseThrottle().get_ident(cast(Request, request)) or "")
    return str(request.META.get("REMOTE_ADDR") or "")


def _bucket(address: str) -> str:
    """The key an address is counted under: IPv6 by its /64, which one host usually
    holds whole (one budget per address would be 2**64 budgets)."""
    if ":" not in address:
        return address
    try:
        ip = ipaddress.IPv6Address(address)
    except ValueError:
        return address
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ipaddress.IPv6Network((ip, 64), strict=False))


class Ledger:
    """Per address, the time its budget is spent up to (a generic cell rate algorithm:
    one float per address). An attempt is charged when admitted, so concurrent guesses
    cannot all pass before the first fails, and refunded when the key verifies.

    Bounded: past ``max_addresses`` the address charged longest ago is forgotten (it
    starts afresh); past ``max_verified`` the key verified longest ago is.
    """

    def __init__(self, max_addresses: int, max_verified: int) -> None:
        self.max_addresses = max_addresses
        self.max_verified = max_verified
        self._spent: OrderedDict[str, float] = OrderedDict()
        self._verified: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def admit(self, address: str, secret: str, now: float, count: int, period: float) -> int | None:
        interval = period / count
        bucket = _bucket(address)
        with self._lock:
            spent = max(self._spent.get(bucket, now), now)
            over = spent - now - (period - interval)
            # Hashed only for an address over its budget: most requests never pay it.
            if over > _EPSILON and hash_secret(secret) not in self._verified:
                return max(1, math.ceil(over))
            self._spent[bucket] = spent + interval
            self._spent.move_to_end(bucket)
            while len(self._spent) > self.max_addresses:
                self._spent.popitem(last=False)
            return None

    def settle(
        self, address: str, digest: str | None, now: float, count: int, period: float
    ) -> None:
        if digest is None:
            return  # a failure: the charge stays
        self.refund(address, now, count, period)
        with self._lock:
            self._verified[digest] = None
            self._verified.move_to_end(digest)
            while len(self._verified) > self.max_verified:
                self._verified.popitem(last=False)

    def refund(self, address: str, now: float, count: int, period: float) -> None:
        """Take back one charge: the attempt was no failure of the caller's."""
        bucket = _bucket(address)
        with self._lock:
            spent = self._spent.get(bucket)
            if spent is None:
                return
            spent -= period / count
            if spent <= now:
                del self._spent[bucket]
            else:
                self._spent[bucket] = spent

    def __len__(self) -> int:
        return len(self._spent)

    def clear(self) -> None:
        with self._lock:
            self._spent.clear()
            self._verified.clear()


# About 200 bytes an address, 100 a key: a few MB at most.
MAX_ADDRESSES = 10_000
MAX_VERIFIED = 4096
ledger = Ledger(MAX_ADDRESSES, MAX_VERIFIED)


def admit(address: str, secret: str) -> int | None:
    """Before checking ``secret`` from ``address``: ``None`` to go ahead (the attempt is
    charged until ``settle`` reports the key verified), or the whole seconds to wait
    (``Retry-After``) when the address is over ``AUTH_FAILURE_RATE``."""
    rate = conf.AUTH_FAILURE_RATE
    if rate is None:
        return None
    count, period = _parsed(rate)
    now = live.get_recorder().clock.monotonic()
    return ledger.admit(address, secret, now, count, period)


def settle(address: str, token: ApiToken | None) -> None:
    """After the check ``admit`` let through: a token refunds the charge, and its key
    passes this process's gate from now on; ``None`` (no such key, or revoked) leaves
    the failure counted. A check that raised is never settled: it stays counted."""
    rate = conf.AUTH_FAILURE_RATE
    if rate is None:
        return
    count, period = _parsed(rate)
    now = live.get_recorder().clock.monotonic()
    ledger.settle(address, None if token is None else token.secret_hash, now, count, period)


def refund(address: str) -> None:
    """After a check ``admit`` let through that could not be answered (the database is
    down): the attempt is not counted against the address."""
    rate = conf.AUTH_FAILURE_RATE
    if rate is None:
        return
    count, period = _parsed(rate)
    ledger.refund(address, live.get_recorder().clock.monotonic(), count, period)
