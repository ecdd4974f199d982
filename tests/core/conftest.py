"""Fixtures of the core's tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture
def frequent_thread_switches() -> Iterator[None]:
    """Switch threads far more often than the default so a missing lock shows."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)
