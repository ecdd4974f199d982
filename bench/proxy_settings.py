"""Settings of the control plane ``bench/proxy.py`` serves the pass-through from.

The demo project's (``project/settings.py``) with what a benchmark needs instead:
``DEBUG`` off, a SQLite file in the bench's temp directory, no demo traffic, the
pass-through's URLs as the root urlconf, and one upstream, the simulated engine.
The archive keeps its default sink, so archiving each request is part of the cost.

Read from the environment (``bench/proxy.py`` sets both):

- ``FERROX_BENCH_DB``: the SQLite file;
- ``FERROX_BENCH_ENGINE_URL``: the engine's base URL, ``http://127.0.0.1:<port>/v1``.
"""

from __future__ import annotations

import os

from project.settings import *  # noqa: F403
from project.settings import MIDDLEWARE

DEBUG = False
DEMO_TRAFFIC = False

# The demo's stack without its demo-only traffic middleware: what a control plane that
# adds ferrox_stats to an ordinary Django project has (--stack full puts it in front of
# the pass-through).
MIDDLEWARE = [path for path in MIDDLEWARE if not path.startswith("project.")]

# The pass-through's own urlconf as the root: the URLs that
# ``path("", include("ferrox_stats.proxy.urls"))`` gives, one resolver level less.
ROOT_URLCONF = "ferrox_stats.proxy.urls"

# Whatever DATABASE_URL says: the bench's own SQLite file, set up as the demo's.
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("FERROX_BENCH_DB", "/tmp/pxbench_control_plane.sqlite3"),
        "CONN_MAX_AGE": 60,
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
    }
}

FERROX_STATS = {
    "REPLICA": "bench-control-plane",
    "PROXY_UPSTREAMS": {
        "sim": {
            "BASE_URL": os.environ.get("FERROX_BENCH_ENGINE_URL", "http://127.0.0.1:8001/v1"),
            "API_KEY": None,
        }
    },
}
