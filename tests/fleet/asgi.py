"""The fleet project's ASGI app, as the README serves a project: ``wrap`` adds the
lifespan (the archive drained, the last heartbeat written at shutdown) and the lean
pass-through."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

from ferrox_stats.asgi import wrap

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.fleet.settings")
application = wrap(get_asgi_application())
