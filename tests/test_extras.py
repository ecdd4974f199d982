"""Optional features and their extras (``ferrox_stats.extras``): the checks E070/W070,
the pass-through's routes without aiohttp, and the Swagger UI without the sidecar. The
installed wheel without any extra is tests/test_packaging.py's."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from django.test import Client, RequestFactory
from django.urls import include, path

from ferrox_stats import checks
from ferrox_stats.proxy import unavailable

# A URLconf without the pass-through (this module, as ROOT_URLCONF).
urlpatterns: list[Any] = []


class NestedURLconf:
    """The pass-through two includes deep."""

    urlpatterns = [path("llm/", include([path("openai/", include("ferrox_stats.proxy.urls"))]))]


UPSTREAMS = {"engine": {"BASE_URL": "http://127.0.0.1:9/v1", "API_KEY": None}}


def missing(*modules: str) -> Any:
    return lambda module: module not in modules


def ids() -> list[str]:
    return [message.id for message in checks.check_extras()]


def test_everything_installed_passes() -> None:
    assert ids() == []


def test_e070_the_pass_through_mounted_without_aiohttp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks, "installed", missing("aiohttp"))
    [message] = checks.check_extras()  # tests.urls includes ferrox_stats.proxy.urls
    assert message.id == "ferrox_stats.E070"
    assert message.hint == "pip install 'ferrox-stats[proxy]'"


def test_e070_upstreams_configured_without_aiohttp(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.ROOT_URLCONF = __name__
    settings.FERROX_STATS = {"PROXY_UPSTREAMS": UPSTREAMS}
    monkeypatch.setattr(checks, "installed", missing("aiohttp"))
    assert ids() == ["ferrox_stats.E070"]


def test_e070_finds_the_pass_through_under_any_prefix(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.ROOT_URLCONF = NestedURLconf
    monkeypatch.setattr(checks, "installed", missing("aiohttp"))
    assert ids() == ["ferrox_stats.E070"]


def test_no_aiohttp_is_fine_when_the_pass_through_is_unused(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.ROOT_URLCONF = __name__
    monkeypatch.setattr(checks, "installed", missing("aiohttp", "drf_spectacular_sidecar"))
    assert ids() == []


def test_w070_the_sidecar_installed_but_not_in_installed_apps(settings: Any) -> None:
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a != "drf_spectacular_sidecar"]
    [message] = checks.check_extras()
    assert message.id == "ferrox_stats.W070"
    assert "'drf_spectacular_sidecar'" in message.hint


def test_the_checks_are_registered_with_django(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.core.checks import run_checks

    monkeypatch.setattr(checks, "installed", missing("aiohttp"))
    assert "ferrox_stats.E070" in [m.id for m in run_checks(tags=["ferrox_stats"])]


@pytest.mark.parametrize("view", ["chat_completions", "completions", "embeddings", "models"])
def test_without_aiohttp_each_route_answers_503_naming_the_extra(view: str) -> None:
    request = RequestFactory().post(f"/v1/{view}", data={}, content_type="application/json")
    response = asyncio.run(getattr(unavailable, view)(request))
    assert response.status_code == 503
    error = json.loads(response.content)["error"]
    assert error["code"] == "pass_through_unavailable"
    assert "pip install 'ferrox-stats[proxy]'" in error["message"]


@pytest.mark.django_db
def test_the_docs_page_without_the_sidecar_says_what_to_install(
    settings: Any, django_user_model: Any
) -> None:
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a != "drf_spectacular_sidecar"]
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root"))
    response = client.get("/control/telemetry/v1/docs")
    assert response.status_code == 404
    assert "pip install 'ferrox-stats[docs]'" in response.content.decode()
    # The schema itself needs no sidecar.
    assert client.get("/control/telemetry/v1/schema").status_code == 200


@pytest.mark.django_db
def test_the_docs_page_with_the_sidecar_serves_swagger_ui(django_user_model: Any) -> None:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root"))
    response = client.get("/control/telemetry/v1/docs")
    assert response.status_code == 200
    assert "drf_spectacular_sidecar/swagger-ui-dist/" in response.content.decode()
