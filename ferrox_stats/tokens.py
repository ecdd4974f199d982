"""Issuing, checking and revoking API tokens; only their hashes are ever stored."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from .models import ApiToken

# Secrets look like "fxs_<43 url-safe chars>"; the prefix makes a leaked one recognisable.
SECRET_PREFIX = "fxs_"
# ``last_used_at`` is refreshed at most this often: one write per token per minute.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def issue(
    label: str, *, read: bool = True, ingest: bool = False, replica: str = ""
) -> tuple[ApiToken, str]:
    """Create a token and return it with its secret, which is not stored and not shown again."""
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
            replica=replica,
        )
    return token, secret


def check(secret: str) -> ApiToken | None:
    """The active token this secret belongs to, or ``None``."""
    if not secret.startswith(SECRET_PREFIX):
        return None
    digest = hash_secret(secret)
    token = ApiToken.objects.active().filter(secret_hash=digest).first()
    # The lookup is by an index on the digest; compare again in constant time anyway.
    if token is None or not hmac.compare_digest(token.secret_hash, digest):
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def revoke(token: ApiToken) -> None:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
