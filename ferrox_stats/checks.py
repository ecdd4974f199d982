"""System checks: each misconfiguration of ``FERROX_STATS`` has a stable id and a hint."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.utils.module_loading import import_string

from .auth_failures import parse_rate
from .conf import DEFAULTS
from .proxy.upstreams import UpstreamConfigError, parse

# Keys that must be positive integers (E002) and positive seconds (E004).
POSITIVE_INTS = (
    "RING_CAPACITY",
    "RATE_SAMPLE_CAP",
    "ARCHIVE_QUEUE_MAX",
    "ARCHIVE_BATCH_SIZE",
    "PRUNE_BATCH_SIZE",
    "PROXY_MAX_BODY_BYTES",
    "PROXY_MAX_CONNECTIONS",
)
POSITIVE_SECONDS = (
    "RATE_WINDOW_S",
    "RATE_MIN_SPAN_S",
    "ARCHIVE_FLUSH_INTERVAL_S",
    "ARCHIVE_RETRY_MAX_S",
    "ARCHIVE_SHUTDOWN_DEADLINE_S",
    "PROXY_CONNECT_TIMEOUT_S",
    "PROXY_READ_TIMEOUT_S",
)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _positive_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def check_settings(**kwargs: Any) -> list[CheckMessage]:
    """Validate ``settings.FERROX_STATS`` against what the recorder can run with."""
    user = getattr(settings, "FERROX_STATS", {})
    if not isinstance(user, Mapping):
        return [
            Error(
                "FERROX_STATS must be a dict.",
                hint=f"Got {type(user).__name__}; see the README's Configuration section.",
                id="ferrox_stats.E001",
            )
        ]
    errors: list[CheckMessage] = []
    values = {**DEFAULTS, **user}

    for name in sorted(set(user) - set(DEFAULTS)):
        errors.append(
            Warning(
                f"FERROX_STATS has an unknown key {name!r}; it is ignored.",
                hint=f"Known keys: {', '.join(sorted(DEFAULTS))}.",
                id="ferrox_stats.W001",
            )
        )

    for name in POSITIVE_INTS:
        if not _positive_int(values[name]):
            errors.append(
                Error(
                    f"FERROX_STATS[{name!r}] must be a positive integer.",
                    hint=f"Got {values[name]!r}; the default is {DEFAULTS[name]!r}.",
                    id="ferrox_stats.E002",
                )
            )

    max_page, capacity = values["MAX_PAGE"], values["RING_CAPACITY"]
    if not _positive_int(max_page) or (_positive_int(capacity) and max_page > capacity):
        errors.append(
            Error(
                "FERROX_STATS['MAX_PAGE'] must be a positive integer no larger than RING_CAPACITY.",
                hint=f"Got MAX_PAGE={max_page!r} with RING_CAPACITY={capacity!r}.",
                id="ferrox_stats.E003",
            )
        )

    for name in POSITIVE_SECONDS:
        if not _positive_number(values[name]):
            errors.append(
                Error(
                    f"FERROX_STATS[{name!r}] must be a positive number of seconds.",
                    hint=f"Got {values[name]!r}; the default is {DEFAULTS[name]!r}.",
                    id="ferrox_stats.E004",
                )
            )
    window, min_span = values["RATE_WINDOW_S"], values["RATE_MIN_SPAN_S"]
    if _positive_number(window) and _positive_number(min_span) and min_span > window:
        errors.append(
            Error(
                "FERROX_STATS['RATE_MIN_SPAN_S'] must not exceed RATE_WINDOW_S.",
                hint=f"Got RATE_WINDOW_S={window!r}, RATE_MIN_SPAN_S={min_span!r}.",
                id="ferrox_stats.E004",
            )
        )

    cache = values["TOKEN_CACHE_S"]
    if not (_positive_number(cache) or cache == 0) or isinstance(cache, bool):
        errors.append(
            Error(
                "FERROX_STATS['TOKEN_CACHE_S'] must be a number of seconds >= 0.",
                hint=f"Got {cache!r}; 0 checks every token against the database.",
                id="ferrox_stats.E004",
            )
        )

    for name, meaning in (
        ("GAUGE_MAX_AGE_S", "keeps the last report forever"),
        ("RETENTION_DAYS", "keeps the archive forever"),
    ):
        value = values[name]
        if value is not None and not _positive_number(value):
            errors.append(
                Error(
                    f"FERROX_STATS[{name!r}] must be a positive number or None.",
                    hint=f"Got {value!r}; None {meaning}.",
                    id="ferrox_stats.E005",
                )
            )

    replica = values["REPLICA"]
    if replica is not None and not (isinstance(replica, str) and replica.strip()):
        errors.append(
            Error(
                "FERROX_STATS['REPLICA'] must be a non-empty string or None.",
                hint=f"Got {replica!r}; None uses the host name.",
                id="ferrox_stats.E006",
            )
        )

    sink = values["ARCHIVE_SINK"]
    if sink is not None:
        try:
            factory = import_string(sink) if isinstance(sink, str) else None
        except ImportError as exc:
            factory = None
            reason = str(exc)
        else:
            reason = "not a dotted path to a callable"
        if not callable(factory):
            errors.append(
                Error(
                    "FERROX_STATS['ARCHIVE_SINK'] must be a dotted path to a callable or None.",
                    hint=f"Got {sink!r}: {reason}.",
                    id="ferrox_stats.E007",
                )
            )

    alias = values["ARCHIVE_DATABASE"]
    if alias not in settings.DATABASES:
        errors.append(
            Error(
                "FERROX_STATS['ARCHIVE_DATABASE'] must name a database in DATABASES.",
                hint=f"Got {alias!r}; known: {', '.join(settings.DATABASES)}.",
                id="ferrox_stats.E008",
            )
        )

    try:
        parse(values["PROXY_UPSTREAMS"])
    except UpstreamConfigError as exc:
        errors.append(
            Error(
                f"FERROX_STATS['PROXY_UPSTREAMS'] {exc}.",
                hint='Each upstream: {"BASE_URL": "http://host:port/v1", "API_KEY": None, '
                '"MODELS": ["model-name"]}; see the README\'s pass-through section.',
                id="ferrox_stats.E009",
            )
        )

    if not isinstance(values["PROXY_REQUIRE_KEY"], bool):
        errors.append(
            Error(
                "FERROX_STATS['PROXY_REQUIRE_KEY'] must be True or False.",
                hint=f"Got {values['PROXY_REQUIRE_KEY']!r}.",
                id="ferrox_stats.E010",
            )
        )

    if not isinstance(values["HOST_SCHEMA"], bool):
        errors.append(
            Error(
                "FERROX_STATS['HOST_SCHEMA'] must be True or False.",
                hint=f"Got {values['HOST_SCHEMA']!r}; True adds the app's API to the "
                "project's own drf-spectacular schema.",
                id="ferrox_stats.E050",
            )
        )

    rate = values["AUTH_FAILURE_RATE"]
    if rate is not None:
        try:
            parse_rate(rate)
        except ValueError as exc:
            errors.append(
                Error(
                    "FERROX_STATS['AUTH_FAILURE_RATE'] must be a rate like '20/minute' or None.",
                    hint=f"{exc}; None leaves failed authentications unthrottled.",
                    id="ferrox_stats.E011",
                )
            )
    return errors
