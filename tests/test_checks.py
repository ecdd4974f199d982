"""System checks: one test per id (``ferrox_stats.checks``)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from ferrox_stats.checks import PUBLIC_NAMES, check_settings, validate_settings


def ids(settings: Any, value: Any) -> list[str]:
    settings.FERROX_STATS = value
    return [message.id for message in check_settings()]


def test_the_defaults_pass(settings: Any) -> None:
    assert ids(settings, {}) == []


def test_a_missing_setting_means_the_defaults(settings: Any) -> None:
    del settings.FERROX_STATS
    assert [m.id for m in check_settings()] == []


def test_e001_the_setting_must_be_a_dict(settings: Any) -> None:
    assert ids(settings, [("RING_CAPACITY", 8)]) == ["ferrox_stats.E001"]


def test_w001_an_unknown_key_is_named(settings: Any) -> None:
    settings.FERROX_STATS = {"RING_CAPACTY": 8}
    [message] = check_settings()
    assert message.id == "ferrox_stats.W001"
    assert "'RING_CAPACTY'" in message.msg


@pytest.mark.parametrize(
    "key",
    [
        "RING_CAPACITY",
        "RATE_SAMPLE_CAP",
        "ARCHIVE_QUEUE_MAX",
        "ARCHIVE_BATCH_SIZE",
        "PRUNE_BATCH_SIZE",
        "PROXY_MAX_BODY_BYTES",
        "PROXY_MAX_CONNECTIONS",
    ],
)
@pytest.mark.parametrize("value", [0, -1, 2.5, "1024", True, None])
def test_e002_sizes_must_be_positive_integers(settings: Any, key: str, value: Any) -> None:
    found = ids(settings, {key: value, "MAX_PAGE": 1})
    assert "ferrox_stats.E002" in found


@pytest.mark.parametrize(
    "value",
    [{"MAX_PAGE": 0}, {"MAX_PAGE": 2000, "RING_CAPACITY": 1000}, {"MAX_PAGE": "10"}],
)
def test_e003_max_page_is_positive_and_at_most_the_ring(settings: Any, value: Any) -> None:
    assert ids(settings, value) == ["ferrox_stats.E003"]


def test_max_page_equal_to_the_ring_is_fine(settings: Any) -> None:
    assert ids(settings, {"MAX_PAGE": 64, "RING_CAPACITY": 64}) == []


@pytest.mark.parametrize(
    "value",
    [
        {"RATE_WINDOW_S": 0},
        {"RATE_WINDOW_S": float("nan")},
        {"RATE_MIN_SPAN_S": -1},
        {"RATE_WINDOW_S": 1.0, "RATE_MIN_SPAN_S": 2.0},
        {"ARCHIVE_FLUSH_INTERVAL_S": 0},
        {"ARCHIVE_RETRY_MAX_S": "30"},
        {"ARCHIVE_SHUTDOWN_DEADLINE_S": -1.0},
        {"ROLLUP_FOLD_S": 0},
        {"TOKEN_CACHE_S": -1},
        {"TOKEN_CACHE_S": "5"},
        {"TOKEN_STALE_S": -1},
        {"TOKEN_STALE_S": "300"},
        {"TOKEN_STALE_S": float("inf")},
        {"INSTANCE_LOST_S": 0},
        {"INSTANCE_KEEP_S": "86400"},
        {"PROXY_CONNECT_TIMEOUT_S": 0},
        {"PROXY_READ_TIMEOUT_S": None},
    ],
)
def test_e004_durations_are_positive_seconds(settings: Any, value: Any) -> None:
    assert ids(settings, value) == ["ferrox_stats.E004"]


@pytest.mark.parametrize("key", ["GAUGE_MAX_AGE_S", "RETENTION_DAYS", "HEARTBEAT_S"])
@pytest.mark.parametrize("value", [0, -5, "60"])
def test_e005_ages_are_positive_or_none(settings: Any, key: str, value: Any) -> None:
    assert ids(settings, {key: value}) == ["ferrox_stats.E005"]


@pytest.mark.parametrize("value", [0, -1, 2.5, "20", True, None, 1001])
def test_e080_label_max_models_is_a_bounded_positive_integer(settings: Any, value: Any) -> None:
    assert ids(settings, {"LABEL_MAX_MODELS": value}) == ["ferrox_stats.E080"]


@pytest.mark.parametrize("value", [1, 1000])
def test_label_max_models_bounds_are_fine(settings: Any, value: int) -> None:
    assert ids(settings, {"LABEL_MAX_MODELS": value}) == []


@pytest.mark.parametrize("key", ["GAUGE_MAX_AGE_S", "RETENTION_DAYS", "HEARTBEAT_S"])
def test_ages_of_none_mean_forever(settings: Any, key: str) -> None:
    assert ids(settings, {key: None}) == []


@pytest.mark.parametrize(
    "value",
    [
        {"INSTANCE_LOST_S": 6.0},  # 3 default heartbeats: a live instance would read lost
        {"HEARTBEAT_S": 10, "INSTANCE_LOST_S": 30},
    ],
)
def test_e060_an_instance_is_lost_only_after_it_missed_three_heartbeats(
    settings: Any, value: Any
) -> None:
    assert ids(settings, value) == ["ferrox_stats.E060"]


def test_e061_a_lost_instance_is_kept_at_least_until_it_reads_lost(settings: Any) -> None:
    assert ids(settings, {"INSTANCE_LOST_S": 60, "INSTANCE_KEEP_S": 59}) == ["ferrox_stats.E061"]


@pytest.mark.parametrize(
    "value",
    [
        {"HEARTBEAT_S": None, "INSTANCE_LOST_S": 1.0, "INSTANCE_KEEP_S": 1.0},
        {"HEARTBEAT_S": 0.5, "INSTANCE_LOST_S": 1.6},
    ],
)
def test_heartbeat_thresholds_in_order_pass(settings: Any, value: Any) -> None:
    assert ids(settings, value) == []


@pytest.mark.parametrize("value", ["", "  ", 7])
def test_e006_replica_is_a_non_empty_string(settings: Any, value: Any) -> None:
    assert ids(settings, {"REPLICA": value}) == ["ferrox_stats.E006"]


@pytest.mark.parametrize("value", ["no.such.module.sink", "ferrox_stats.conf.DEFAULTS", 3])
def test_e007_the_archive_sink_is_a_dotted_path_to_a_callable(settings: Any, value: Any) -> None:
    assert ids(settings, {"ARCHIVE_SINK": value}) == ["ferrox_stats.E007"]


def test_the_check_is_registered_with_django(settings: Any) -> None:
    settings.FERROX_STATS = {"RING_CAPACITY": 0}
    # Only our tag: Django 6's model checks would want a database.
    with pytest.raises(SystemCheckError, match=r"ferrox_stats\.E002"):
        call_command("check", tags=["ferrox_stats"])


def test_e008_the_archive_database_is_a_known_alias(settings: Any) -> None:
    assert ids(settings, {"ARCHIVE_DATABASE": "archive"}) == ["ferrox_stats.E008"]


@pytest.mark.parametrize(
    "upstreams",
    [
        ["http://127.0.0.1:8001/v1"],
        {"a": "http://127.0.0.1:8001/v1"},
        {"a": {"BASE_URL": "127.0.0.1:8001"}},
        {"a": {"BASE_URL": "http://a/v1", "MODEL": ["m"]}},
        {"a": {"BASE_URL": "http://a/v1"}, "b": {"BASE_URL": "http://b/v1"}},
        {
            "a": {"BASE_URL": "http://a/v1", "MODELS": ["m"]},
            "b": {"BASE_URL": "http://b/v1", "MODELS": ["m"]},
        },
    ],
)
def test_e009_upstreams_must_route_every_model_to_one_place(settings: Any, upstreams: Any) -> None:
    assert ids(settings, {"PROXY_UPSTREAMS": upstreams}) == ["ferrox_stats.E009"]


def test_e009_names_the_problem_and_never_the_key(settings: Any) -> None:
    settings.FERROX_STATS = {
        "PROXY_UPSTREAMS": {"a": {"BASE_URL": "ftp://a", "API_KEY": "sk-secret-value"}}
    }
    [message] = check_settings()
    assert "upstream 'a' needs BASE_URL" in message.msg
    assert "sk-secret-value" not in message.msg + str(message.hint)


@pytest.mark.parametrize("value", [1, "yes", None])
def test_e010_require_key_is_a_boolean(settings: Any, value: Any) -> None:
    assert ids(settings, {"PROXY_REQUIRE_KEY": value}) == ["ferrox_stats.E010"]


@pytest.mark.parametrize("value", [1, "yes", None])
def test_e015_rollups_is_a_boolean(settings: Any, value: Any) -> None:
    assert ids(settings, {"ROLLUPS": value}) == ["ferrox_stats.E015"]


@pytest.mark.parametrize(
    "value",
    [
        {"PRICES": {"m": [{"from": "2026-01-01T00:30Z", "input": 1, "output": 1}]}},
        {"PRICES": ["m"]},
        {"REPLICA_HOURLY_COST": {"gpu": [{"from": "2026-01-01", "per_hour": -1}]}},
    ],
)
def test_e016_a_bad_price_table_is_refused_at_startup(settings: Any, value: Any) -> None:
    assert ids(settings, value) == ["ferrox_stats.E016"]


def test_e016_a_good_price_table_passes(settings: Any) -> None:
    prices = {"m": [{"from": "2026-01-01", "input": 0.2, "output": 0.6, "cached": 0.05}]}
    costs = {"gpu": [{"from": "2026-01-01T06:00:00+00:00", "per_hour": 2.4}]}
    assert ids(settings, {"PRICES": prices, "REPLICA_HOURLY_COST": costs}) == []


@pytest.mark.parametrize("value", ["", "US", "U$D", 840, None])
def test_e017_currency_is_a_code(settings: Any, value: Any) -> None:
    assert ids(settings, {"CURRENCY": value}) == ["ferrox_stats.E017"]


@pytest.mark.parametrize("value", [1, "yes", None])
def test_e050_host_schema_is_a_boolean(settings: Any, value: Any) -> None:
    assert ids(settings, {"HOST_SCHEMA": value}) == ["ferrox_stats.E050"]


@pytest.mark.parametrize("value", ["0/minute", "20", "20/fortnight", "many/minute", 20, True])
def test_e011_the_auth_failure_rate_is_a_drf_rate_or_none(settings: Any, value: Any) -> None:
    assert ids(settings, {"AUTH_FAILURE_RATE": value}) == ["ferrox_stats.E011"]


@pytest.mark.parametrize("value", ["5/second", "100/hour", None])
def test_good_auth_failure_rates_pass(settings: Any, value: Any) -> None:
    assert ids(settings, {"AUTH_FAILURE_RATE": value}) == []


@pytest.mark.parametrize(
    "value",
    [
        "600/minute",
        ["600/minute"],
        {"ferrox_stats_history": "lots"},
        {"ferrox_stats_ingest": 600},
        {"ferrox_stats_history": "0/minute"},
    ],
)
def test_e012_throttle_rates_is_a_dict_of_drf_rates(settings: Any, value: Any) -> None:
    assert ids(settings, {"THROTTLE_RATES": value}) == ["ferrox_stats.E012"]


@pytest.mark.parametrize(
    "value",
    [{}, None, {"ferrox_stats_history": None}, {"ferrox_stats_ingest": "10/s"}],
)
def test_good_throttle_rates_pass(settings: Any, value: Any) -> None:
    assert ids(settings, {"THROTTLE_RATES": value}) == []


def test_w012_an_unknown_throttle_scope_is_named(settings: Any) -> None:
    settings.FERROX_STATS = {"THROTTLE_RATES": {"ferrox_stats_histroy": "1/minute"}}
    [message] = check_settings()
    assert message.id == "ferrox_stats.W012"
    assert "'ferrox_stats_histroy'" in message.msg


@pytest.mark.parametrize("value", ["stats", None, 3, {"stats": True}])
def test_e013_public_endpoints_is_a_list(settings: Any, value: Any) -> None:
    assert ids(settings, {"PUBLIC_ENDPOINTS": value}) == ["ferrox_stats.E013"]


@pytest.mark.parametrize("value", [["stats", "statz"], ["ingest"], ("Stats",)])
def test_e014_public_endpoints_names_only_endpoints_that_can_be_public(
    settings: Any, value: Any
) -> None:
    settings.FERROX_STATS = {"PUBLIC_ENDPOINTS": value}
    [message] = check_settings()
    assert message.id == "ferrox_stats.E014"
    assert repr(value[-1]) in message.msg


def test_every_readable_endpoint_can_be_named_public(settings: Any) -> None:
    import inspect

    from ferrox_stats.api import metrics, schema, usage, views

    names = {
        cls.endpoint_name
        for module in (views, schema, metrics, usage)
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if getattr(cls, "endpoint_name", "") and cls.__module__ == module.__name__
    }
    assert names - {"ingest"} == set(PUBLIC_NAMES)
    assert ids(settings, {"PUBLIC_ENDPOINTS": sorted(PUBLIC_NAMES)}) == []


@pytest.mark.parametrize("value", ["relative/dir", "", 3, ["/tmp"]])
def test_e085_the_metrics_dir_is_an_absolute_path(settings: Any, value: Any) -> None:
    assert ids(settings, {"METRICS_DIR": value}) == ["ferrox_stats.E085"]


@pytest.mark.parametrize("value", ["otel", [], ["otel", "statsd"], None, {"vllm": 1}])
def test_e086_the_metrics_families_are_known(settings: Any, value: Any) -> None:
    assert ids(settings, {"METRICS_FAMILIES": value}) == ["ferrox_stats.E086"]


@pytest.mark.parametrize("value", ["", "9vllm", "vllm-x", "v llm", None, 3])
def test_e087_the_vllm_prefix_is_a_metric_name(settings: Any, value: Any) -> None:
    assert ids(settings, {"METRICS_VLLM_PREFIX": value}) == ["ferrox_stats.E087"]


def test_good_metrics_settings_pass(settings: Any, tmp_path: Any) -> None:
    good = {
        "METRICS_DIR": str(tmp_path),
        "METRICS_FAMILIES": ["vllm", "otel"],
        "METRICS_VLLM_PREFIX": "engine:vllm_",
    }
    assert ids(settings, good) == []


# -- startup validation: servers run no system checks ------------------------------------

# The examples, and what each check says.
INVALID = [
    ({"ARCHIVE_SINK": "nope.module.fn"}, "ferrox_stats.E007"),
    ({"GAUGE_MAX_AGE_S": -1}, "ferrox_stats.E005"),
    ({"RING_CAPACITY": 0, "MAX_PAGE": 1}, "ferrox_stats.E002"),
    ({"THROTTLE_RATES": {"ferrox_stats_history": "lots"}}, "ferrox_stats.E012"),
    ({"PUBLIC_ENDPOINTS": "stats"}, "ferrox_stats.E013"),
]


@pytest.mark.parametrize(("value", "check_id"), INVALID)
def test_invalid_settings_stop_a_server_wrapping_its_application(
    settings: Any, value: dict[str, Any], check_id: str
) -> None:
    from ferrox_stats import asgi, wsgi

    settings.FERROX_STATS = value
    message = next(m for m in check_settings() if m.id == check_id).msg
    with pytest.raises(ImproperlyConfigured, match=re.escape(f"{check_id}: {message}")):
        validate_settings()
    with pytest.raises(ImproperlyConfigured, match=re.escape(check_id)):
        asgi.wrap(lambda scope, receive, send: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ImproperlyConfigured, match=re.escape(check_id)):
        wsgi.wrap(object())


def test_warnings_alone_do_not_stop_a_server(settings: Any) -> None:
    from ferrox_stats import wsgi

    settings.FERROX_STATS = {"RING_CAPACTY": 8, "THROTTLE_RATES": {"other": "1/s"}}
    app = object()
    assert wsgi.wrap(app) is app


@pytest.mark.parametrize("name", ["ROLLUP_MINUTE_DAYS", "ROLLUP_HOUR_DAYS"])
@pytest.mark.parametrize("value", [0, -1, "7", True])
def test_e005_rollup_retention_is_a_positive_number_or_none(
    settings: Any, name: str, value: Any
) -> None:
    assert ids(settings, {name: value}) == ["ferrox_stats.E005"]
    assert ids(settings, {name: None}) == ids(settings, {name: 0.5}) == []
