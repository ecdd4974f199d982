"""Settings are read at access time, with documented defaults (``ferrox_stats.conf``)."""

from __future__ import annotations

import socket
from typing import Any

from ferrox_stats.conf import DEFAULTS, conf


def test_defaults_apply_without_the_setting(settings: Any) -> None:
    del settings.FERROX_STATS
    assert conf.RING_CAPACITY == DEFAULTS["RING_CAPACITY"] == 1024
    assert conf.MAX_PAGE == 256
    assert conf.RATE_WINDOW_S == 5.0
    assert conf.GAUGE_MAX_AGE_S == 60.0
    assert conf.LABEL_MAX_MODELS == 20
    assert conf.ARCHIVE_SINK == "ferrox_stats.archive.writer.from_settings"
    assert conf.REPLICA == socket.gethostname()


def test_a_changed_setting_is_seen_at_once(settings: Any) -> None:
    settings.FERROX_STATS = {
        "RING_CAPACITY": 16,
        "GAUGE_MAX_AGE_S": None,
        "REPLICA": "r1",
        "LABEL_MAX_MODELS": 3,
    }
    assert conf.RING_CAPACITY == 16
    assert conf.LABEL_MAX_MODELS == 3
    assert conf.GAUGE_MAX_AGE_S is None
    assert conf.REPLICA == "r1"
