"""Who may see what in a session: the app's two Django permissions.

``DASHBOARD`` opens the live views (the dashboard page, ``v1/requests``, ``v1/stats``,
``admin/stats``); ``ARCHIVE`` opens the archive (history pages and API, export, one
request's page). Both are ordinary permissions: grant them to a group. A superuser has
both; ``is_staff`` alone has neither. API tokens are not users: their scopes decide.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ARCHIVE", "DASHBOARD", "may"]

# Declared in ``FinishedRequest.Meta.permissions`` (migration 0008).
DASHBOARD = "ferrox_stats.view_dashboard"
# The model's built-in view permission: the archive's rows, here or in the admin.
ARCHIVE = "ferrox_stats.view_finishedrequest"


def may(user: Any, permissions: tuple[str, ...]) -> bool:
    """Whether an active, authenticated ``user`` holds any one of ``permissions``."""
    if not (user and user.is_authenticated and user.is_active):
        return False
    return any(user.has_perm(permission) for permission in permissions)
