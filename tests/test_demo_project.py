"""The demo control plane (``project/``) is configured and serves its pages."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Runs inside the demo project (``manage.py shell``); prints "ok" when every assert held.
PAGES = """
from django.contrib.auth import get_user_model
from django.test import Client
from django.test.utils import setup_test_environment
from project.context_processors import first_url
setup_test_environment()
from ferrox_stats import live

User = get_user_model()
User.objects.create_superuser('staff', 'staff@example.com', 'pw')  # as demo.sh's
User.objects.create_user('plain', password='pw')
client = Client()

home = client.get('/')
assert home.status_code == 200, home.status_code
text = home.content.decode()
for link in ('/admin/', '/telemetry/v1/docs', '/accounts/login/?next=/'):
    assert f'href="{link}' in text, link
assert 'In flight' not in text  # telemetry is for staff only
# The dashboard is linked once the app mounts it, under either name.
dashboard = first_url('ferrox_stats:dashboard', 'ferrox_stats:web:dashboard')
assert dashboard is None or f'href="{dashboard}"' in text
assert client.get('/admin/').status_code == 302

assert client.get('/accounts/login/').status_code == 200
wrong = client.post('/accounts/login/', {'username': 'staff', 'password': 'no'})
assert wrong.status_code == 200 and b'errorlist' in wrong.content
plain = Client()
assert plain.post('/accounts/login/', {'username': 'plain', 'password': 'pw'}).status_code == 302
assert 'In flight' not in plain.get('/').content.decode()  # logged in, not staff

login = client.post('/accounts/login/', {'username': 'staff', 'password': 'pw', 'next': '/'})
assert (login.status_code, login.url) == (302, '/'), login.status_code
empty = client.get('/').content.decode()
assert 'In flight' in empty and 'No finished requests yet.' in empty
assert '<dt>Mean TTFT (ms)</dt><dd>—</dd>' in empty  # unmeasured, not 0
assert '<dt>Pool occupancy</dt><dd>—</dd>' in empty

with live.track(model='demo-model', route='/v1/completions') as t:
    t.finish(status=200)
page = client.get('/').content.decode()
assert 'demo-model' in page and '<dt>Completed</dt><dd>1</dd>' in page

admin = client.get('/admin/').content.decode()
assert 'Ferrox control plane' in admin and 'href="/telemetry/v1/docs"' in admin
assert client.get('/admin/ferrox_stats/finishedrequest/').status_code == 200
assert client.post('/accounts/logout/').status_code == 302
assert client.get('/admin/').status_code == 302
print('ok')
"""

# The first request starts the demo traffic in the server process, once.
TRAFFIC = """
import time
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()
from ferrox_stats import live
from project import traffic

assert Client().get('/').status_code == 200
assert not traffic.start_once(60.0)  # already started by that request
deadline = time.monotonic() + 5
while time.monotonic() < deadline:
    snapshot = live.get_recorder().snapshot()
    if snapshot.serving.active or snapshot.recorded_total:
        break
    time.sleep(0.05)
else:
    raise AssertionError('no traffic')
print('ok')
"""


def manage(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "FERROX_DEMO_TRAFFIC": "0",
        **env,
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def migrated(tmp_path: Path) -> Path:
    migrate = manage("migrate", "--noinput", "-v", "0", tmp_path=tmp_path)
    assert migrate.returncode == 0, migrate.stderr
    return tmp_path


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    # Django 5.2+ may first announce the shell's automatic imports.
    return result.stdout.strip().splitlines()[-1]


def test_the_demo_project_passes_its_checks(tmp_path: Path) -> None:
    check = manage("check", tmp_path=tmp_path)
    assert check.returncode == 0, check.stderr


def test_home_links_everywhere_logs_in_and_shows_staff_the_live_summary(migrated: Path) -> None:
    assert last_line(manage("shell", "-c", PAGES, tmp_path=migrated)) == "ok"


def test_the_first_request_starts_demo_traffic_in_the_server_process(migrated: Path) -> None:
    shell = manage(
        "shell",
        "-c",
        TRAFFIC,
        tmp_path=migrated,
        FERROX_DEMO_TRAFFIC="1",
        FERROX_DEMO_TRAFFIC_S="3",
    )
    assert last_line(shell) == "ok"
