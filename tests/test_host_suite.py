"""A host project's own test suite passes with ferrox_stats installed, its archive writer
running (tests/hostsuite), under Django's runner and under pytest-django.

On PostgreSQL the writer thread's connection to the test database made dropping it fail
("being accessed by other users") and the suite exit 1 after every test had passed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOSTSUITE = ROOT / "tests" / "hostsuite"

COMMANDS = {
    "manage.py test": [
        "-m",
        "django",
        "test",
        "hostapp",
        "--settings=hostsite.settings",
        "-v",
        "2",
    ],
    "pytest-django": ["-m", "pytest", "-q"],
}


@pytest.mark.parametrize("runner", sorted(COMMANDS))
def test_the_host_suite_passes_with_the_archive_writer_running(runner: str) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HOSTSUITE), str(ROOT)]),
        "DATABASE_URL": os.environ.get("DATABASE_URL", "sqlite:///:memory:"),
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, *COMMANDS[runner]],
        cwd=HOSTSUITE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "being accessed by other users" not in output
    # Both tests ran (and passed): the archive's and the plain one.
    assert "test_a_tracked_request_is_archived" in output or "2 passed" in output, output
