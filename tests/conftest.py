"""Fixtures shared by the suite: a fake clock and a fresh recorder per test."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from ferrox_stats import auth_failures, live

# No hypothesis deadline or data-generation speed check anywhere: a test asserts
# behaviour, never speed (bench/ measures that), and both fail a correct run whenever the
# machine is busy (loaded runs failed test_breakdown_export and test_breakdown so).
hypothesis_settings.register_profile(
    "ferrox_stats", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("ferrox_stats")


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, monotonic: float = 1000.0, wall_ms: int = 1_767_225_600_000) -> None:
        self.now = monotonic
        self.wall = wall_ms

    def monotonic(self) -> float:
        return self.now

    def wall_ms(self) -> int:
        return self.wall

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall += round(seconds * 1000)


@pytest.fixture(scope="session", autouse=True)
def _metrics_dir_removed_after_the_run() -> Iterator[None]:
    """The run's METRICS_DIR (tests/settings.py) goes with it."""
    yield
    from django.conf import settings

    where = getattr(settings, "METRICS_DIR", None)
    if where and os.path.basename(where) == f"ferrox_stats-tests-{os.getpid()}":
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def frequent_thread_switches() -> Iterator[None]:
    """Switch threads far more often than the default so a missing lock shows."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def recorder(clock: FakeClock) -> Iterator[live.Recorder]:
    """This process's recorder, fresh and on the fake clock; rebuilt from settings after."""
    yield live.reset(clock)
    live.reset()


@pytest.fixture(autouse=True)
def _fresh_fleet_cache() -> Iterator[None]:
    """Every test computes its own fleet document: the cache is keyed on a clock that
    each test's FakeClock starts at the same reading."""
    from ferrox_stats import fleet

    fleet.reset()
    yield
    fleet.reset()


@pytest.fixture(autouse=True)
def _fresh_auth_failures() -> Iterator[None]:
    """Every test starts with no failed authentications counted: the suite sends bad keys
    from 127.0.0.1 often, and its order is random."""
    auth_failures.ledger.clear()
    yield
    auth_failures.ledger.clear()


@pytest.fixture
def rollups_on(settings: Any) -> None:
    """``FERROX_STATS["ROLLUPS"]`` on: archive batches keep the usage rollups."""
    settings.FERROX_STATS = {**settings.FERROX_STATS, "ROLLUPS": True}


@pytest.fixture
def rollups_off(settings: Any) -> None:
    """``FERROX_STATS["ROLLUPS"]`` off: archive batches write no rollup delta."""
    settings.FERROX_STATS = {**settings.FERROX_STATS, "ROLLUPS": False}


@pytest.fixture
def token_db(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The token lookup stood in for (``tests.faults.TokenDatabase``), no outage known;
    the breaker's probes are waited for, so none outlives the test."""
    import threading

    from django.db import connections

    from ferrox_stats import tokens
    from tests.faults import TokenDatabase

    probes: list[threading.Thread] = []

    def spawn(probe: Any) -> None:
        def run() -> None:
            try:
                probe()
            finally:
                connections.close_all()

        probes.append(threading.Thread(target=run, daemon=True))
        probes[-1].start()

    token_db = TokenDatabase()
    monkeypatch.setattr(tokens, "_lookup", token_db)
    monkeypatch.setattr(tokens, "spawn", spawn)
    tokens.outage.reset()
    yield token_db
    for probe in probes:
        probe.join(10)
    tokens.outage.reset()


@pytest.fixture
def inline_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The token breaker's background probe made inline, so a test sees its outcome."""
    from ferrox_stats import tokens

    monkeypatch.setattr(tokens, "spawn", lambda probe: probe())


def grant(user: Any, *permissions: str, group: str = "telemetry") -> Any:
    """Give ``user`` ``permissions`` ("app_label.codename") through a group, as a host would."""
    from django.contrib.auth.models import Group, Permission

    team, _ = Group.objects.get_or_create(name=group)
    for permission in permissions:
        app_label, codename = permission.split(".")
        team.permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    user.groups.add(team)
    return user
