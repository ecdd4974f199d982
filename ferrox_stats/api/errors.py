"""Errors as JSON with one stable shape: ``{"error": {"status", "code", "message", "fields"}}``."""

from __future__ import annotations

from typing import Any

from django.db import InterfaceError, OperationalError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "payload_too_large"


class DatabaseUnavailable(exceptions.APIException):
    """503 with ``Retry-After`` (DRF sends ``wait`` as that header)."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The credentials cannot be checked right now (the database is unreachable)."
    default_code = "database_unavailable"

    def __init__(self, wait: int) -> None:
        super().__init__()
        self.wait = wait


def _message(detail: Any) -> str:
    if isinstance(detail, list) and detail:
        return _message(detail[0])
    if isinstance(detail, dict) and detail:
        key, value = next(iter(detail.items()))
        return f"{key}: {_message(value)}"
    return str(detail)


def handle(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, reshaped; a database that cannot be reached is a 503; anything
    else DRF does not handle stays a server error."""
    if isinstance(exc, OperationalError | InterfaceError):
        # The archive's endpoints (history, ingest) while the database is down.
        exc = DatabaseUnavailable(wait=5)
    response = exception_handler(exc, context)
    if response is None:
        return None
    detail = exc.detail if isinstance(exc, exceptions.APIException) else response.data
    codes = exc.get_codes() if isinstance(exc, exceptions.APIException) else None
    error: dict[str, Any] = {
        "status": response.status_code,
        "code": codes if isinstance(codes, str) else "invalid",
        "message": _message(detail),
    }
    if isinstance(detail, dict):
        error["fields"] = {
            key: [str(v) for v in (value if isinstance(value, list) else [value])]
            for key, value in detail.items()
        }
    response.data = {"error": error}
    if isinstance(exc, DatabaseUnavailable):
        # Not one ERROR per refused request: ferrox_stats.tokens logs the outage once.
        response._has_been_logged = True  # type: ignore[attr-defined]
    return response
