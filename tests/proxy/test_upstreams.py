"""Routing requests to upstreams (``ferrox_stats.proxy.upstreams``)."""

from __future__ import annotations

from typing import Any

import pytest

from ferrox_stats.proxy.upstreams import UpstreamConfigError, parse, routing

A = {"BASE_URL": "http://10.0.0.1:8000/v1/", "MODELS": ["llama", "qwen"], "API_KEY": "sk-a"}
B = {"BASE_URL": "https://b.internal/v1"}


def test_a_model_goes_to_the_upstream_listing_it_else_to_the_catch_all() -> None:
    routes = parse({"a": A, "b": B})
    assert routes.for_model("llama").name == "a"  # type: ignore[union-attr]
    assert routes.for_model("anything").name == "b"  # type: ignore[union-attr]
    assert routes.for_model("qwen").base_url == "http://10.0.0.1:8000/v1"  # type: ignore[union-attr]


def test_without_a_catch_all_an_unlisted_model_has_no_upstream() -> None:
    assert parse({"a": A}).for_model("mistral") is None
    assert parse({}).for_model("llama") is None


def test_star_is_the_catch_all() -> None:
    routes = parse({"a": {**B, "MODELS": ["*"]}})
    assert routes.fallback is not None and routes.for_model("x") == routes.fallback


def test_defaults_and_the_key_never_in_a_repr() -> None:
    upstream = parse({"a": A}).upstreams[0]
    assert (upstream.stream_usage, upstream.api_key) == (True, "sk-a")
    assert "sk-a" not in repr(upstream)
    assert upstream.url("chat/completions") == "http://10.0.0.1:8000/v1/chat/completions"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"a": {**B, "API_KEY": ""}}, "API_KEY must be a non-empty string"),
        ({"a": {**B, "MODELS": "llama"}}, "MODELS must be a list"),
        ({"a": {**B, "MODELS": [""]}}, "MODELS must be a list"),
        ({"a": {**B, "STREAM_USAGE": "no"}}, "STREAM_USAGE must be True or False"),
        ({"": B}, "non-empty string"),
        ({"a": B, "b": B}, "only one upstream may take every model"),
        ({"a": A, "b": {**B, "MODELS": ["qwen"]}}, "'qwen' is listed by 'a' and 'b'"),
    ],
)
def test_bad_configuration_says_why(raw: Any, message: str) -> None:
    with pytest.raises(UpstreamConfigError, match=message):
        parse(raw)


def test_routing_follows_the_settings(settings: Any) -> None:
    settings.FERROX_STATS = {"PROXY_UPSTREAMS": {"a": {**A}}}
    assert routing().for_model("llama") is not None
    settings.FERROX_STATS["PROXY_UPSTREAMS"]["a"]["MODELS"] = ["other"]  # changed in place
    assert routing().for_model("llama") is None
