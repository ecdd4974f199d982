"""These tests need ``tests.settings_two_db``; under the main suite's settings they are
skipped at collection (``tests/test_two_databases.py`` runs them in a subprocess)."""

from __future__ import annotations

import os

if os.environ.get("DJANGO_SETTINGS_MODULE") != "tests.settings_two_db":
    collect_ignore_glob = ["test_*.py"]
