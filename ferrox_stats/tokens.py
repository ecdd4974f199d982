"""Issuing, checking and revoking API tokens; only their hashes are ever stored."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from collections import OrderedDict
from datetime import timedelta

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
) -> tuple[ApiToken, str]:
    """Create a token and return it with its secret, which is not stored and not shown again."""
    if ingest and not replica:
        raise ValueError("an ingest token needs the replica its records are attributed to")
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    # Its own savepoint: a taken label fails this create, not the caller's transaction.
    # Tokens live with the archive (``ARCHIVE_DATABASE``), which may not be "default".
    alias = conf.ARCHIVE_DATABASE
    with transaction.atomic(using=alias):
        token = ApiToken.objects.using(alias).create(
            label=label,
            prefix=secret[: len(SECRET_PREFIX) + 4],
            secret_hash=hash_secret(secret),
            can_read=read,
            can_ingest=ingest,
            can_infer=infer,
            replica=replica,
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
    return recent.get(hash_secret(secret), live.get_recorder().clock.monotonic(), ttl)


def check(secret: str) -> ApiToken | None:
    """The active token this secret belongs to, or ``None``."""
    if not secret.startswith(SECRET_PREFIX):
        return None
    digest = hash_secret(secret)
    ttl = conf.TOKEN_CACHE_S
    moment = live.get_recorder().clock.monotonic()
    if ttl > 0 and (cached := recent.get(digest, moment, ttl)) is not None:
        return cached
    # order_by(): the model's default ordering would add a sort to a one-row lookup.
    tokens = ApiToken.objects.using(conf.ARCHIVE_DATABASE)
    token = tokens.active().filter(secret_hash=digest).order_by().first()
    # The lookup is by an index on the digest; compare again in constant time anyway.
    if token is None or not hmac.compare_digest(token.secret_hash, digest):
        return None
    if ttl > 0:
        recent.put(digest, moment, token)
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        tokens.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def revoke(token: ApiToken) -> None:
    """Revoke now; this process stops accepting it at once, others within TOKEN_CACHE_S."""
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        # Saved where it was read from (the router's alias for one made by hand).
        token.save(update_fields=["revoked_at"])
    recent.forget(token.secret_hash)
