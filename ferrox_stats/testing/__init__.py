"""What a project that has ferrox_stats installed needs to run its own test suite.

The recorder starts an archive writer thread on the first ``live.track()``; that thread
holds a connection to the test database and would write what it still queues at exit,
after the test database is gone (into the database the settings name again by then).
Stop it before the test databases are torn down:

- Django's runner: ``TEST_RUNNER = "ferrox_stats.testing.DiscoverRunner"``, or mix
  ``StopRecorderMixin`` into your own runner;
- pytest-django: ``pytest_plugins = ["ferrox_stats.testing.pytest"]`` in the root
  ``conftest.py`` (or ``-p ferrox_stats.testing.pytest`` in ``addopts``);
- or no archive thread at all: ``FERROX_STATS = {..., "ARCHIVE_SINK": None}`` in the test
  settings (records stay in memory).
"""

from __future__ import annotations

from typing import Any

from django.test.runner import DiscoverRunner as DjangoDiscoverRunner

from .. import live


class StopRecorderMixin:
    """A test runner mixin: stops the recorder (dropping what its archive still queues)
    before the test databases are destroyed."""

    def teardown_databases(self, old_config: Any, **kwargs: Any) -> None:
        live.shutdown(flush=False)
        super().teardown_databases(old_config, **kwargs)  # type: ignore[misc]


class DiscoverRunner(StopRecorderMixin, DjangoDiscoverRunner):
    """Django's default test runner with ``StopRecorderMixin``."""
