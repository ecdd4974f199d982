"""System checks: each misconfiguration of ``FERROX_STATS`` has a stable id and a hint."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import ERROR, CheckMessage, Error, Warning
from django.core.exceptions import ImproperlyConfigured
from django.urls import URLResolver, get_resolver
from django.utils.module_loading import import_string

from .auth_failures import parse_rate
from .conf import DEFAULTS
from .core.prices import parse as parse_prices
from .extras import DOCS, PROXY, installed
from .proxy.upstreams import UpstreamConfigError, parse

# Keys that must be positive integers (E002) and positive seconds (E004).
POSITIVE_INTS = (
    "RING_CAPACITY",
    "RATE_SAMPLE_CAP",
    "ARCHIVE_QUEUE_MAX",
    "ARCHIVE_BATCH_SIZE",
    "PRUNE_BATCH_SIZE",
    "USAGE_MAX_ROWS",
    "PROXY_MAX_BODY_BYTES",
    "PROXY_MAX_CONNECTIONS",
)
POSITIVE_SECONDS = (
    "RATE_WINDOW_S",
    "RATE_MIN_SPAN_S",
    "ARCHIVE_FLUSH_INTERVAL_S",
    "ARCHIVE_RETRY_MAX_S",
    "ARCHIVE_SHUTDOWN_DEADLINE_S",
    "ROLLUP_FOLD_S",
    "INSTANCE_LOST_S",
    "INSTANCE_KEEP_S",
    "PROXY_CONNECT_TIMEOUT_S",
    "PROXY_READ_TIMEOUT_S",
)

# The most models LABEL_MAX_MODELS may name apart: each multiplies the breakdown's
# cells (by routes and outcomes), which every heartbeat and /metrics scrape carries.
LABEL_MAX_MODELS_LIMIT = 1000

# The endpoints PUBLIC_ENDPOINTS may name (each view's ``endpoint_name``); ``ingest``
# is never public.
PUBLIC_NAMES = (
    "requests",
    "stats",
    "admin_stats",
    "history",
    "history_detail",
    "history_export",
    "schema",
    "docs",
    "fleet",
    "metrics",
    "usage",
    "usage_top",
)

# What CURRENCY may be: an ISO 4217 code, or a name of the same shape ("CREDITS").
CURRENCY = re.compile(r"[A-Za-z0-9]{3,8}")

# The families /metrics may expose (METRICS_FAMILIES).
METRICS_FAMILIES = ("otel", "vllm")
# What Prometheus accepts as the start of a metric name (the vLLM prefix is one).
METRIC_PREFIX = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _positive_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _routing_problems(alias: str) -> list[CheckMessage]:
    """Whether Django's routers send the app's models to ``ARCHIVE_DATABASE``.

    The app's own queries name the alias, but the admin, ``migrate`` and Django's
    internals ask the routers; the two must agree or half the app works on one
    database and half on the other. With the alias "default" whatever the host's
    routers do stays as it was (a read replica for the admin, say).
    """
    from django.apps import apps
    from django.db import router

    if alias == "default":
        return []
    problems: list[CheckMessage] = []
    models = list(apps.get_app_config("ferrox_stats").get_models())
    astray = sorted(
        m.__name__
        for m in models
        if router.db_for_write(m) != alias or not router.allow_migrate_model(alias, m)
    )
    if astray:
        problems.append(
            Error(
                f"FERROX_STATS['ARCHIVE_DATABASE'] is {alias!r}, but the database routers "
                f"do not write or migrate {', '.join(astray)} there.",
                hint='Add DATABASE_ROUTERS = ["ferrox_stats.routers.TelemetryRouter"] (or '
                "route the app's models to that alias in your own router); see the "
                "README's section on the archive's own database.",
                id="ferrox_stats.E030",
            )
        )
        return problems
    doubled = sorted(m.__name__ for m in models if router.allow_migrate_model("default", m))
    if doubled:
        problems.append(
            Warning(
                f"The app's tables ({', '.join(doubled)}) would also be created on the "
                f"'default' database, although they live on {alias!r}.",
                hint="A router before TelemetryRouter allows every migration everywhere; "
                "let it answer None for the ferrox_stats app.",
                id="ferrox_stats.W030",
            )
        )
    elsewhere = sorted({db for m in models if (db := router.db_for_read(m)) != alias})
    if elsewhere:
        problems.append(
            Warning(
                f"The admin reads the app's models from {', '.join(map(repr, elsewhere))}, "
                f"while the app reads and writes {alias!r}.",
                hint="Right only if that is a replica of the archive's database; otherwise "
                "let your router answer None for the ferrox_stats app.",
                id="ferrox_stats.W031",
            )
        )
    return problems


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

    for name, zero in (
        ("TOKEN_CACHE_S", "checks every token against the database"),
        ("TOKEN_STALE_S", "refuses unconfirmed tokens while the database is down"),
    ):
        value = values[name]
        if not (_positive_number(value) or value == 0) or isinstance(value, bool):
            errors.append(
                Error(
                    f"FERROX_STATS[{name!r}] must be a number of seconds >= 0.",
                    hint=f"Got {value!r}; 0 {zero}.",
                    id="ferrox_stats.E004",
                )
            )

    for name, meaning in (
        ("GAUGE_MAX_AGE_S", "keeps the last report forever"),
        ("RETENTION_DAYS", "keeps the archive forever"),
        ("ROLLUP_MINUTE_DAYS", "keeps the minute rollups forever"),
        ("ROLLUP_HOUR_DAYS", "keeps the hour rollups forever"),
        ("HEARTBEAT_S", "publishes no heartbeat"),
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

    max_models = values["LABEL_MAX_MODELS"]
    if not (_positive_int(max_models) and max_models <= LABEL_MAX_MODELS_LIMIT):
        errors.append(
            Error(
                "FERROX_STATS['LABEL_MAX_MODELS'] must be a positive integer no larger "
                f"than {LABEL_MAX_MODELS_LIMIT}.",
                hint=f"Got {max_models!r}; the default is {DEFAULTS['LABEL_MAX_MODELS']!r}. "
                "Each model multiplies the label set every heartbeat and scrape carries.",
                id="ferrox_stats.E080",
            )
        )

    errors.extend(_check_heartbeat_ages(values))

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
    elif isinstance(alias, str):
        errors.extend(_routing_problems(alias))

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

    if not isinstance(values["ROLLUPS"], bool):
        errors.append(
            Error(
                "FERROX_STATS['ROLLUPS'] must be True or False.",
                hint=f"Got {values['ROLLUPS']!r}; True keeps the usage rollups as records "
                "are archived (README: Usage rollups).",
                id="ferrox_stats.E015",
            )
        )

    try:
        parse_prices(values["PRICES"], values["REPLICA_HOURLY_COST"])
    except ValueError as exc:
        errors.append(
            Error(
                f"FERROX_STATS prices are invalid: {exc}.",
                hint="PRICES and REPLICA_HOURLY_COST map a model or replica to a list of "
                "{'from': '2026-01-01', ...} entries (README: Prices and cost).",
                id="ferrox_stats.E016",
            )
        )
    if not (isinstance(values["CURRENCY"], str) and CURRENCY.fullmatch(values["CURRENCY"])):
        errors.append(
            Error(
                "FERROX_STATS['CURRENCY'] must be a currency code such as 'USD'.",
                hint=f"Got {values['CURRENCY']!r}: 3 to 8 letters or digits.",
                id="ferrox_stats.E017",
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

    errors.extend(_check_throttle_rates(values["THROTTLE_RATES"]))
    errors.extend(_check_public_endpoints(values["PUBLIC_ENDPOINTS"]))
    errors.extend(_check_metrics(values))
    return errors


def check_extras(**kwargs: Any) -> list[CheckMessage]:
    """A feature that is configured or mounted has its extra installed (E070), and an
    installed Swagger UI is served (W070)."""
    errors: list[CheckMessage] = []
    user = getattr(settings, "FERROX_STATS", {})
    upstreams = user.get("PROXY_UPSTREAMS") if isinstance(user, Mapping) else None
    if not installed(PROXY) and (upstreams or _mounted("ferrox_stats.proxy.urls")):
        errors.append(
            Error(
                "The pass-through is configured or mounted, but aiohttp is not installed: "
                "every pass-through route answers 503.",
                hint="pip install 'ferrox-stats[proxy]'",
                id="ferrox_stats.E070",
            )
        )
    if installed(DOCS) and not apps.is_installed(DOCS):
        errors.append(
            Warning(
                "drf-spectacular-sidecar is installed but not in INSTALLED_APPS: the API's "
                "Swagger UI (v1/docs) answers 404.",
                hint=f"Add {DOCS!r} to INSTALLED_APPS, or uninstall drf-spectacular-sidecar.",
                id="ferrox_stats.W070",
            )
        )
    return errors


def _mounted(urlconf: str) -> bool:
    """Whether the project's URLconf includes the module ``urlconf``, at any depth."""
    try:
        patterns = get_resolver().url_patterns
    except Exception:  # a URLconf that does not load is Django's own check to report
        return False
    return _includes(patterns, urlconf)


def _includes(patterns: Any, urlconf: str) -> bool:
    for pattern in patterns:
        if isinstance(pattern, URLResolver) and (
            getattr(pattern.urlconf_module, "__name__", None) == urlconf
            or _includes(pattern.url_patterns, urlconf)
        ):
            return True
    return False


def _check_throttle_rates(rates: Any) -> list[CheckMessage]:
    scopes = DEFAULTS["THROTTLE_RATES"]
    if rates is None:
        return []
    if not isinstance(rates, Mapping):
        return [
            Error(
                "FERROX_STATS['THROTTLE_RATES'] must be a dict of scope to rate.",
                hint=f"Got {rates!r}; e.g. {scopes!r}.",
                id="ferrox_stats.E012",
            )
        ]
    messages: list[CheckMessage] = []
    for scope, rate in rates.items():
        if scope not in scopes:
            messages.append(
                Warning(
                    f"FERROX_STATS['THROTTLE_RATES'] has an unknown scope {scope!r}; "
                    "it is ignored.",
                    hint=f"Known scopes: {', '.join(sorted(scopes))}.",
                    id="ferrox_stats.W012",
                )
            )
        elif rate is not None:
            try:
                parse_rate(rate)
            except ValueError as exc:
                messages.append(
                    Error(
                        f"FERROX_STATS['THROTTLE_RATES'][{scope!r}] must be a rate like "
                        "'600/minute' or None.",
                        hint=f"{exc}; None leaves the scope unthrottled.",
                        id="ferrox_stats.E012",
                    )
                )
    return messages


def _check_heartbeat_ages(values: Mapping[str, Any]) -> list[CheckMessage]:
    """The liveness thresholds in the order the states need: live, then stale, then lost,
    then pruned. (Each value's own type is E004/E005's to report.)"""
    heartbeat, lost, keep = (
        values["HEARTBEAT_S"],
        values["INSTANCE_LOST_S"],
        values["INSTANCE_KEEP_S"],
    )
    messages: list[CheckMessage] = []
    if _positive_number(heartbeat) and _positive_number(lost) and lost <= 3 * heartbeat:
        messages.append(
            Error(
                "FERROX_STATS['INSTANCE_LOST_S'] must exceed 3 * HEARTBEAT_S.",
                hint=f"Got HEARTBEAT_S={heartbeat!r}, INSTANCE_LOST_S={lost!r}: an instance "
                "is live for 3 heartbeats, so a smaller value would call a live one lost.",
                id="ferrox_stats.E060",
            )
        )
    if _positive_number(lost) and _positive_number(keep) and keep < lost:
        messages.append(
            Error(
                "FERROX_STATS['INSTANCE_KEEP_S'] must be at least INSTANCE_LOST_S.",
                hint=f"Got INSTANCE_LOST_S={lost!r}, INSTANCE_KEEP_S={keep!r}: a crashed "
                "instance's row would be deleted before it is ever shown lost.",
                id="ferrox_stats.E061",
            )
        )
    return messages


def _check_metrics(values: Mapping[str, Any]) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    where = values["METRICS_DIR"]
    if where is not None and not (isinstance(where, str) and os.path.isabs(where)):
        messages.append(
            Error(
                "FERROX_STATS['METRICS_DIR'] must be an absolute path or None.",
                hint=f"Got {where!r}; None uses a directory under the system temp dir.",
                id="ferrox_stats.E085",
            )
        )
    families = values["METRICS_FAMILIES"]
    if (
        isinstance(families, str)
        or not isinstance(families, list | tuple | set | frozenset)
        or not families
        or any(family not in METRICS_FAMILIES for family in families)
    ):
        messages.append(
            Error(
                "FERROX_STATS['METRICS_FAMILIES'] must be a non-empty list of metric families.",
                hint=f"Got {families!r}; known: {', '.join(METRICS_FAMILIES)}.",
                id="ferrox_stats.E086",
            )
        )
    prefix = values["METRICS_VLLM_PREFIX"]
    if not (isinstance(prefix, str) and METRIC_PREFIX.fullmatch(prefix)):
        messages.append(
            Error(
                "FERROX_STATS['METRICS_VLLM_PREFIX'] must be a Prometheus metric name.",
                hint=f"Got {prefix!r}; letters, digits, '_' and ':', not starting with a "
                'digit (the default is "vllm").',
                id="ferrox_stats.E087",
            )
        )
    return messages


def _check_public_endpoints(names: Any) -> list[CheckMessage]:
    if isinstance(names, str) or not isinstance(names, list | tuple | set | frozenset):
        return [
            Error(
                "FERROX_STATS['PUBLIC_ENDPOINTS'] must be a list of endpoint names.",
                hint=f'Got {names!r}; e.g. ["stats"] (a bare string is not a list).',
                id="ferrox_stats.E013",
            )
        ]
    unknown = [name for name in names if name not in PUBLIC_NAMES]
    if not unknown:
        return []
    return [
        Error(
            f"FERROX_STATS['PUBLIC_ENDPOINTS'] names unknown endpoints: "
            f"{', '.join(map(repr, unknown))}.",
            hint=f"Names that can be public: {', '.join(PUBLIC_NAMES)} (never ingest).",
            id="ferrox_stats.E014",
        )
    ]


def settings_errors() -> list[CheckMessage]:
    """The errors (not warnings) ``check_settings`` finds: settings the app cannot run
    with. Cheap: no database, no network."""
    return [message for message in check_settings() if message.level >= ERROR]


def validate_settings() -> None:
    """Raise ``ImproperlyConfigured`` with the checks' messages if ``FERROX_STATS`` has
    an error: what a server runs at startup (``ferrox_stats.asgi.wrap``,
    ``ferrox_stats.wsgi.wrap``), since servers run no system checks."""
    if errors := settings_errors():
        raise ImproperlyConfigured(describe(errors))


def describe(messages: list[CheckMessage]) -> str:
    """The messages as ``manage.py check`` words them, one per line."""
    return "Invalid FERROX_STATS settings:\n" + "\n".join(
        f"{message.id}: {message.msg} HINT: {message.hint}" for message in messages
    )
