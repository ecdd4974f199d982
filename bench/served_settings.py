"""Settings of the Django project ``bench/served.py`` serves (``served_app``).

The demo project's (``project/settings.py``) as an ordinary Django project has them:
its whole middleware stack (Django's defaults), minus the demo's traffic, ``DEBUG`` off,
``served_app`` as the URLconf. What changes between the servers of one run comes from the
environment (``bench/served.py`` sets it):

- ``FERROX_BENCH_DATABASE_URL``: the database (the bench's throwaway PostgreSQL database);
- ``FERROX_BENCH_ARCHIVE``: ``"1"`` keeps the default archive sink (every tracked request
  is queued and written by the worker's archive thread, heartbeats go to the database),
  ``"0"`` sets ``ARCHIVE_SINK = None`` (in memory only; heartbeats host-only);
- ``FERROX_BENCH_ROLLUPS``: ``"1"`` turns ``ROLLUPS`` on (the archive keeps the usage
  rollups in each batch's transaction);
- ``FERROX_BENCH_METRICS_DIR``: the host's state files, one directory per server;
- ``FERROX_BENCH_NO_HEARTBEAT``: ``"1"`` sets ``HEARTBEAT_S = None`` (no heartbeat
  thread: ``bench/served_instructions.py`` counts the request thread alone).
"""

from __future__ import annotations

import os

import dj_database_url

from project.settings import *  # noqa: F403
from project.settings import MIDDLEWARE

DEBUG = False
DEMO_TRAFFIC = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
MIDDLEWARE = [path for path in MIDDLEWARE if not path.startswith("project.")]
ROOT_URLCONF = "served_app"

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("FERROX_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
        conn_max_age=60,
    )
}

FERROX_STATS = {
    "REPLICA": "bench-served",
    "METRICS_DIR": os.environ.get("FERROX_BENCH_METRICS_DIR"),
    "ROLLUPS": os.environ.get("FERROX_BENCH_ROLLUPS") == "1",
    **({} if os.environ.get("FERROX_BENCH_ARCHIVE", "1") == "1" else {"ARCHIVE_SINK": None}),
    **({"HEARTBEAT_S": None} if os.environ.get("FERROX_BENCH_NO_HEARTBEAT") == "1" else {}),
}
