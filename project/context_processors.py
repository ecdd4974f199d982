"""Links between the control plane's places, for every template (the admin's too)."""

from __future__ import annotations

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

# Each link by the URL names it may have, first match wins; a place that is not mounted
# (yet) is simply not linked.
PLACES = {
    "dashboard_url": ("ferrox_stats:dashboard", "ferrox_stats:web:dashboard"),
    "docs_url": ("ferrox_stats:docs",),
    "stats_url": ("ferrox_stats:stats",),
    "archive_url": ("admin:ferrox_stats_finishedrequest_changelist", "admin:index"),
}


def first_url(*names: str) -> str | None:
    for name in names:
        try:
            return reverse(name)
        except NoReverseMatch:
            continue
    return None


def links(request: HttpRequest) -> dict[str, str | None]:
    found = {key: first_url(*names) for key, names in PLACES.items()}
    # Clients want the pass-through's base URL (…/v1), the one before its routes.
    models = first_url("ferrox_stats_proxy:models")
    found["openai_base_url"] = (
        request.build_absolute_uri(models.removesuffix("/models")) if models else None
    )
    return found
