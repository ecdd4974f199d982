"""The app in someone else's control plane (issue 12): the host project in ``tests/host/``.

Each check runs in its own process, because a Django process has one set of settings
and DRF reads the global defaults at import: the host's own suite under pytest-django
(once per DRF versioning class) and under ``manage.py test``; the host's OpenAPI
schema with and without the app; ``check --deploy --fail-level WARNING``. Every run
uses this run's ``DATABASE_URL`` (each makes its own test database) and is bounded
in time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 300
VARIANTS = ["settings", "settings_namespace", "settings_accept", "settings_query"]
VARIANTS += ["settings_hostname"]


def run(*args: str, settings: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": f"tests.host.{settings}",
        "DATABASE_URL": os.environ.get("DATABASE_URL", "sqlite:///:memory:"),
    }
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def django_admin(*args: str, settings: str) -> subprocess.CompletedProcess[str]:
    return run("-m", "django", *args, f"--settings=tests.host.{settings}", settings=settings)


def output(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


@pytest.mark.parametrize("settings", VARIANTS)
def test_the_hosts_suite_passes_under_pytest(settings: str) -> None:
    done = run(
        "-m",
        "pytest",
        "tests/host/suite",
        f"--ds=tests.host.{settings}",
        "-q",
        "-p",
        "no:cacheprovider",
        # The README's recipe for a host's pytest suite (opt-in plugin).
        "-p",
        "ferrox_stats.testing.pytest",
        settings=settings,
    )
    assert done.returncode == 0, output(done)
    assert " passed" in done.stdout and "failed" not in done.stdout


def test_the_hosts_suite_passes_under_manage_py_test() -> None:
    done = django_admin("test", "tests.host.suite", "-v", "1", settings="settings")
    assert done.returncode == 0, output(done)
    assert "\nOK" in done.stderr


def schema(tmp_path: Path, settings: str) -> bytes:
    target = tmp_path / f"{settings}.yaml"
    done = django_admin(
        "spectacular", "--api-version", "v1", "--fail-on-warn", f"--file={target}",
        settings=settings,
    )  # fmt: skip
    assert done.returncode == 0, output(done)
    return target.read_bytes()


def test_the_hosts_schema_is_byte_identical_with_and_without_the_app(tmp_path: Path) -> None:
    without = schema(tmp_path, "settings_noapp")
    assert schema(tmp_path, "settings") == without
    document = yaml.safe_load(without)
    # The host's own names, which the app's once collided with.
    assert {"Error", "Stats", "Note"} <= set(document["components"]["schemas"])


def test_a_host_that_opts_in_gets_the_apps_operations_prefixed(tmp_path: Path) -> None:
    document: dict[str, Any] = yaml.safe_load(schema(tmp_path, "settings_host_schema"))
    host = yaml.safe_load(schema(tmp_path, "settings_noapp"))
    app_paths = {p: item for p, item in document["paths"].items() if p.startswith("/telemetry/")}
    assert app_paths
    for item in app_paths.values():
        for operation in item.values():
            assert operation["operationId"].startswith("ferrox_stats_")
            assert operation["tags"] == ["ferrox_stats"]
    # The host's paths, operations and components are as they were.
    assert {p: i for p, i in document["paths"].items() if p not in app_paths} == host["paths"]
    schemas = document["components"]["schemas"]
    assert {n: s for n, s in schemas.items() if not n.startswith("FerroxStats")} == (
        host["components"]["schemas"]
    )
    assert document["info"] == host["info"]


def test_check_deploy_passes_at_fail_level_warning() -> None:
    done = django_admin("check", "--deploy", "--fail-level", "WARNING", settings="settings_deploy")
    assert done.returncode == 0, output(done)
    assert "no issues" in done.stdout
