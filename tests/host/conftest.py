"""The host project's suite runs only under the host's settings (in its own process)."""

from __future__ import annotations

import os

if not os.environ.get("DJANGO_SETTINGS_MODULE", "").startswith("tests.host."):
    collect_ignore_glob = ["suite/*"]
