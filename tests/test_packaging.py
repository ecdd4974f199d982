"""What a host installs: the wheel and the sdist ``python -m build`` makes, and the wheel
in a fresh virtualenv with the core dependencies only (no aiohttp, no sidecar, no
psycopg), where the app must pass ``check``, migrate and serve its API, dashboard and
admin. The pass-through with ``[proxy]`` installed is the rest of the suite's.

Building takes a few seconds (its build backend comes from the package index); the
fresh venv about 20 s more, so it runs in the SQLite leg only, under CI=true or
FERROX_STATS_PACKAGING=1.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
# sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt, the standard text.
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
CORE = {
    "django>=5.2",
    "djangorestframework>=3.15",
    "django-filter>=24.1",
    "drf-spectacular>=0.28",
    "prometheus-client>=0.20",
}
NOT_SHIPPED = ("tests/", "loadgen/", "project/", "bench/", "templates/", "scripts/")
IN_CI = os.environ.get("CI") == "true"

pytestmark = pytest.mark.packaging


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The wheel and the sdist of this checkout, built once for the module."""
    try:
        import build  # noqa: F401
    except ImportError:
        if IN_CI:
            raise
        pytest.skip("`build` is not installed (the test extra has it)")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = out.glob("*.whl")
    [sdist] = out.glob("*.tar.gz")
    yield {"wheel": wheel, "sdist": sdist}


def wheel_names(dist: dict[str, Path]) -> list[str]:
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        return wheel.namelist()


def sdist_names(dist: dict[str, Path]) -> list[str]:
    with tarfile.open(dist["sdist"]) as sdist:
        # Each name without the archive's top folder (ferrox_stats-<version>/).
        return [name.partition("/")[2] for name in sdist.getnames()]


def metadata(dist: dict[str, Path]) -> list[str]:
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        [name] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        return wheel.read(name).decode().splitlines()


def test_the_license_is_the_standard_apache_2_text() -> None:
    assert hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest() == APACHE_2_SHA256


def test_the_wheel_holds_the_app_its_templates_static_files_and_license(
    dist: dict[str, Path],
) -> None:
    names = wheel_names(dist)
    app = [n for n in names if ".dist-info/" not in n]
    assert app and all(n.startswith("ferrox_stats/") for n in app), app
    assert "ferrox_stats/py.typed" in names
    assert "ferrox_stats/templates/ferrox_stats/dashboard.html" in names
    assert any(n.startswith("ferrox_stats/static/ferrox_stats/") for n in names)
    assert "ferrox_stats/migrations/0001_finished_requests_and_dead_letters.py" in names
    [license_file] = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        assert wheel.read(license_file) == (ROOT / "LICENSE").read_bytes()


def test_the_wheel_ships_no_development_tool(dist: dict[str, Path]) -> None:
    names = wheel_names(dist)
    assert not [n for n in names if "loadgen" in n or n.startswith(NOT_SHIPPED)]


def test_the_wheel_requires_only_the_core_and_offers_the_extras(dist: dict[str, Path]) -> None:
    lines = metadata(dist)
    required = {line.removeprefix("Requires-Dist: ") for line in lines if "Requires-Dist" in line}
    assert {r for r in required if ";" not in r} == CORE
    assert {"postgres", "proxy", "docs"} <= {
        line.removeprefix("Provides-Extra: ") for line in lines if "Provides-Extra" in line
    }
    assert 'psycopg[binary]>=3.1; extra == "postgres"' in required
    assert 'aiohttp>=3.10; extra == "proxy"' in required
    assert 'drf-spectacular-sidecar>=2024.7.1; extra == "docs"' in required
    assert "License-Expression: Apache-2.0" in lines


def test_the_sdist_is_the_source_and_its_documents_without_the_tests(
    dist: dict[str, Path],
) -> None:
    names = sdist_names(dist)
    for document in ("LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml"):
        assert document in names
    assert "ferrox_stats/templates/ferrox_stats/dashboard.html" in names
    assert not [n for n in names if n.startswith(NOT_SHIPPED)]


# The fresh venv's host project: the app's documented minimum, SQLite, and a smoke run.
HOST_SETTINGS = """
import json
import os
from pathlib import Path

SECRET_KEY = "host-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "ferrox_stats",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = os.environ.get("HOST_URLCONF", "host_urls")
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
DATABASES = {"default": {
    "ENGINE": "django.db.backends.sqlite3",
    "NAME": Path(__file__).resolve().parent / "host.sqlite3",
}}
if os.environ.get("HOST_DATABASE"):
    DATABASES = {"default": json.loads(os.environ["HOST_DATABASE"])}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
STATIC_URL = "static/"
"""

HOST_URLS = """
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("telemetry/", include("ferrox_stats.urls")),
    path("admin/", admin.site.urls),
]
"""

HOST_URLS_PROXY = """
from django.urls import include, path

from host_urls import urlpatterns as host

urlpatterns = [path("", include("ferrox_stats.proxy.urls")), *host]
"""

SMOKE = """
import importlib.util
import json
import os

import django

django.setup()

from django.contrib.auth import get_user_model
from django.test import Client

import ferrox_stats
from ferrox_stats import live
from ferrox_stats.models import FinishedRequest

before = FinishedRequest.objects.count()
with live.track(route="/v1/chat/completions", model="m", stream=False) as t:
    t.finish(status=200, prompt_tokens=3, completion_tokens=5)
live.get_recorder().sink.close()  # drain the write-behind queue into the archive

client = Client()
User = get_user_model()
client.force_login(User.objects.filter(username="root").first()
                   or User.objects.create_superuser("root"))
paths = {
    "requests": "/telemetry/v1/requests",
    "stats": "/telemetry/v1/stats",
    "history": "/telemetry/v1/history",
    "schema": "/telemetry/v1/schema",
    "docs": "/telemetry/v1/docs",
    "dashboard": "/telemetry/dashboard/",
    "admin": "/admin/ferrox_stats/finishedrequest/",
}
if os.environ.get("HOST_URLCONF") == "host_urls_proxy":
    paths["models"] = "/v1/models"
answers = {name: client.get(path) for name, path in paths.items()}
print(json.dumps({
    "app": ferrox_stats.__file__,
    "missing": [m for m in ("aiohttp", "drf_spectacular_sidecar", "psycopg", "uvicorn")
                if importlib.util.find_spec(m) is None],
    "status": {name: answer.status_code for name, answer in answers.items()},
    "docs": answers["docs"].content.decode(),
    "models": answers["models"].json() if "models" in answers else None,
    "entries": len(answers["requests"].json()["entries"]),
    "archived": FinishedRequest.objects.count() - before,
}))
"""


@pytest.fixture(scope="module")
def host(dist: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A fresh venv with the wheel and its core dependencies, and a host project."""
    if not (IN_CI or os.environ.get("FERROX_STATS_PACKAGING") == "1"):
        pytest.skip("installs into a fresh venv (~20 s): CI=true or FERROX_STATS_PACKAGING=1")
    if connection.vendor != "sqlite":
        pytest.skip("the host project is on SQLite of its own: the SQLite leg runs it")
    where = tmp_path_factory.mktemp("host")
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(dist["wheel"])],
        check=True,
        timeout=600,
    )
    for name, text in (
        ("host_settings.py", HOST_SETTINGS),
        ("host_urls.py", HOST_URLS),
        ("host_urls_proxy.py", HOST_URLS_PROXY),
        ("smoke.py", SMOKE),
    ):
        (where / name).write_text(textwrap.dedent(text))
    return {"python": python, "dir": where}


def run(host: dict[str, Any], *args: str, urlconf: str = "host_urls", database: str = "") -> Any:
    # Only the host's folder on the path: ferrox_stats must come from the wheel.
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": str(host["dir"]),
        "DJANGO_SETTINGS_MODULE": "host_settings",
        "HOST_URLCONF": urlconf,
        "HOST_DATABASE": database,
    }
    return subprocess.run(
        [host["python"], *args],
        cwd=host["dir"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_wheel_alone_passes_check_migrates_and_serves(host: dict[str, Any]) -> None:
    checked = run(host, "-m", "django", "check", "--fail-level", "WARNING")
    assert checked.returncode == 0, checked.stderr
    migrated = run(host, "-m", "django", "migrate", "--noinput", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr
    smoke = run(host, "smoke.py")
    assert smoke.returncode == 0, smoke.stderr
    seen = json.loads(smoke.stdout)
    assert "/venv/lib/" in seen["app"]
    assert seen["missing"] == ["aiohttp", "drf_spectacular_sidecar", "psycopg", "uvicorn"]
    assert seen["status"] == {
        "requests": 200,
        "stats": 200,
        "history": 200,
        "schema": 200,
        "docs": 404,
        "dashboard": 200,
        "admin": 200,
    }
    assert "pip install 'ferrox-stats[docs]'" in seen["docs"]
    assert (seen["entries"], seen["archived"]) == (1, 1)


def test_the_pass_through_mounted_without_aiohttp_fails_check_and_answers_503(
    host: dict[str, Any],
) -> None:
    checked = run(host, "-m", "django", "check", urlconf="host_urls_proxy")
    assert checked.returncode == 1
    assert "ferrox_stats.E070" in checked.stderr
    assert "pip install 'ferrox-stats[proxy]'" in checked.stderr
    assert run(host, "-m", "django", "migrate", "-v", "0").returncode == 0
    smoke = run(host, "smoke.py", urlconf="host_urls_proxy")
    assert smoke.returncode == 0, smoke.stderr
    seen = json.loads(smoke.stdout)
    assert seen["status"]["models"] == 503
    assert seen["models"]["error"]["code"] == "pass_through_unavailable"
    assert seen["status"]["dashboard"] == 200


PG_URL = os.environ.get("FERROX_STATS_PACKAGING_PG", "postgres://postgres@127.0.0.1:5432/postgres")


@pytest.fixture
def postgres_database() -> Iterator[dict[str, Any]]:
    """A database of this test's own on the local PostgreSQL, dropped after."""
    import dj_database_url
    import psycopg

    server = dj_database_url.parse(PG_URL)
    params = {
        "host": server["HOST"] or None,
        "port": server["PORT"] or None,
        "user": server["USER"] or None,
        "password": server["PASSWORD"] or None,
        "dbname": server["NAME"],
    }
    name = f"test_ferrox_stats_psycopg2_{os.getpid()}"
    try:
        admin = psycopg.connect(**params, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        if IN_CI:
            raise
        pytest.skip(f"PostgreSQL at {PG_URL} does not answer: {exc}")
    with admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield {**server, "ENGINE": "django.db.backends.postgresql", "NAME": name}
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_psycopg2_host_keeps_its_driver_and_archives_on_postgresql(
    host: dict[str, Any], postgres_database: dict[str, Any]
) -> None:
    # Django supports psycopg2; the app must not need psycopg 3 (it cannot COPY there).
    installed = run(host, "-m", "pip", "install", "-q", "psycopg2-binary")
    assert installed.returncode == 0, installed.stderr
    database = json.dumps(postgres_database)
    migrated = run(host, "-m", "django", "migrate", "--noinput", "-v", "0", database=database)
    assert migrated.returncode == 0, migrated.stderr
    smoke = run(host, "smoke.py", database=database)
    assert smoke.returncode == 0, smoke.stderr
    seen = json.loads(smoke.stdout)
    assert "psycopg" in seen["missing"]
    assert (seen["entries"], seen["archived"]) == (1, 1)
    assert seen["status"]["history"] == seen["status"]["admin"] == 200
