"""Invalid settings stop a real server at startup, with the check's message (servers run
no system checks; without this every request would meet the misconfiguration)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SETTINGS = """
from tests.settings import *  # noqa: F403

FERROX_STATS = {"REPLICA": "startup", "ARCHIVE_SINK": None, "GAUGE_MAX_AGE_S": -1}
"""

ASGI = """
from django.core.asgi import get_asgi_application

from ferrox_stats.asgi import wrap

application = wrap(get_asgi_application())
"""


def test_uvicorn_refuses_to_start_with_invalid_settings(tmp_path: Path) -> None:
    (tmp_path / "bad_settings.py").write_text(SETTINGS)
    (tmp_path / "bad_asgi.py").write_text(ASGI)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bad_settings",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "uvicorn", "bad_asgi:application", "--host", "127.0.0.1",
         "--port", "0", "--log-level", "warning"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0, done.stderr
    assert "ImproperlyConfigured" in done.stderr
    assert "ferrox_stats.E005: FERROX_STATS['GAUGE_MAX_AGE_S'] must be a positive" in done.stderr
