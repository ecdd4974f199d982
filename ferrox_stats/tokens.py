"""Issuing, checking and revoking API tokens; only their hashes are ever stored."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from collections import OrderedDict
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from . import live
from .conf import conf
from .models import ApiToken

# Secrets look like "fxs_<43 url-safe chars>"; the prefix makes a leaked one recognisable.
SECRET_PREFIX = "fxs_"
# ``last_used_at`` is refreshed at most this often: one write per token per minute.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def issue(
    label: str,
    *,
    read: bool = True,
    ingest: bool = False,
    infer: bool = False,
    replica: str = "",
    owner: Any = None,
    expires_at: datetime | None = None,
) -> tuple[ApiToken, str]:
    """Create a token and return it with its secret, which is not stored and not shown again.

    ``owner`` is the user it acts for (it stops working when they are inactive);
    ``expires_at``, when given, is the moment it stops working.
    """
    if ingest and not replica:
        raise ValueError("an ingest token needs the replica its records are attributed to")
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    # Its own savepoint: a taken label fails this create, not the caller's transaction.
    with transaction.atomic():
        token = ApiToken.objects.create(
            label=label,
            prefix=secret[: len(SECRET_PREFIX) + 4],
            secret_hash=hash_secret(secret),
            can_read=read,
            can_ingest=ingest,
            can_infer=infer,
            replica=replica,
            owner=owner,
            expires_at=expires_at,
        )
    return token, secret


class _RecentTokens:
    """Tokens this process checked in the last ``TOKEN_CACHE_S`` seconds, by digest.

    A poller asks every second or two; without this each request pays a database
    lookup (measured at about half of a 100-row poll). The price: a token revoked in
    another process keeps working here for at most ``TOKEN_CACHE_S`` seconds.
    Bounded: the oldest entry goes first past ``MAX``.
    """

    MAX = 1024

    def __init__(self) -> None:
        self._entries: OrderedDict[str, tuple[float, ApiToken]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, digest: str, now: float, ttl: float) -> ApiToken | None:
        with self._lock:
            found = self._entries.get(digest)
            if found is None or now - found[0] > ttl:
                self._entries.pop(digest, None)
                return None
            return found[1]

    def put(self, digest: str, now: float, token: ApiToken) -> None:
        with self._lock:
            self._entries[digest] = (now, token)
            self._entries.move_to_end(digest)
            while len(self._entries) > self.MAX:
                self._entries.popitem(last=False)

    def forget(self, digest: str) -> None:
        with self._lock:
            self._entries.pop(digest, None)


recent = _RecentTokens()


def recently_checked(secret: str) -> ApiToken | None:
    """The token this secret belongs to if this process checked it within
    ``TOKEN_CACHE_S``, without asking the database (an async caller skips a thread hop)."""
    ttl = conf.TOKEN_CACHE_S
    if ttl <= 0 or not secret.startswith(SECRET_PREFIX):
        return None
    clock = live.get_recorder().clock
    token = recent.get(hash_secret(secret), clock.monotonic(), ttl)
    # An expired token is refused the moment it expires, whatever the cache holds.
    return token if token is not None and token.works_at(_wall(clock)) else None


def _wall(clock: live.Clock) -> datetime:
    """The recorder's wall clock as an aware datetime (tests move it; see ``live.reset``)."""
    return datetime.fromtimestamp(clock.wall_ms() / 1000, tz=UTC)


def check(secret: str) -> ApiToken | None:
    """The active token this secret belongs to, or ``None``: refused when revoked,
    expired, or owned by an inactive user."""
    if not secret.startswith(SECRET_PREFIX):
        return None
    digest = hash_secret(secret)
    ttl = conf.TOKEN_CACHE_S
    clock = live.get_recorder().clock
    moment, wall = clock.monotonic(), _wall(clock)
    if ttl > 0 and (cached := recent.get(digest, moment, ttl)) is not None:
        return cached if cached.works_at(wall) else None
    # order_by(): the model's default ordering would add a sort to a one-row lookup.
    token = ApiToken.objects.active(wall).filter(secret_hash=digest).order_by().first()
    # The lookup is by an index on the digest; compare again in constant time anyway.
    if token is None or not hmac.compare_digest(token.secret_hash, digest):
        return None
    if ttl > 0:
        recent.put(digest, moment, token)
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def revoke(token: ApiToken) -> None:
    """Revoke now; this process stops accepting it at once, others within TOKEN_CACHE_S."""
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    recent.forget(token.secret_hash)
