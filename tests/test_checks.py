"""System checks: one test per id (``ferrox_stats.checks``)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from ferrox_stats.checks import check_settings


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
        {"TOKEN_CACHE_S": -1},
        {"TOKEN_CACHE_S": "5"},
        {"PROXY_CONNECT_TIMEOUT_S": 0},
        {"PROXY_READ_TIMEOUT_S": None},
    ],
)
def test_e004_durations_are_positive_seconds(settings: Any, value: Any) -> None:
    assert ids(settings, value) == ["ferrox_stats.E004"]


@pytest.mark.parametrize("key", ["GAUGE_MAX_AGE_S", "RETENTION_DAYS"])
@pytest.mark.parametrize("value", [0, -5, "60"])
def test_e005_ages_are_positive_or_none(settings: Any, key: str, value: Any) -> None:
    assert ids(settings, {key: value}) == ["ferrox_stats.E005"]


@pytest.mark.parametrize("key", ["GAUGE_MAX_AGE_S", "RETENTION_DAYS"])
def test_ages_of_none_mean_forever(settings: Any, key: str) -> None:
    assert ids(settings, {key: None}) == []


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
def test_e050_host_schema_is_a_boolean(settings: Any, value: Any) -> None:
    assert ids(settings, {"HOST_SCHEMA": value}) == ["ferrox_stats.E050"]


@pytest.mark.parametrize("value", ["0/minute", "20", "20/fortnight", "many/minute", 20, True])
def test_e011_the_auth_failure_rate_is_a_drf_rate_or_none(settings: Any, value: Any) -> None:
    assert ids(settings, {"AUTH_FAILURE_RATE": value}) == ["ferrox_stats.E011"]


@pytest.mark.parametrize("value", ["5/second", "100/hour", None])
def test_good_auth_failure_rates_pass(settings: Any, value: Any) -> None:
    assert ids(settings, {"AUTH_FAILURE_RATE": value}) == []
