"""The app on its own database alias, run as its own pytest session.

``tests/two_db`` needs a second database and ``TelemetryRouter``
(``tests/settings_two_db.py``). Run in a subprocess so that the rest of the suite
creates and migrates one test database, not two; same DATABASE_URL, so it runs on
SQLite and on PostgreSQL like the rest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_two_database_layout_suite_passes() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings_two_db"}
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/two_db",
            "--ds=tests.settings_two_db",
            "-p",
            "no:cacheprovider",
            "-q",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    # Every test ran: a collection that silently found nothing must not pass.
    assert " passed" in done.stdout and "no tests ran" not in done.stdout
