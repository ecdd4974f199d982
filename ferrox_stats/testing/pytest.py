"""A pytest plugin for projects that have ferrox_stats installed (opt in, it is not
auto-loaded): ``pytest_plugins = ["ferrox_stats.testing.pytest"]`` in the root
``conftest.py``.

After each test, this process's recorder is stopped (its archive writer's thread joined,
its queue dropped, its database connection closed), so no test sees another's recorder
and no connection outlives the test database.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .. import live


@pytest.fixture(autouse=True)
def _ferrox_stats_stop_recorder() -> Iterator[None]:
    yield
    live.shutdown(flush=False)
