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


def test_the_price_book_is_parsed_once_per_value_of_its_settings(settings: Any) -> None:
    prices = {"m": [{"from": "2026-01-01", "input": 1.0, "output": 2.0}]}
    settings.FERROX_STATS = {"PRICES": prices}
    book = conf.PRICE_BOOK
    assert conf.PRICE_BOOK is book  # not parsed again
    assert book.prices_tokens and not book.prices_replicas
    prices["m"].append({"from": "2026-02-01", "input": 3.0, "output": 4.0})  # in place
    changed = conf.PRICE_BOOK
    assert changed is not book
    assert len(changed.model_periods()) == 2
    settings.FERROX_STATS = {
        "REPLICA_HOURLY_COST": {"gpu": [{"from": "2026-01-01", "per_hour": 1}]}
    }
    assert conf.PRICE_BOOK.prices_replicas and not conf.PRICE_BOOK.prices_tokens
    settings.FERROX_STATS = {}
    assert not conf.PRICE_BOOK.prices_tokens
