"""Closed by default: each endpoint names its scope and permissions; only a setting opens one.

``read`` endpoints admit a session whose user holds one of the view's
``session_permissions`` (see ``ferrox_stats.access``), a token with the read scope, and
anyone at all where ``FERROX_STATS["PUBLIC_ENDPOINTS"]`` names the endpoint. ``ingest``
admits only a token with the ingest scope.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from .. import access
from ..conf import conf
from ..models import ApiToken

READ = "read"
INGEST = "ingest"


class EndpointAccess(BasePermission):
    message = "You need a session with this endpoint's permission or an API token with its scope."

    def has_permission(self, request: Request, view: Any) -> bool:
        scope = view.access_scope
        token = request.auth if isinstance(request.auth, ApiToken) else None
        if scope == INGEST:
            return token is not None and token.can_ingest
        if view.endpoint_name in conf.PUBLIC_ENDPOINTS:
            return True
        if token is not None:
            return token.can_read
        return access.may(request.user, view.session_permissions)
