"""Settings of the server ``bench/api_poll.py`` polls: the demo project's, benchmarked.

The demo project's (``project/settings.py``) with ``DEBUG`` off, no demo traffic and its
middleware without the demo's own, a SQLite file for the tokens (``FERROX_BENCH_DB``),
no archive and no heartbeat (the poll reads the process's ring only), ``/v1/requests``
public (a token sent is still checked, as on a closed endpoint), and ``poll_urls`` as
the root urlconf: the app under ``/control/telemetry/`` beside the baselines.
"""

from __future__ import annotations

import os

from project.settings import *  # noqa: F403
from project.settings import MIDDLEWARE

DEBUG = False
DEMO_TRAFFIC = False
MIDDLEWARE = [path for path in MIDDLEWARE if not path.startswith("project.")]
ROOT_URLCONF = "poll_urls"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]  # testserver: the in-process part

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("FERROX_BENCH_DB", "/tmp/ferrox_bench_poll.sqlite3"),
        "CONN_MAX_AGE": 60,
    }
}

FERROX_STATS = {
    "REPLICA": "bench",
    "ARCHIVE_SINK": None,
    "HEARTBEAT_S": None,
    "RING_CAPACITY": 1024,
    "PUBLIC_ENDPOINTS": ["requests"],
}
