"""The control plane's ASGI app for ``bench/proxy.py`` (``uvicorn --factory``), as the
README serves it: ``ferrox_stats.asgi.wrap`` around Django's handler."""

from __future__ import annotations

from django.core.asgi import get_asgi_application

from ferrox_stats.asgi import App, wrap


def lean() -> App:
    """The pass-through served without the project's middleware (the default)."""
    return wrap(get_asgi_application())


def full() -> App:
    """The pass-through behind the project's whole middleware stack."""
    return wrap(get_asgi_application(), lean_pass_through=False)
