"""The OpenAPI schema describes every route, and the API keeps to it under fuzzing.

The schema is fetched from the app itself (``/v1/schema?format=json``: the default
rendering is YAML). Schemathesis then generates hundreds of requests per operation
from it, positive and negative, and sends them in-process to Django's WSGI handler,
with a read+ingest token, with no credentials, and with the credentials it makes up:
no answer may be a 5xx, and every answer must have a documented status, content type
and body.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
import yaml
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from drf_spectacular.checks import schema_check
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from ferrox_stats import live, tokens
from ferrox_stats.api.filters import HistoryFilter
from tests.api.conftest import PREFIX, TokenClient
from tests.api.test_access import ACCESS, API, ROUTES, Route
from tests.conftest import FakeClock
from tests.factories import archive, make_record

pytestmark = pytest.mark.django_db

SCHEMA_URL = f"{PREFIX}/v1/schema?format=json"
# The schema describes the API, not itself or its UI.
UNDESCRIBED = {"ferrox_stats:schema", "ferrox_stats:docs"}
HISTORY_FILTERS = sorted(HistoryFilter.base_filters)
USAGE_FILTERS = ["key", "model", "replica", "route", "outcome"]
RING_PARAMETERS = ["instance", "limit", "since"]
# The query parameters each route is documented with: the API's contract with pollers.
QUERY_PARAMETERS: dict[str, list[str]] = {
    "ferrox_stats:requests": RING_PARAMETERS,
    "ferrox_stats:admin-stats": RING_PARAMETERS,
    "ferrox_stats:stats": [],
    "ferrox_stats:fleet": ["instance"],
    "ferrox_stats:history": sorted({"cursor", "order", "limit", *HISTORY_FILTERS}),
    "ferrox_stats:history-export": sorted({"format", *HISTORY_FILTERS}),
    "ferrox_stats:history-detail": [],
    "ferrox_stats:ingest": [],
    "ferrox_stats:metrics": [],
    "ferrox_stats:usage": sorted(
        {"since", "until", "bucket", "group_by", "format", "latency", *USAGE_FILTERS}
    ),
    "ferrox_stats:usage-top": sorted(
        {"by", "metric", "limit", "since", "until", "latency", *USAGE_FILTERS}
    ),
}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
# Examples per operation with the token: hundreds where a request is cheap; ingest
# bodies are large and each accepted batch writes, so fewer there.
EXAMPLES = {
    "ferrox_stats_requests": 200,
    "ferrox_stats_stats": 200,
    "ferrox_stats_fleet": 200,
    "ferrox_stats_admin_stats": 200,
    "ferrox_stats_history_list": 200,
    "ferrox_stats_history_detail": 200,
    "ferrox_stats_history_export": 150,
    "ferrox_stats_ingest": 120,
    "ferrox_stats_metrics": 100,
    "ferrox_stats_usage": 150,
    "ferrox_stats_usage_top": 150,
}
# Without a valid credential every case is refused before any parsing, so fewer
# suffice: 100 anonymous and 100 with made-up credentials per operation.
UNAUTHENTICATED_EXAMPLES = 100
AUTH_MODES = ("token", "anonymous", "made-up")


def templated(route: Route) -> str:
    """The route's OpenAPI path: each sampled path parameter back to ``{name}``."""
    path = route.path
    for name, sample in route.kwargs.items():
        path = path.replace(sample, "{" + name + "}")
    return path


def documented_routes() -> list[Route]:
    """The API's routes (the dashboard's HTML pages are not the API)."""
    return [
        route
        for route in ROUTES
        if route.name not in UNDESCRIBED
        and (route.name not in ACCESS or ACCESS[route.name].scope in API)
    ]


def served(route: Route) -> set[str]:
    # OPTIONS and HEAD are DRF's and Django's, not the API's operations.
    return {m.lower() for m in route.served} - {"options", "head"}


@pytest.fixture
def fuzz_secret(db: None) -> str:
    _, secret = tokens.issue("fuzzer", read=True, ingest=True, replica="fuzz-replica")
    return secret


@pytest.fixture
def schema_document(read_client: TokenClient) -> dict[str, Any]:
    response = read_client.get(SCHEMA_URL)
    assert response.status_code == 200
    document: dict[str, Any] = json.loads(response.content)
    return document


# -- fetching it ---------------------------------------------------------------------


def test_the_schema_is_yaml_by_default_and_json_when_asked(read_client: TokenClient) -> None:
    default = read_client.get(f"{PREFIX}/v1/schema")
    assert default["Content-Type"].startswith("application/vnd.oai.openapi")
    as_yaml = yaml.safe_load(default.content)
    by_format = read_client.get(SCHEMA_URL)
    assert by_format["Content-Type"].startswith("application/vnd.oai.openapi+json")
    by_accept = read_client.get(f"{PREFIX}/v1/schema", HTTP_ACCEPT="application/json")
    assert by_accept["Content-Type"].startswith("application/json")
    assert json.loads(by_format.content) == json.loads(by_accept.content) == as_yaml
    assert as_yaml["openapi"].startswith("3.")


# -- what it describes ----------------------------------------------------------------


def test_the_schema_describes_every_route_and_nothing_else(
    schema_document: dict[str, Any],
) -> None:
    expected = {templated(route) for route in documented_routes()}
    assert set(schema_document["paths"]) == expected


@pytest.mark.parametrize("route", documented_routes(), ids=str)
def test_each_route_is_described_with_its_operations_and_responses(
    schema_document: dict[str, Any], route: Route
) -> None:
    item = schema_document["paths"][templated(route)]
    operations = {method for method in item if method != "parameters"}
    assert operations == served(route)
    for method in operations:
        operation = item[method]
        assert operation.get("operationId") and operation.get("summary")
        parameters = operation.get("parameters", [])
        assert sorted(p["name"] for p in parameters if p["in"] == "path") == sorted(route.kwargs)
        assert all(p.get("required") for p in parameters if p["in"] == "path")
        responses = operation["responses"]
        # Closed by default: every operation says how it refuses.
        assert {"200", "400", "401", "403"} <= set(responses), sorted(responses)
        for status, response in responses.items():
            assert response.get("content"), (method, status)
        for status in ("400", "401", "403"):
            schema = responses[status]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/FerroxStatsError"}
        # No operation offers an anonymous alternative ({}) among its security schemes.
        security = operation["security"]
        assert {"ferroxStatsToken": []} in security and {} not in security
        if method == "post":
            body = operation["requestBody"]
            assert body["required"] is True
            assert list(body["content"]) == ["application/json"]


def _query_cases() -> list[Any]:
    return [pytest.param(route, id=str(route)) for route in documented_routes()]


@pytest.mark.parametrize("route", _query_cases())
def test_each_route_documents_its_query_parameters(
    schema_document: dict[str, Any], route: Route
) -> None:
    assert route.name in QUERY_PARAMETERS, (
        f"{route.name}: add the query parameters it is documented with to QUERY_PARAMETERS"
    )
    item = schema_document["paths"][templated(route)]
    for method in served(route):
        parameters = item[method].get("parameters", [])
        assert (
            sorted(p["name"] for p in parameters if p["in"] == "query")
            == (QUERY_PARAMETERS[route.name])
        )


def test_the_error_document_is_described_as_served(schema_document: dict[str, Any]) -> None:
    schemas = schema_document["components"]["schemas"]
    assert schemas["FerroxStatsError"]["required"] == ["error"]
    error = schemas["FerroxStatsError"]["properties"]["error"]
    body = schemas[error["$ref"].rsplit("/", 1)[-1]]
    assert set(body["required"]) == {"status", "code", "message"}
    assert set(body["properties"]) == {"status", "code", "message", "fields"}


def test_the_bearer_scheme_is_described(schema_document: dict[str, Any]) -> None:
    scheme = schema_document["components"]["securitySchemes"]["ferroxStatsToken"]
    assert scheme["type"] == "http" and scheme["scheme"] == "bearer"


def test_the_export_documents_both_formats(schema_document: dict[str, Any]) -> None:
    operation = schema_document["paths"][f"{PREFIX}/v1/history/export"]["get"]
    assert set(operation["responses"]["200"]["content"]) == {"text/csv", "application/jsonl"}
    (fmt,) = [p for p in operation["parameters"] if p["name"] == "format"]
    assert fmt["required"] is True and fmt["schema"]["enum"] == ["csv", "jsonl"]


# -- fuzzing it ------------------------------------------------------------------------


class InProcessWSGI:
    """Django's WSGI handler, run in this thread on the test's database connection.

    A real server's handler closes the connection at each request's start and end
    (``close_old_connections``); inside the test's transaction that would drop the
    connection on PostgreSQL. Django's own test client unhooks the same receiver
    around each request (and hooks it back after), so it is unhooked here at every
    call, not once: a test-client request in between would have hooked it again.
    """

    def __init__(self) -> None:
        self.handler = WSGIHandler()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        request_started.disconnect(close_old_connections)
        request_finished.disconnect(close_old_connections)
        return self.handler(environ, start_response)


@pytest.fixture
def wsgi_app() -> Iterator[InProcessWSGI]:
    try:
        yield InProcessWSGI()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def unthrottled(settings: Any) -> None:
    # Thousands of requests a minute are the point here; throttling has its own tests.
    settings.FERROX_STATS = {
        **settings.FERROX_STATS,
        "THROTTLE_RATES": {"ferrox_stats_history": None, "ferrox_stats_ingest": None},
        "AUTH_FAILURE_RATE": None,
    }


KNOWN_IDS = ("fuzz-known-ok", "fuzz-known-error")


@pytest.fixture
def populated(recorder: live.Recorder, clock: FakeClock) -> None:
    """Non-empty pages: archived rows of every outcome, and the ring holding some too."""
    records = [
        make_record(request_id=KNOWN_IDS[0]),
        make_record(
            request_id=KNOWN_IDS[1],
            status=500,
            error="EngineOverloaded",
            completion_tokens=0,
            decode_ms=None,
        ),
        make_record(model="qwen2.5-14b", route="/v1/completions", stream=False),
        make_record(aborted="client_disconnect", finish_reason=None, status=None),
        make_record(ttft_ms=None, duration_ms=None, queue_ms=None, decode_ms=None),
    ]
    # The same request served by a second replica: history-detail answers with both.
    twins = [make_record(request_id=r.request_id, replica="gpu-2") for r in records[:2]]
    archive(records + twins)
    for n in range(12):
        with recorder.track(route="/v1/chat/completions", model="llama", stream=True) as t:
            clock.advance(0.05)
            t.tokens(completion=1, prompt=100)
            clock.advance(0.2)
            t.tokens(completion=20)
            t.finish(status=200, finish_reason="stop", request_id=f"ring-{n}")
    recorder.observe_gauges(pool_used=3.0, pool_total=8.0, queue_depth=1.0)


@pytest.fixture
def fuzz_schema(
    wsgi_app: InProcessWSGI, fuzz_secret: str, populated: None, unthrottled: None
) -> Any:
    response = TokenClient(fuzz_secret).get(SCHEMA_URL)
    assert response.status_code == 200
    schema = schemathesis.openapi.from_dict(json.loads(response.content))
    schema.app = wsgi_app  # every case is sent in-process, as from_wsgi() would
    return schema


OPERATION_IDS = sorted(EXAMPLES)
PAGED = {
    "ferrox_stats_requests",
    "ferrox_stats_admin_stats",
    "ferrox_stats_history_list",
    "ferrox_stats_history_detail",
}


def test_every_operation_is_fuzzed(fuzz_schema: Any) -> None:
    ids = sorted(
        fuzz_schema.get_operation_id(result.ok()) for result in fuzz_schema.get_all_operations()
    )
    assert ids == OPERATION_IDS, "add new operations to EXAMPLES in tests/api/test_schema.py"


@pytest.mark.parametrize("auth", AUTH_MODES)
@pytest.mark.parametrize("operation_id", OPERATION_IDS)
def test_fuzzed_requests_get_documented_answers_and_never_a_5xx(
    fuzz_schema: Any, fuzz_secret: str, operation_id: str, auth: str
) -> None:
    operation = fuzz_schema.find_operation_by_id(operation_id)
    strategies = [
        operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
        operation.as_strategy(generation_mode=GenerationMode.NEGATIVE),
    ]
    if operation_id == "ferrox_stats_history_detail":
        # Made-up ids are never archived: reach the 200 answer too.
        strategies += [operation.as_strategy(path_parameters={"request_id": i}) for i in KNOWN_IDS]
    strategy = st.one_of(*strategies)
    statuses: set[int] = set()

    @given(case=strategy)
    @settings(
        max_examples=EXAMPLES[operation_id] if auth == "token" else UNAUTHENTICATED_EXAMPLES,
        deadline=None,
        derandomize=True,  # the same cases on every run: CI failures reproduce
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        headers: dict[str, str] = {}
        # A made-up Host header is the server's to refuse: the host project's Django
        # answers it with its own 400 page (DisallowedHost) before any view of the app.
        # Negative cases may carry one (seen once in CI, under pytest-randomly's seed).
        dropped = {"host"}
        if auth == "token":
            headers["Authorization"] = f"Bearer {fuzz_secret}"
        elif auth == "anonymous":
            # The schema declares the bearer scheme, so cases carry made-up credentials.
            dropped.add("authorization")
        if case.headers:
            case.headers = {k: v for k, v in case.headers.items() if k.lower() not in dropped}
        response = case.call(headers=headers)
        statuses.add(response.status_code)
        case.validate_response(response, checks=CHECKS, headers=headers)
        if response.status_code == 200 and operation_id in PAGED:
            pages.append(len(response.json().get("entries") or []))

    pages: list[int] = []
    check()
    if auth == "token":
        # The token opened the door for at least some cases.
        assert statuses - {401, 403}, statuses
        if operation_id in PAGED:
            # Some answers held rows: the handler read the test's own database (and,
            # on PostgreSQL, inside its transaction), and the pages were validated full.
            assert any(pages), pages
    else:
        assert statuses <= {401, 403}, statuses


# -- inputs the generator does not reach -------------------------------------------------
# The schema types these parameters as integers or plain strings, so generated cases
# stay clear of them. Each of the first group was a 500 (found by reading the parsers,
# fixed in 5938413): '²' passes str.isdigit() but not int(); a cursor beyond the
# datetime range raised OverflowError; a NUL in a path id reached psycopg, and a lone
# surrogate or a NUL in ingest's batch instance reached the database driver. The answer
# must be a client error in the one error shape, or the item refused.

READ_EDGES = [
    pytest.param("/v1/requests?since=%C2%B2", 400, id="since-superscript"),
    pytest.param("/v1/requests?limit=%C2%B2", 400, id="limit-superscript"),
    pytest.param("/admin/stats?since=%C2%B2", 400, id="admin-since-superscript"),
    pytest.param("/v1/history?limit=%C2%B2", 400, id="history-limit-superscript"),
    pytest.param("/v1/history?cursor=99999999999999999999.1", 400, id="cursor-far-future"),
    pytest.param("/v1/history?cursor=-99999999999999999.1", 400, id="cursor-far-past"),
    pytest.param("/v1/history?cursor=1.99999999999999999999", 400, id="cursor-id-huge"),
    pytest.param(
        "/v1/history?order=committed&cursor=c99999999999999999999.1", 400, id="commit-cursor-huge"
    ),
    pytest.param("/v1/history?order=committed&cursor=1.1", 400, id="commit-cursor-shape"),
    pytest.param("/v1/history/a%00b", 404, id="detail-nul"),
    pytest.param("/v1/history/%ED%A0%80", 404, id="detail-surrogate-bytes"),
    pytest.param("/v1/requests?since=99999999999999999999", 400, id="since-huge"),
    pytest.param("/v1/requests?instance=%00", 200, id="instance-nul"),
    pytest.param("/v1/history?cursor=%C2%B2.1", 400, id="cursor-superscript"),
    pytest.param("/v1/history?cursor=%00", 400, id="cursor-nul"),
    pytest.param("/v1/history?model=a%00b", 400, id="filter-nul"),
    pytest.param("/v1/history?since=1e30", 400, id="since-filter-huge"),
    pytest.param("/v1/history?status=NaN", 400, id="status-nan"),
    pytest.param("/v1/history/export?format=csv&until=-1e400", 400, id="export-until-huge"),
]


@pytest.mark.parametrize(("path", "status"), READ_EDGES)
def test_edge_query_values_are_client_errors(
    populated: None, fuzz_secret: str, path: str, status: int
) -> None:
    response = TokenClient(fuzz_secret, raise_request_exception=False).get(PREFIX + path)
    assert response.status_code == status
    if status >= 400:
        error = response.json()["error"]
        assert error["status"] == status and error["code"] and error["message"]


def _record(clock: FakeClock, **fields: Any) -> dict[str, Any]:
    return {"request_id": "edge-1", "at_ms": clock.wall - 1000, **fields}


INGEST_EDGES = [
    # (body, the item's answer or None when the batch itself is refused with a 400)
    pytest.param(lambda c: {"records": [_record(c, error="\ud800")]}, "rejected", id="surrogate"),
    pytest.param(
        lambda c: {"records": [_record(c)], "instance": "proc-\ud800"},
        None,
        id="surrogate-in-instance",
    ),
    pytest.param(
        lambda c: {"records": [_record(c)], "instance": "a\x00b"}, None, id="nul-in-instance"
    ),
    pytest.param(lambda c: {"records": [_record(c, model="a\x00b")]}, "rejected", id="nul"),
    pytest.param(lambda c: {"records": [_record(c, ttft_ms=float("nan"))]}, "rejected", id="nan"),
    pytest.param(
        lambda c: {"records": [_record(c, duration_ms=float("inf"))]}, "rejected", id="infinity"
    ),
    pytest.param(lambda c: {"records": [_record(c, seq=2**64)]}, "rejected", id="seq-huge"),
    pytest.param(lambda c: {"records": [_record(c, at_ms=10**30)]}, "rejected", id="at-ms-huge"),
    pytest.param(
        lambda c: {"records": [], "gauges": {"pool_used": 1e308, "pool_total": 1e308}},
        "",
        id="gauges-huge",
    ),
]


@pytest.mark.parametrize(("body", "answer"), INGEST_EDGES)
def test_edge_ingest_bodies_are_answered_not_5xx(
    recorder: live.Recorder, clock: FakeClock, fuzz_secret: str, body: Any, answer: str | None
) -> None:
    client = TokenClient(fuzz_secret, raise_request_exception=False)
    # json.dumps writes NaN/Infinity and \ud800 escapes, as a careless producer would.
    response = client.post(
        f"{PREFIX}/v1/ingest", data=json.dumps(body(clock)), content_type="application/json"
    )
    if answer is None:
        assert response.status_code == 400
        assert response.json()["error"]["status"] == 400
    else:
        assert response.status_code == 200
        # Each odd item refused by itself, with a reason; nothing unusable stored.
        results = response.json()["results"]
        assert [r["status"] for r in results] == ([answer] if answer else [])
        assert all(r["reason"] for r in results)


def test_the_deploy_check_can_describe_the_whole_project() -> None:
    # check --deploy describes every DRF view with the project's own settings, where
    # DEFAULT_SCHEMA_CLASS is DRF's (as here): the schema views once made it fail.
    assert schema_check(None) == []
