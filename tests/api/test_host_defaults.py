"""The app's views take none of the host project's global DRF defaults (issue 12, item 1).

DRF copies ``REST_FRAMEWORK``'s ``DEFAULT_*`` into ``APIView``'s class attributes when
``rest_framework.views`` is imported, so a host's settings are set here the same way:
on ``APIView`` itself (and in ``REST_FRAMEWORK`` for what DRF reads at request time).
Every route of the app must then answer exactly as without them. The host project in
``tests/host/`` proves the same with real settings, in its own processes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework import (
    authentication,
    negotiation,
    parsers,
    permissions,
    renderers,
    throttling,
    versioning,
)
from rest_framework.metadata import BaseMetadata
from rest_framework.response import Response
from rest_framework.views import APIView

from ferrox_stats import live
from tests.api.conftest import PREFIX, TokenClient
from tests.api.test_access import ACCESS, INGEST, PAGE, ROUTES, error_of
from tests.factories import archive, make_record

pytestmark = pytest.mark.django_db

VERSIONING = [
    versioning.URLPathVersioning,
    versioning.NamespaceVersioning,
    versioning.AcceptHeaderVersioning,
    versioning.QueryParameterVersioning,
    versioning.HostNameVersioning,
]


class NoMetadata(BaseMetadata):
    def determine_metadata(self, request: Any, view: Any) -> dict[str, Any]:
        return {"host": "metadata"}


class HostNegotiation(negotiation.DefaultContentNegotiation):
    def select_renderer(self, request: Any, renderers: Any, format_suffix: Any = None) -> Any:
        return (renderers[-1], renderers[-1].media_type)


def host_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    return Response({"host": "handled"}, status=418)


@pytest.fixture(params=VERSIONING, ids=lambda cls: cls.__name__)
def host_defaults(request: Any, monkeypatch: Any, settings: Any) -> None:
    """A host's global DRF configuration, as DRF would have applied it at import."""
    attributes = {
        "versioning_class": request.param,
        "renderer_classes": [renderers.JSONRenderer],
        "parser_classes": [parsers.FormParser],
        "authentication_classes": [authentication.BasicAuthentication],
        "permission_classes": [permissions.IsAdminUser],
        "throttle_classes": [throttling.AnonRateThrottle, throttling.UserRateThrottle],
        "content_negotiation_class": HostNegotiation,
        "metadata_class": NoMetadata,
    }
    for name, value in attributes.items():
        monkeypatch.setattr(APIView, name, value)
    settings.REST_FRAMEWORK = {
        "DEFAULT_VERSIONING_CLASS": f"{request.param.__module__}.{request.param.__name__}",
        "ALLOWED_VERSIONS": ["v9"],
        "DEFAULT_THROTTLE_RATES": {"anon": "1/day", "user": "1/day"},
        "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
        "PAGE_SIZE": 1,
        "EXCEPTION_HANDLER": f"{__name__}.host_exception_handler",
        "URL_FORMAT_OVERRIDE": None,
        "COMPACT_JSON": False,
        "UNICODE_JSON": False,
        "UNAUTHENTICATED_USER": None,
    }


@pytest.fixture
def populated(recorder: live.Recorder) -> None:
    archive([make_record(request_id="known-1")])
    with recorder.track(route="/v1/chat/completions", model="llama") as t:
        t.finish(status=200, request_id="ring-1")


# What each route answers a read+ingest token (GET; ingest: POST), as documented.
ANSWERS = {
    "ferrox_stats:requests": ("", 200, "application/json"),
    "ferrox_stats:stats": ("", 200, "application/json"),
    "ferrox_stats:fleet": ("", 200, "application/json"),
    "ferrox_stats:admin-stats": ("?limit=1", 200, "application/json"),
    "ferrox_stats:history": ("?limit=1", 200, "application/json"),
    "ferrox_stats:history-export": ("?format=csv", 200, "text/csv"),
    "ferrox_stats:history-detail": ("", 404, "application/json"),
    "ferrox_stats:schema": ("?format=json", 200, "application/vnd.oai.openapi+json"),
    "ferrox_stats:docs": ("", 200, "text/html"),
    "ferrox_stats:ingest": ("", 200, "application/json"),
    "ferrox_stats:metrics": ("", 200, "text/plain; version=0.0.4"),
    "ferrox_stats:usage": ("?group_by=model&format=csv", 200, "text/csv"),
    "ferrox_stats:usage-top": ("?by=key", 200, "application/json"),
}


def api_routes() -> list[Any]:
    return [
        pytest.param(route, id=route.name.removeprefix("ferrox_stats:"))
        for route in ROUTES
        if ACCESS[route.name].scope != PAGE
    ]


def test_every_api_route_is_covered() -> None:
    assert {p.values[0].name for p in api_routes()} == set(ANSWERS)


@pytest.mark.parametrize("route", api_routes())
def test_each_endpoint_answers_as_documented_under_the_hosts_defaults(
    host_defaults: None, populated: None, route: Any
) -> None:
    from ferrox_stats import tokens

    _, secret = tokens.issue("host-poller", read=True, ingest=True, replica="gpu-1")
    client = TokenClient(secret)
    query, status, content_type = ANSWERS[route.name]
    # Twice: the host's 1/day throttles would refuse the second.
    for n in range(2):
        if ACCESS[route.name].scope == INGEST:
            body = {"records": [{"request_id": f"host-{n}", "at_ms": 1_767_225_600_000}]}
            response = client.post(route.path, json.dumps(body), content_type="application/json")
            assert response.json()["accepted"] == 1, response.content[:300]
        else:
            response = client.get(route.path + query)
        assert response.status_code == status, response.content[:300]
        assert response["Content-Type"].startswith(content_type)
    if status == 404:
        assert error_of(response)["code"] == "not_found"
    elif content_type == "application/json":
        # DRF's own JSON, not the host's COMPACT_JSON=False rendering.
        assert b": " not in response.content and b", " not in response.content[:200]
        document = response.json()
        if route.name == "ferrox_stats:history":
            assert set(document) == {"entries", "next_cursor"}  # not a LimitOffset page
            assert [e["request_id"] for e in document["entries"]] == ["known-1"]


@pytest.mark.parametrize("route", api_routes())
def test_each_endpoint_refuses_a_stranger_with_its_own_error(
    host_defaults: None, route: Any
) -> None:
    # Asking for JSON: the schema would answer YAML and the docs HTML by default.
    client = TokenClient("fxs_not-a-real-key", HTTP_ACCEPT="application/json")
    if ACCESS[route.name].scope == INGEST:
        response = client.post(route.path, "{}", content_type="application/json")
    else:
        response = client.get(route.path)
    # The app's 401 in the app's error shape, not the host's handler (418) or Basic auth.
    assert response.status_code == 401
    assert error_of(response)["status"] == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_options_is_described_by_drfs_metadata_not_the_hosts(host_defaults: None) -> None:
    from ferrox_stats import tokens

    _, secret = tokens.issue("host-poller")
    response = TokenClient(secret).options(f"{PREFIX}/v1/stats")
    assert response.status_code == 200
    assert response.json()["name"] and "host" not in response.json()
