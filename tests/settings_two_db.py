"""The suite's settings with the app on its own database: the "telemetry" alias.

Used only by ``tests/two_db`` (run in a subprocess by ``tests/test_two_databases.py``),
so the main suite creates and migrates one test database, not two.
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, FERROX_STATS

# A second database of the same kind: another in-memory SQLite database, or another
# test database (per pid) on the same PostgreSQL server.
DATABASES["telemetry"] = dict(DATABASES["default"])
if DATABASES["telemetry"]["ENGINE"].endswith("postgresql"):
    DATABASES["telemetry"]["TEST"] = {"NAME": f"test_ferrox_stats_telemetry_{os.getpid()}"}
else:
    DATABASES["telemetry"]["TEST"] = {}

DATABASE_ROUTERS = ["ferrox_stats.routers.TelemetryRouter"]
FERROX_STATS = {**FERROX_STATS, "ARCHIVE_DATABASE": "telemetry"}
