"""The host project before it added the app: the schema it served then."""

from __future__ import annotations

from .settings import *  # noqa: F403

INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "ferrox_stats"]  # noqa: F405
ROOT_URLCONF = "tests.host.urls_noapp"
