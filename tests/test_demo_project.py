"""The demo control plane (``project/``) is configured and serves its pages."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def manage(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "FERROX_DEMO_TRAFFIC": "0",
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_demo_project_passes_its_checks_migrates_and_renders_home(tmp_path: Path) -> None:
    assert manage("check", tmp_path=tmp_path).returncode == 0
    migrate = manage("migrate", "--noinput", "-v", "0", tmp_path=tmp_path)
    assert migrate.returncode == 0, migrate.stderr
    script = (
        "from django.contrib.auth import get_user_model\n"
        "from django.test import Client\n"
        "from django.test.utils import setup_test_environment\n"
        "setup_test_environment()\n"
        "from ferrox_stats import live\n"
        "user = get_user_model().objects.create_superuser('s', 's@example.com', 'pw')\n"
        "client = Client()\n"
        "assert client.get('/').status_code == 302  # staff only\n"
        "client.force_login(user)\n"
        "with live.track(model='demo-model', route='/v1/completions') as t:\n"
        "    t.finish(status=200)\n"
        "page = client.get('/')\n"
        "assert page.status_code == 200, page.status_code\n"
        "assert b'demo-model' in page.content\n"
        "print('ok')\n"
    )
    shell = manage("shell", "-c", script, tmp_path=tmp_path)
    assert shell.returncode == 0, shell.stderr
    # Django 5.2+ may first announce the shell's automatic imports.
    assert shell.stdout.strip().splitlines()[-1] == "ok"
