"""Fixtures for the dashboard: users by role, and a headless Chromium on the live server.

The browser tests need Debian's ``/usr/bin/chromium`` (or ``FERROX_CHROMIUM``) and the
``playwright`` package (never ``playwright install``: nothing is downloaded). Without
them they are skipped, unless ``CI=true``, where a missing browser fails every one.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.test import Client

from ferrox_stats import access, live
from tests.conftest import grant

PREFIX = "/control/telemetry"
DASHBOARD = f"{PREFIX}/dashboard/"
PROCESS = f"{PREFIX}/dashboard/process/"
HISTORY = f"{PREFIX}/dashboard/history/"
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
# Debian's package; FERROX_CHROMIUM names another build of Chromium to drive.
CHROMIUM = Path(os.environ.get("FERROX_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "correct horse battery staple"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "browser: drives the dashboard in headless Chromium (/usr/bin/chromium + playwright)",
    )


@pytest.fixture
def staff(django_user_model: Any, db: None) -> Any:
    """A staff user whose group may see the dashboard and the archive."""
    # No password: the test client logs in with force_login, and hashing one is slow.
    user = django_user_model.objects.create_user("staff", is_staff=True)
    return grant(user, access.DASHBOARD, access.ARCHIVE)


@pytest.fixture
def staff_client(staff: Any) -> Client:
    client = Client()
    client.force_login(staff)
    return client


@pytest.fixture
def fresh_recorder() -> Iterator[live.Recorder]:
    """This process's recorder, fresh, on the real clock (the live server shares it)."""
    yield live.reset()
    live.reset()


# -- the browser ---------------------------------------------------------------------------


def browser_missing() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install -y chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is missing (pip install playwright)"
    return None


@pytest.fixture
def chromium(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    missing = browser_missing()
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true runs the browser tests, but {missing}")
        pytest.skip(missing)
    from playwright.sync_api import expect, sync_playwright

    # Playwright's sync API keeps an event loop running in this thread, and Django
    # refuses ORM calls under a running loop. The calls the test makes are plain
    # synchronous ones, so allow them for this test only: Playwright starts and
    # stops with each test (about a second) rather than leave the loop running
    # under every test after it.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    expect.set_options(timeout=10_000)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()
        # Under a running loop Django keeps this thread's connections apart from the
        # plain ones; close them while that loop still runs, or they outlive the test
        # (and PostgreSQL refuses to drop a test database someone is connected to).
        connections.close_all()


@pytest.fixture
def page(chromium: Any, live_server: Any) -> Iterator[Any]:
    context = chromium.new_context(
        viewport={"width": 1440, "height": 900}, base_url=live_server.url
    )
    page = context.new_page()
    yield page
    context.close()
    # Let the live server finish what the page last asked (a poll, say) before the
    # database is flushed under it: SQLite's shared in-memory database answers a
    # flush racing a read with "table is locked" instead of waiting.
    for thread in threading.enumerate():
        if "process_request_thread" in thread.name:
            thread.join(timeout=10)


@pytest.fixture
def browser_staff(django_user_model: Any, live_server: Any, settings: Any) -> Any:
    """A staff user who may see the dashboard and the archive (also in the admin, for
    the drill-down)."""
    # The login form checks a real password; a fast hasher keeps that cheap.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

    user = django_user_model.objects.create_user("operator", password=PASSWORD, is_staff=True)
    return grant(user, access.DASHBOARD, access.ARCHIVE)


def log_in(page: Any, username: str, next_path: str = DASHBOARD) -> None:
    """Through the Django admin's login form, as a person would."""
    page.goto(f"/admin/login/?next={next_path}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"**{next_path}")


def save_artifact(page: Any, name: str = "dashboard-test.png") -> Path:
    """A screenshot of what the viewport shows, kept by CI as an artifact."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), animations="disabled")
    return path
