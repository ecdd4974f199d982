"""Issuing, checking and revoking API tokens; only their hashes are ever stored."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import (
    InterfaceError,
    OperationalError,
    close_old_connections,
    connections,
    transaction,
)
from django.utils import timezone

from . import live
from .breaker import Breaker, Unavailable
from .conf import conf
from .models import ApiToken, user_is_active_field

# Secrets look like "fxs_<43 url-safe chars>"; the prefix makes a leaked one recognisable.
SECRET_PREFIX = "fxs_"
# ``last_used_at`` is refreshed at most this often: one write per token per minute.
LAST_USED_RESOLUTION = timedelta(minutes=1)
# Seconds an async caller waits for a lookup before treating the database as
# unreachable (a stalled connection attempt must not hold a request for longer).
LOOKUP_TIMEOUT_S = 2.0
# Seconds an async caller holding a last good answer for the token waits for the
# lookup before it goes on with that answer (the lookup goes on and updates it).
STALE_WAIT_S = 0.25
# The errors that mean "the database cannot be reached", not "the query is wrong".
UNREACHABLE = (OperationalError, InterfaceError)


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
            owner=owner,
            expires_at=expires_at,
        )
    return token, secret


class _RecentTokens:
    """Tokens this process checked, by digest, with the moment each was last confirmed.

    Within ``TOKEN_CACHE_S`` an entry is trusted without asking the database (a poller
    asks every second or two; without this each request pays a lookup, measured at
    about half of a 100-row poll): a token revoked in another process keeps working
    here for at most ``TOKEN_CACHE_S`` seconds. While the database is unreachable an
    entry confirmed within ``TOKEN_STALE_S`` is still trusted. Bounded: the oldest
    entry goes first past ``MAX``.
    """

    MAX = 1024

    def __init__(self) -> None:
        self._entries: OrderedDict[str, tuple[float, ApiToken]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, digest: str, now: float, ttl: float) -> ApiToken | None:
        """The token if it was confirmed within ``ttl`` seconds before ``now``."""
        with self._lock:
            found = self._entries.get(digest)
        # An older entry stays: it is the last good answer should the database go away.
        if found is None or now - found[0] > ttl:
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
outage = Breaker()


def recently_checked(secret: str) -> ApiToken | None:
    """The token this secret belongs to if this process may answer without asking the
    database (an async caller skips a thread hop): checked within ``TOKEN_CACHE_S``, or
    while the database is unreachable the last good answer, or ``Unavailable``."""
    ttl = conf.TOKEN_CACHE_S
    if not secret.startswith(SECRET_PREFIX):
        return None
    clock = live.get_recorder().clock
    now = clock.monotonic()
    digest = hash_secret(secret)
    if ttl > 0 and (token := recent.get(digest, now, ttl)) is not None:
        return _unexpired(token, clock)
    if outage.open:
        return _unexpired(_without_database(digest, now), clock)
    return None


def _wall(clock: live.Clock) -> datetime:
    """The recorder's wall clock as an aware datetime (tests move it; see ``live.reset``),
    at the end of its millisecond: the clock floors to the millisecond, and a token that
    expired earlier within that millisecond must already be refused (an expiry is
    stored to the microsecond)."""
    return datetime.fromtimestamp(clock.wall_ms() / 1000, tz=UTC) + _LAST_MICROSECOND


_LAST_MICROSECOND = timedelta(microseconds=999)


def _unexpired(token: ApiToken, clock: live.Clock) -> ApiToken | None:
    # An expired token is refused the moment it expires, whatever the cache holds.
    return token if token.works_at(_wall(clock)) else None


def check(secret: str) -> ApiToken | None:
    """The active token this secret belongs to, or ``None``: refused when revoked,
    expired, or owned by a user who is inactive or gone.

    Raises ``Unavailable`` when the database cannot be reached and the token was not
    confirmed within ``TOKEN_STALE_S``; never waits on a database known to be down.
    """
    if not secret.startswith(SECRET_PREFIX):
        return None
    digest = hash_secret(secret)
    ttl = conf.TOKEN_CACHE_S
    clock = live.get_recorder().clock
    moment = clock.monotonic()
    if ttl > 0 and (cached := recent.get(digest, moment, ttl)) is not None:
        return _unexpired(cached, clock)
    if outage.open:
        return _unexpired(_without_database(digest, moment), clock)
    return _unexpired_or_none(_ask(digest, moment), clock)


def _unexpired_or_none(token: ApiToken | None, clock: live.Clock) -> ApiToken | None:
    return None if token is None else _unexpired(token, clock)


def _lookup(digest: str) -> ApiToken | None:
    # order_by(): the model's default ordering would add a sort to a one-row lookup.
    tokens = ApiToken.objects.using(conf.ARCHIVE_DATABASE)
    wall = _wall(live.get_recorder().clock)
    token = tokens.active(wall).filter(secret_hash=digest).order_by().first()
    # The lookup is by an index on the digest; compare again in constant time anyway.
    if token is None or not hmac.compare_digest(token.secret_hash, digest):
        return None
    return token if _owner_allows(token) else None


def owner_name(token: ApiToken) -> str:
    """Who owns the token, for people: the owner's login name, "" for a token issued
    before tokens had owners, or a note that the user is gone."""
    if token.owner_id is None:
        return ""
    user = get_user_model()._default_manager.filter(pk=token.owner_id).first()
    return user.get_username() if user is not None else f"(deleted user {token.owner_id})"


def _owner_allows(token: ApiToken) -> bool:
    """A token with an owner works while that user exists and is active. Asked of the
    user model where the host keeps it, never joined: the archive may be another
    database (see ``routers``)."""
    if token.owner_id is None:
        return True
    users = get_user_model()._default_manager.filter(pk=token.owner_id)
    if user_is_active_field():
        users = users.filter(is_active=True)
    return users.exists()


def _ask(digest: str, moment: float) -> ApiToken | None:
    """Look the token up; a database that cannot be reached opens the breaker."""
    try:
        token = _lookup(digest)
    except UNREACHABLE as exc:
        outage.failed(moment, exc)
        return _last_good(digest, moment)
    outage.answered()
    if token is None:
        # Revoked or never issued: no last good answer may outlive this one.
        recent.forget(digest)
        return None
    if conf.TOKEN_CACHE_S > 0 or conf.TOKEN_STALE_S > 0:
        recent.put(digest, moment, token)
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        try:
            ApiToken.objects.using(conf.ARCHIVE_DATABASE).filter(pk=token.pk).update(
                last_used_at=now
            )
        except UNREACHABLE as exc:
            # The token was found: the database went away since; only the mark is lost.
            outage.failed(moment, exc)
        else:
            token.last_used_at = now
    return token


def _without_database(digest: str, now: float) -> ApiToken:
    """The answer while the breaker is open; starts the probe if one is due."""
    if outage.claim_probe(now):
        spawn(lambda: _probe(digest, now))
    return _last_good(digest, now)


def _last_good(digest: str, now: float) -> ApiToken:
    """The token as last confirmed within ``TOKEN_STALE_S``, else ``Unavailable``."""
    stale = conf.TOKEN_STALE_S
    token = recent.get(digest, now, stale) if stale > 0 else None
    if token is None:
        raise Unavailable(outage.retry_after_s(now))
    return token


def _probe(digest: str, moment: float) -> None:
    with contextlib.suppress(Unavailable):  # still down: the breaker stays open
        _ask(digest, moment)


def _spawn_thread(probe: Callable[[], None]) -> None:
    def run() -> None:
        try:
            probe()
        finally:
            connections.close_all()  # this thread's own, opened for the probe

    # A thread of its own: a probe stalled on a silent database holds nobody else.
    threading.Thread(target=run, name="ferrox-tokens-probe", daemon=True).start()


# How a probe is started; tests run it inline.
spawn: Callable[[Callable[[], None]], None] = _spawn_thread


def last_good(secret: str) -> ApiToken | None:
    """The token as this process last confirmed it within ``TOKEN_STALE_S``, if it did
    (without asking the database, whatever the breaker says)."""
    stale = conf.TOKEN_STALE_S
    if stale <= 0 or not secret.startswith(SECRET_PREFIX):
        return None
    return recent.get(hash_secret(secret), live.get_recorder().clock.monotonic(), stale)


def unanswered(secret: str) -> ApiToken:
    """A lookup of ``secret`` took longer than ``LOOKUP_TIMEOUT_S``: the database is taken
    as unreachable, and the answer is the last good one or ``Unavailable``."""
    now = live.get_recorder().clock.monotonic()
    outage.failed(now, None)
    return _last_good(hash_secret(secret), now)


_worker: tuple[int, ThreadPoolExecutor] | None = None
_worker_lock = threading.Lock()


def check_in_thread(secret: str) -> Future[ApiToken | None]:
    """``check`` on this process's token thread, for an async caller.

    Not on asgiref's one thread-sensitive thread, which the pass-through's requests
    share: a lookup stalled on a silent database would hold every request there.
    """
    global _worker
    with _worker_lock:
        if _worker is None or _worker[0] != os.getpid():  # threads do not survive a fork
            _worker = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="ferrox-tokens"))
        executor = _worker[1]
    return executor.submit(_check_and_close, secret)


def _check_and_close(secret: str) -> ApiToken | None:
    # No request_started/finished here: close connections as they would (CONN_MAX_AGE),
    # and a broken one before it is used again.
    close_old_connections()
    try:
        return check(secret)
    finally:
        close_old_connections()


def revoke(token: ApiToken) -> None:
    """Revoke now; this process stops accepting it at once, others within TOKEN_CACHE_S."""
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        # Saved where it was read from (the router's alias for one made by hand).
        token.save(update_fields=["revoked_at"])
    recent.forget(token.secret_hash)
