"""ASGI entry point of the demo control plane: ``uvicorn project.asgi:application``.

The pass-through (``/v1/…``) needs ASGI. ``ferrox_stats.asgi.wrap`` serves it without
the project's middleware and answers the lifespan protocol, whose shutdown drains the
archive's write-behind queue (uvicorn ends a SIGTERM by raising it again, so ``atexit``
would not). The demo traffic stops first, so its requests in flight are recorded too.
In DEBUG this also serves the static files, as ``runserver`` did.
"""

from __future__ import annotations

import asyncio
import os

from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

from ferrox_stats.asgi import wrap

from . import traffic

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
django_application = get_asgi_application()
served = ASGIStaticFilesHandler(django_application) if settings.DEBUG else django_application


async def stop_traffic() -> None:
    await asyncio.to_thread(traffic.stop)


application = wrap(served, on_shutdown=stop_traffic)
