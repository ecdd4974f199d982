"""Serving a project with ferrox_stats under WSGI (gunicorn, uWSGI, mod_wsgi)::

    # wsgi.py
    from django.core.wsgi import get_wsgi_application
    from ferrox_stats.wsgi import wrap

    application = wrap(get_wsgi_application())

``wrap`` validates ``FERROX_STATS`` when the server loads the application (servers run
no system checks): invalid settings stop the server with the checks' messages instead of
reaching the requests. The archive's queue is drained at exit (``atexit``), which a
worker that exits through the interpreter runs (gunicorn's do on SIGTERM).
"""

from __future__ import annotations

from typing import TypeVar

App = TypeVar("App")


def wrap(app: App) -> App:
    """``app`` itself, once ``FERROX_STATS`` is known to be valid; raises
    ``ImproperlyConfigured`` with the checks' messages otherwise."""
    from .checks import validate_settings  # imports models: after django.setup()

    validate_settings()
    return app
