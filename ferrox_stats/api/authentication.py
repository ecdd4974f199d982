"""Who is calling: a session, or an API token sent as ``Authorization: Bearer fxs_…``."""

from __future__ import annotations

from typing import Any

from django.db import InterfaceError, OperationalError
from rest_framework import authentication
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.request import Request

from .. import auth_failures
from ..breaker import Unavailable
from ..models import ApiToken
from ..tokens import check
from .errors import DatabaseUnavailable

TOO_MANY_FAILURES = "Too many failed authentications from this address."


class TokenUser:
    """The caller behind a token: authenticated, never staff, named by the token's label."""

    is_authenticated = True
    is_anonymous = False
    is_staff = False
    is_superuser = False
    is_active = True
    pk = None
    id = None

    def __init__(self, token: ApiToken) -> None:
        self.token = token
        self.username = f"token:{token.label}"

    def __str__(self) -> str:
        return self.username

    def has_perm(self, perm: str, obj: Any = None) -> bool:
        return False


class BearerTokenAuthentication(BaseAuthentication):
    keyword = "bearer"

    def authenticate(self, request: Request) -> tuple[TokenUser, ApiToken] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword.encode():
            return None
        if len(parts) != 2:
            raise AuthenticationFailed("Authorization must be 'Bearer <token>'.")
        try:
            secret = parts[1].decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("The token is not valid.") from None
        address = auth_failures.client_address(request)
        if (wait := auth_failures.admit(address, secret)) is not None:
            raise Throttled(wait, TOO_MANY_FAILURES, code="auth_throttled")
        try:
            token = check(secret)
        except Unavailable as exc:
            auth_failures.refund(address)  # the database's failure, not the caller's
            raise DatabaseUnavailable(exc.retry_after_s) from None
        auth_failures.settle(address, token)
        if token is None:
            # Never echo what was sent: it may be someone's real key.
            raise AuthenticationFailed("The token is not valid or was revoked.")
        return TokenUser(token), token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="ferrox_stats"'


class SessionAuthentication(authentication.SessionAuthentication):
    """DRF's, but a session store that cannot be reached (the database backend during an
    outage) is a fast 503 with ``Retry-After``, not a 500."""

    def authenticate(self, request: Request) -> tuple[Any, None] | None:
        try:
            return super().authenticate(request)
        except (OperationalError, InterfaceError):
            raise DatabaseUnavailable(wait=5) from None
