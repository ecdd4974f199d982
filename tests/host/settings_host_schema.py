"""The host project opting in to describe the app in its own schema."""

from __future__ import annotations

from .settings import *  # noqa: F403

FERROX_STATS = {**FERROX_STATS, "HOST_SCHEMA": True}  # noqa: F405
