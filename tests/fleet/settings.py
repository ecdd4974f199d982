"""Settings of the fleet's served project: the test suite's app (tests/settings.py),
configured by the environment each server process is started with.

One settings module serves every process of a test; what differs between the "hosts"
(the gunicorn host and the second server) comes from the environment the harness
(tests/fleet/harness.py) starts each with:

- ``DATABASE_URL``: the test's own PostgreSQL database (required: the fleet is the
  archive's database, shared by every process);
- ``FERROX_FLEET_REPLICA``: the replica this host records as;
- ``FERROX_FLEET_ENGINE_URL``: the simulated engine the pass-through forwards to;
- ``FERROX_FLEET_METRICS_DIR``: the host's directory of process states (``/metrics``);
- ``FERROX_FLEET_HEARTBEAT_S``, ``FERROX_FLEET_LOST_S``, ``FERROX_FLEET_FLUSH_S``:
  the heartbeat interval, when a silent instance is lost, the archive's flush interval.
"""

from __future__ import annotations

import os

import dj_database_url

from tests.settings import INSTALLED_APPS, MIDDLEWARE, TEMPLATES

__all__ = ["INSTALLED_APPS", "MIDDLEWARE", "TEMPLATES"]

# The key the simulated engine wants, and the pass-through sends.
UPSTREAM_KEY = "sk-upstream-fleet-0123456789"

SECRET_KEY = "ferrox-stats-fleet-tests"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "tests.fleet.urls"
ASGI_APPLICATION = "tests.fleet.asgi.application"

# Every process of the fleet shares one PostgreSQL database; connections are kept, as a
# deployment would, so a heartbeat or a poll does not connect each time.
DATABASES = {"default": dj_database_url.config(conn_max_age=60)}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"


def _seconds(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


FERROX_STATS = {
    "REPLICA": os.environ.get("FERROX_FLEET_REPLICA") or "fleet-host-a",
    "PROXY_UPSTREAMS": {
        "sim": {
            "BASE_URL": f"{os.environ.get('FERROX_FLEET_ENGINE_URL', 'http://127.0.0.1:9')}/v1",
            "API_KEY": UPSTREAM_KEY,
        }
    },
    "HEARTBEAT_S": _seconds("FERROX_FLEET_HEARTBEAT_S", 0.5),
    "INSTANCE_LOST_S": _seconds("FERROX_FLEET_LOST_S", 30.0),
    "ARCHIVE_FLUSH_INTERVAL_S": _seconds("FERROX_FLEET_FLUSH_S", 0.1),
    "ARCHIVE_SHUTDOWN_DEADLINE_S": 5.0,
    "METRICS_DIR": os.environ.get("FERROX_FLEET_METRICS_DIR") or None,
    # The tests poll the tail as fast as they can and ingest in many small batches.
    "THROTTLE_RATES": {"ferrox_stats_ingest": None, "ferrox_stats_history": None},
}

# What a failing test shows: the app's warnings and errors, on the server's stderr
# (captured by the harness).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"ferrox_stats": {"handlers": ["stderr"], "level": "WARNING"}},
}
