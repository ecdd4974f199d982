"""System checks on how the host mounts the app: what its URLconf really routes.

Settings checks live in ``checks``; these read the URLconf, so they carry the ``urls``
tag and run whenever Django checks URLs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from django.core.checks import CheckMessage, Error
from django.urls import NoReverseMatch, URLPattern, URLResolver, resolve, reverse
from django.urls.exceptions import Resolver404

__all__ = ["check_routes_reach_the_app"]

# The app's URL modules and the namespace each is included under.
URL_MODULES = (
    ("ferrox_stats.urls", "ferrox_stats"),
    ("ferrox_stats.proxy.urls", "ferrox_stats_proxy"),
)


def _named_routes(
    patterns: Sequence[URLPattern | URLResolver], namespace: str
) -> Iterator[tuple[str, dict[str, str]]]:
    """Each named route as ``(namespace:name, kwargs)``, with a sample value per parameter."""
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}:{pattern.namespace}" if pattern.namespace else namespace
            yield from _named_routes(pattern.url_patterns, inner)
        elif pattern.name:
            converters: dict[str, Any] = getattr(pattern.pattern, "converters", {})
            yield f"{namespace}:{pattern.name}", {key: "x" for key in converters}


def _mounted(view_name: str, kwargs: dict[str, str]) -> str | None:
    """The path ``view_name`` is mounted at, or None when the host does not mount it."""
    try:
        return reverse(view_name, kwargs=kwargs)
    except NoReverseMatch:
        return None


def check_routes_reach_the_app(**kwargs: Any) -> list[CheckMessage]:
    """Every mounted route of the app must resolve to the app's own view.

    The trap: mounted at the root after ``admin.site.urls``, ``admin/stats`` reaches the
    admin's catch-all (a redirect or 404), not the dashboard's poll.
    """
    from importlib import import_module

    errors: list[CheckMessage] = []
    for module, namespace in URL_MODULES:
        patterns = import_module(module).urlpatterns
        for view_name, sample in _named_routes(patterns, namespace):
            path = _mounted(view_name, sample)
            if path is None:
                continue
            try:
                match = resolve(path)
            except Resolver404:
                continue  # cannot happen for a reversed path; nothing to say if it does
            # By application namespace: a host may include the app under its own
            # instance namespace.
            if f"{match.app_name}:{match.url_name}" == view_name:
                continue
            reached = match.view_name if match.url_name else match._func_path
            errors.append(
                Error(
                    f"{path} is mounted for {view_name!r} but reaches {reached!r}.",
                    hint=f"An earlier URL pattern takes {path}. Include {module} before it "
                    "(mounted at the root beside the admin: before admin.site.urls).",
                    id="ferrox_stats.E020",
                )
            )
    return errors
