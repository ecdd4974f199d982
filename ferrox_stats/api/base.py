"""What every view of the app is, whatever the host project's ``REST_FRAMEWORK`` says.

DRF reads its ``DEFAULT_*`` settings into ``APIView``'s class attributes, so a host's
global versioning, renderers, parsers, pagination, throttles, authentication,
permissions, content negotiation, metadata or exception handler would reach these
views through inheritance. ``FerroxView`` names each one itself (URLPath versioning
without a default once made every endpoint a 404): the app takes none of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from rest_framework.metadata import SimpleMetadata
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import JSONParser
from rest_framework.renderers import JSONRenderer
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from .. import access
from . import errors
from .authentication import BearerTokenAuthentication, SessionAuthentication
from .openapi import AppOnlySchema, documented
from .permissions import READ, EndpointAccess

__all__ = ["FerroxContentNegotiation", "FerroxJSONRenderer", "FerroxView", "documented"]


class FerroxJSONRenderer(JSONRenderer):
    """DRF's JSON, as DRF's defaults write it (not as the host's COMPACT/UNICODE/STRICT_JSON)."""

    ensure_ascii = False
    compact = True
    strict = True


class FerroxJSONParser(JSONParser):
    strict = True  # NaN and Infinity are not JSON, whatever the host's STRICT_JSON


class FerroxContentNegotiation(DefaultContentNegotiation):
    """DRF's negotiation with ``?format=`` as DRF's default, not the host's URL_FORMAT_OVERRIDE."""

    # Duck-typed: the one setting DefaultContentNegotiation reads.
    settings = SimpleNamespace(URL_FORMAT_OVERRIDE="format")  # type: ignore[assignment]


class FerroxView(APIView):
    """Closed by default: token or permitted session, JSON only, one error shape,
    unversioned."""

    authentication_classes = [BearerTokenAuthentication, SessionAuthentication]
    permission_classes = [EndpointAccess]
    renderer_classes = [FerroxJSONRenderer]
    parser_classes = [FerroxJSONParser]
    throttle_classes: Sequence[type[BaseThrottle]] = []
    content_negotiation_class: type[DefaultContentNegotiation] = FerroxContentNegotiation
    metadata_class: Any = SimpleMetadata
    versioning_class = None
    # Not read by APIView; named so that no mixin or host default brings them in.
    pagination_class = None
    filter_backends: Sequence[Any] = []
    access_scope = READ
    endpoint_name = ""
    # A session needs one of these (a token needs its scope instead).
    session_permissions: tuple[str, ...] = (access.DASHBOARD,)
    # Described in the app's own schema only, unless the host opts in (openapi.py).
    schema = AppOnlySchema()

    def get_exception_handler(self) -> Any:
        return errors.handle
