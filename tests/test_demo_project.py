"""The demo control plane (``project/``) is configured and serves its pages."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
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
assert '<code>http://testserver/v1</code>' in text  # the pass-through's base URL
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
User.objects.create_user('staffer', password='pw', is_staff=True)
staffer = Client()
staffer_login = {'username': 'staffer', 'password': 'pw'}
assert staffer.post('/accounts/login/', staffer_login).status_code == 302
assert 'In flight' not in staffer.get('/').content.decode()  # is_staff alone: no permission
assert dashboard is None or staffer.get(dashboard).status_code == 403

login = client.post('/accounts/login/', {'username': 'staff', 'password': 'pw', 'next': '/'})
assert (login.status_code, login.url) == (302, '/'), login.status_code
empty = client.get('/').content.decode()
assert dashboard is None or client.get(dashboard).status_code == 200  # demo.sh's: a superuser
assert 'In flight' in empty and 'No finished requests yet.' in empty
assert '<dt>Mean TTFT (ms)</dt><dd>—</dd>' in empty  # unmeasured, not 0
assert '<dt>Pool occupancy</dt><dd>—</dd>' in empty

with live.track(model='demo-model', route='/v1/completions', via_api_key='team-a') as t:
    t.finish(status=200)
page = client.get('/').content.decode()
assert 'demo-model' in page and '<dt>Completed</dt><dd>1</dd>' in page
assert '<td>team-a</td>' in page  # who called: the pass-through's key label

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


# The server is ASGI: the proxy is mounted at the root, static files are served in DEBUG,
# and no middleware makes an async view go through a thread.
ASGI = """
import logging
from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.handlers.asgi import ASGIHandler
from django.urls import resolve, reverse
from ferrox_stats.proxy import views as proxy_views
from ferrox_stats.proxy.upstreams import routing
from project import asgi, traffic

assert reverse('ferrox_stats_proxy:chat_completions') == '/v1/chat/completions'
assert resolve('/v1/chat/completions').func is proxy_views.chat_completions
assert resolve('/v1/embeddings').func is proxy_views.embeddings
assert resolve('/v1/models').func is proxy_views.models
assert resolve('/telemetry/v1/stats').url_name == 'stats'
assert routing().for_model('any-model').base_url == 'http://127.0.0.1:8765/v1'

served = asgi.served
assert isinstance(served, ASGIStaticFilesHandler) is settings.DEBUG, settings.DEBUG
assert (served.application if settings.DEBUG else served) is asgi.django_application

middleware = traffic.start_on_first_request
assert middleware.sync_capable and middleware.async_capable
async def get_response(request):
    return None
assert iscoroutinefunction(middleware(get_response))
assert not iscoroutinefunction(middleware(lambda request: None))

adapted = []
class Adapted(logging.Handler):
    def emit(self, record):
        if 'adapted' in record.getMessage():
            adapted.append(record.getMessage())
logger = logging.getLogger('django.request')
logger.addHandler(Adapted())
logger.setLevel(logging.DEBUG)
handler = ASGIHandler()
assert iscoroutinefunction(handler._middleware_chain)
assert adapted == [], adapted
print('ok')
"""


def manage(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = demo_environ(tmp_path, **env)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def demo_environ(tmp_path: Path, **env: str) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "FERROX_DEMO_TRAFFIC": "0",
        **env,
    }


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


# What README's "Production" section documents (a made-up key of deploy strength).
PRODUCTION = {
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": "x7Kq2vN9pL4wR8tY1uZ6mB3cD5fG0hJ2kA9sE4xW7qT1yU8iO3pL6nM0vC5bQ",
    "DJANGO_ALLOWED_HOSTS": "telemetry.example.com",
}


def test_check_deploy_passes_in_production_mode(tmp_path: Path) -> None:
    check = manage("check", "--deploy", "--fail-level", "WARNING", tmp_path=tmp_path, **PRODUCTION)
    assert check.returncode == 0, check.stderr
    assert check.stdout.strip() == "System check identified no issues (0 silenced)."


def test_check_deploy_refuses_production_with_the_demos_public_key(tmp_path: Path) -> None:
    env = {**PRODUCTION, "DJANGO_SECRET_KEY": "ferrox-stats-demo-not-secret"}
    check = manage("check", "--deploy", "--fail-level", "WARNING", tmp_path=tmp_path, **env)
    assert check.returncode == 1
    assert re.findall(r"^\?: \((\S+)\)", check.stderr, re.MULTILINE) == ["security.W009"]


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


@pytest.mark.parametrize("debug", ["1", "0"])
def test_the_server_is_asgi_with_the_pass_through_at_the_root(tmp_path: Path, debug: str) -> None:
    shell = manage(
        "shell",
        "-c",
        ASGI,
        tmp_path=tmp_path,
        DJANGO_DEBUG=debug,
        FERROX_DEMO_ENGINE_URL="http://127.0.0.1:8765/v1",
    )
    assert last_line(shell) == "ok"


# -- the demo's processes, for real ---------------------------------------------------------

# The demo's settings, except that the archive writes only when the server shuts down:
# what it wrote then was queued at the SIGTERM.
LAZY_ARCHIVE = """
from project.settings import *  # noqa: F403

FERROX_STATS = {**FERROX_STATS, "ARCHIVE_FLUSH_INTERVAL_S": 3600.0}  # noqa: F405
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def answers(url: str, process: subprocess.Popen[str], timeout_s: float = 30.0) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            opener.open(url, timeout=2).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts, each stopped after it if still running."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in reversed(processes):
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


def test_pass_through_calls_are_archived_when_uvicorn_is_stopped(
    migrated: Path, started: list[subprocess.Popen[str]]
) -> None:
    (migrated / "lazy_archive.py").write_text(LAZY_ARCHIVE)
    engine_port, server_port = free_port(), free_port()
    env = demo_environ(
        migrated,
        DJANGO_SETTINGS_MODULE="lazy_archive",
        PYTHONPATH=os.pathsep.join([str(migrated), str(ROOT)]),
        FERROX_DEMO_ENGINE_URL=f"http://127.0.0.1:{engine_port}/v1",
    )

    def start(name: str, *args: str) -> subprocess.Popen[str]:
        log = (migrated / f"{name}.log").open("w")
        process = subprocess.Popen(
            [sys.executable, *args], cwd=ROOT, env=env, text=True, stdout=log, stderr=log
        )
        log.close()  # the child has its own copy
        started.append(process)
        return process

    engine = start("engine", "-m", "loadgen.engine", "--port", str(engine_port))
    assert answers(f"http://127.0.0.1:{engine_port}/v1/models", engine)
    server = start(
        "server", "-m", "uvicorn", "project.asgi:application",
        "--port", str(server_port), "--log-level", "warning",
    )  # fmt: skip
    assert answers(f"http://127.0.0.1:{server_port}/", server)

    loadgen = subprocess.run(
        [sys.executable, "manage.py", "ferrox_stats_loadgen", "--requests", "12", "--quiet",
         "--openai-url", f"http://127.0.0.1:{server_port}/v1", "--openai-share", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert loadgen.returncode == 0, loadgen.stderr
    assert re.search(
        r", pass-through 12 \(streamed \d+, tokens \d+, unreachable 0\)\n$", loadgen.stdout
    )
    server.send_signal(signal.SIGTERM)
    # uvicorn shuts down, then raises the signal again: the process dies of it, no atexit.
    assert server.wait(30) == -signal.SIGTERM, (migrated / "server.log").read_text()
    engine.send_signal(signal.SIGTERM)
    engine.wait(30)

    counted = manage(
        "shell",
        "-c",
        "from ferrox_stats.models import ApiToken, FinishedRequest as F;"
        "(token,) = ApiToken.objects.all();"
        "rows = F.objects.filter(via_api_key=token.label, replica='demo-control-plane');"
        "print(token.can_infer, token.revoked_at is not None, rows.count())",
        tmp_path=migrated,
    )
    assert last_line(counted) == "True True 12"
