"""Closed by default (SPEC §1 rule 8): every URL the app defines, walked, refuses strangers.

The walk reads ``ferrox_stats.urls`` itself, so a route added there is exercised here
without anyone remembering to: it fails ``test_every_route_is_classified`` (and every
test parametrized over it) until it is entered in ``ACCESS`` below with the scope it
needs and the ``PUBLIC_ENDPOINTS`` name that may open it.

Three kinds of route, three ways of refusing:

- ``read`` (API): a session whose user holds the route's permission, or a read token;
  others get 401 (no or a bad credential) or 403 (a credential without the scope or
  permission), as a JSON error document.
- ``ingest`` (API): an ingest token only; never a session, never anonymous.
- ``page`` (the dashboard's HTML): a session with the route's permission only. Pages
  send anonymous visitors to the admin login, as Django admin pages do, and answer 403
  to a user without the permission; they read no bearer token, so a token, right or
  wrong, is refused like an anonymous visitor. No setting opens them.

``is_staff`` alone opens nothing: the permissions are ``access.DASHBOARD`` (the live
views) and ``access.ARCHIVE`` (the archive), granted to a group.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.urls import URLPattern, URLResolver, converters, reverse
from django.utils import timezone
from django.utils.crypto import get_random_string

import ferrox_stats.urls
from ferrox_stats import access as perms
from ferrox_stats import tokens
from tests.api.conftest import PREFIX, TokenClient
from tests.conftest import grant

pytestmark = pytest.mark.django_db

READ = "read"
INGEST = "ingest"
PAGE = "page"
API = (READ, INGEST)


LIVE = (perms.DASHBOARD,)
ARCHIVE = (perms.ARCHIVE,)
EITHER = (perms.DASHBOARD, perms.ARCHIVE)


@dataclass(frozen=True)
class Access:
    scope: str  # READ, INGEST or PAGE (see the module's docstring)
    endpoint: str | None = None  # the name FERROX_STATS["PUBLIC_ENDPOINTS"] opens it by
    permissions: tuple[str, ...] = ()  # a session needs any one of these


# Every route of ferrox_stats.urls, by namespaced name. A new route must be added
# here: the reviewer then sees, in one diff, who the author meant to let in.
ACCESS: dict[str, Access] = {
    "ferrox_stats:requests": Access(READ, "requests", LIVE),
    "ferrox_stats:stats": Access(READ, "stats", LIVE),
    "ferrox_stats:fleet": Access(READ, "fleet", LIVE),
    "ferrox_stats:admin-stats": Access(READ, "admin_stats", LIVE),
    "ferrox_stats:history": Access(READ, "history", ARCHIVE),
    "ferrox_stats:history-export": Access(READ, "history_export", ARCHIVE),
    "ferrox_stats:history-detail": Access(READ, "history_detail", ARCHIVE),
    "ferrox_stats:ingest": Access(INGEST, "ingest"),
    "ferrox_stats:metrics": Access(READ, "metrics", LIVE),
    "ferrox_stats:usage": Access(READ, "usage", ARCHIVE),
    "ferrox_stats:usage-top": Access(READ, "usage_top", ARCHIVE),
    "ferrox_stats:schema": Access(READ, "schema", EITHER),
    "ferrox_stats:docs": Access(READ, "docs", EITHER),
    "ferrox_stats:web:dashboard": Access(PAGE, None, LIVE),
    "ferrox_stats:web:process": Access(PAGE, None, LIVE),
    "ferrox_stats:web:history": Access(PAGE, None, ARCHIVE),
    "ferrox_stats:web:usage": Access(PAGE, None, ARCHIVE),
    "ferrox_stats:web:request-detail": Access(PAGE, None, ARCHIVE),
}

# Values for path converters, so every pattern becomes a URL a client can request.
SAMPLES: dict[type[Any], str] = {
    converters.StringConverter: "chatcmpl-sample-0001",
    converters.SlugConverter: "sample-slug",
    converters.IntConverter: "1",
    converters.UUIDConverter: str(uuid.UUID(int=1)),
    converters.PathConverter: "sample/path",
}
PARAMETER = re.compile(r"<(?:(?P<converter>[^>:]+):)?(?P<name>[^>]+)>")
# Methods every route is tried with, besides the ones its view serves.
ALWAYS_TRIED = ("GET", "POST")


@dataclass(frozen=True)
class Route:
    name: str
    path: str  # concrete, under the test project's mount
    kwargs: dict[str, str]
    methods: tuple[str, ...]  # what the tests try: GET, POST and what the view serves
    served: tuple[str, ...]  # what the view serves

    def __str__(self) -> str:
        return self.name


def _served_methods(callback: Any) -> set[str]:
    view = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    if view is None:
        # A function view: nothing tells us what it serves, so try everything.
        return {"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"}
    served = {m.upper() for m in view.http_method_names if hasattr(view, m)}
    if "GET" in served:
        served.add("HEAD")  # Django's View.setup() answers HEAD with get()
    return served


def _walk(
    patterns: list[URLPattern | URLResolver], route: str, namespace: str
) -> Iterator[tuple[str, str, URLPattern, Any]]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            inner = f"{namespace}:{entry.namespace}" if entry.namespace else namespace
            yield from _walk(entry.url_patterns, route + str(entry.pattern), inner)
        else:
            assert entry.name, (
                f"the route {route + str(entry.pattern)!r} has no name: name it and add it "
                "to ACCESS in tests/api/test_access.py"
            )
            yield f"{namespace}:{entry.name}", route + str(entry.pattern), entry, entry.callback


def _concrete(route: str, converters_by_name: dict[str, Any]) -> tuple[str, dict[str, str]]:
    kwargs: dict[str, str] = {}

    def fill(match: re.Match[str]) -> str:
        converter = converters_by_name[match["name"]]
        sample = SAMPLES.get(type(converter))
        assert sample is not None, (
            f"no sample value for converter {type(converter).__name__} in {route!r}: "
            "add one to SAMPLES in tests/api/test_access.py"
        )
        kwargs[match["name"]] = sample
        return sample

    return PARAMETER.sub(fill, route), kwargs


def app_routes() -> list[Route]:
    """Every URL pattern ``ferrox_stats.urls`` defines, as a concrete path under the mount."""
    routes = []
    namespace = ferrox_stats.urls.app_name
    for name, route, pattern, callback in _walk(ferrox_stats.urls.urlpatterns, "", namespace):
        found: dict[str, Any] = {}
        # Converters of every enclosing pattern are on the leaf's resolver chain too,
        # but the app nests only plain includes; a nested converter would show up
        # here as a KeyError naming it.
        found.update(getattr(pattern.pattern, "converters", {}))
        path, kwargs = _concrete(route, found)
        served = _served_methods(callback)
        methods = tuple(sorted(set(ALWAYS_TRIED) | served))
        routes.append(Route(name, f"{PREFIX}/{path}", kwargs, methods, tuple(sorted(served))))
    return routes


ROUTES = app_routes()


def _main_method(route: Route) -> str:
    """The method that does the route's work: what its scope is really about."""
    return "POST" if "POST" in route.methods and "GET" not in route.methods else "GET"


def access(route: Route) -> Access:
    assert route.name in ACCESS, (
        f"{route.name} ({route.path}) is not classified: add it to ACCESS in "
        "tests/api/test_access.py with the scope it needs and its PUBLIC_ENDPOINTS name"
    )
    return ACCESS[route.name]


def cases(*scopes: str) -> list[Any]:
    """(route, method) pairs, one test id each; ``scopes`` keeps those scopes' routes.

    An unclassified route is in every selection, so that every test fails on it.
    """
    return [
        pytest.param(route, method, id=f"{route.name.removeprefix('ferrox_stats:')}-{method}")
        for route in ROUTES
        if not scopes or route.name not in ACCESS or ACCESS[route.name].scope in scopes
        for method in route.methods
    ]


def call(client: Client, route: Route, method: str, **extra: Any) -> Any:
    body = json.dumps({"records": []}) if method in ("POST", "PUT", "PATCH") else None
    if body is None:
        return client.generic(method, route.path, **extra)
    return client.generic(method, route.path, body, content_type="application/json", **extra)


def error_of(response: Any) -> dict[str, Any]:
    """The error object of a JSON error body; asserts the one shape every error has."""
    assert response["Content-Type"].split(";")[0].endswith("json"), response["Content-Type"]
    body = json.loads(response.content)
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert {"status", "code", "message"} <= set(error), error
    assert error["status"] == response.status_code
    assert isinstance(error["code"], str) and error["code"]
    assert isinstance(error["message"], str) and error["message"]
    return error


def opened(response: Any) -> bool:
    """Past the door: neither refused nor broken (a 400 or 404 is the view answering).

    history-detail's sample id is not archived (404); the export wants ``format`` (400).
    """
    refused_by_login = response.status_code == 302 and response["Location"].startswith(
        reverse("admin:login")
    )
    return (
        response.status_code not in (401, 403)
        and not refused_by_login
        and response.status_code < 500
    )


def routes_of(*scopes: str) -> list[Route]:
    return [
        route for route in ROUTES if route.name not in ACCESS or ACCESS[route.name].scope in scopes
    ]


def refused(route: Route, response: Any, *api_statuses: int) -> bool:
    """Did ``route`` refuse? API routes by one of ``api_statuses``; pages by the login."""
    if access(route).scope != PAGE:
        return bool(response.status_code in api_statuses)
    if response.status_code in (401, 403):
        return True
    login = reverse("admin:login")
    return bool(response.status_code == 302 and response["Location"].startswith(login))


@pytest.fixture(autouse=True)
def _cheap_password_hashing(settings: Any) -> None:
    """Hundreds of tests log users in: spare each one a full-strength PBKDF2 hash."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def anonymous() -> Client:
    return Client()


# -- the walk itself ----------------------------------------------------------------


def test_every_route_is_classified() -> None:
    names = [route.name for route in ROUTES]
    missing = sorted(set(names) - set(ACCESS))
    assert not missing, (
        f"unclassified routes {missing}: add each to ACCESS in tests/api/test_access.py "
        "with the scope it needs (read, ingest or page) and its PUBLIC_ENDPOINTS name"
    )
    stale = sorted(set(ACCESS) - set(names))
    assert not stale, f"ACCESS names routes the app no longer has: {stale}"
    assert len(names) == len(set(names)), "two routes share a name"


@pytest.mark.parametrize("route", ROUTES, ids=str)
def test_the_walk_builds_the_urls_reverse_builds(route: Route) -> None:
    # The walk and Django agree on where each route lives under the mount, so the
    # tests below request the app's URLs and not 404s that would pass as "closed".
    assert reverse(route.name, kwargs=route.kwargs or None) == route.path


# -- strangers ----------------------------------------------------------------------


@pytest.mark.parametrize(("route", "method"), cases())
def test_anonymous_is_refused(anonymous: Client, route: Route, method: str) -> None:
    response = call(anonymous, route, method)
    assert refused(route, response, 401, 403), (route.path, method, response.status_code)


WRONG_AUTHORIZATIONS = {
    "unknown-fxs-token": "Bearer fxs_wrong" + "x" * 39,
    "openai-key": "Bearer sk-proj-" + "A1b2C3d4" * 6,
    "bearer-without-token": "Bearer",
    "bearer-with-two-parts": "Bearer fxs_a fxs_b",
    "not-utf8": "Bearer fxs_\xe9\xe9\xe9",
}


def _wrong_token_cases() -> list[Any]:
    # The plain wrong token on every method; the odd shapes on each route's own method.
    return [
        pytest.param(*case.values, authorization, id=f"{case.id}-{kind}")
        for case in cases()
        for kind, authorization in WRONG_AUTHORIZATIONS.items()
        if kind == "unknown-fxs-token" or case.values[1] == _main_method(case.values[0])
    ]


@pytest.mark.parametrize(("route", "method", "authorization"), _wrong_token_cases())
def test_a_wrong_token_is_401_and_never_echoed(
    route: Route, method: str, authorization: str
) -> None:
    response = call(Client(), route, method, HTTP_AUTHORIZATION=authorization)
    assert refused(route, response, 401), (route.path, method, response.status_code)
    # Whatever was sent may be someone's real key: no answer repeats it.
    secret = authorization.split(" ", 1)[-1]
    if len(secret) > 8:
        assert secret.encode("latin-1") not in response.content


@pytest.mark.parametrize(("route", "method"), cases())
def test_a_revoked_token_is_401(route: Route, method: str) -> None:
    token, secret = tokens.issue("revoked", read=True, ingest=True, replica="gpu-9")
    tokens.revoke(token)
    response = call(TokenClient(secret), route, method)
    assert refused(route, response, 401), (route.path, method, response.status_code)


@pytest.mark.parametrize(("route", "method"), cases(READ, PAGE))
def test_an_ingest_only_token_is_403_on_read_routes(
    ingest_client: TokenClient, route: Route, method: str
) -> None:
    response = call(ingest_client, route, method)
    assert refused(route, response, 403), (route.path, method, response.status_code)


@pytest.mark.parametrize(("route", "method"), cases(PAGE))
def test_pages_refuse_even_a_read_token(
    read_client: TokenClient, route: Route, method: str
) -> None:
    # The dashboard is for people's sessions; tokens are for programs, which use the API.
    response = call(read_client, route, method)
    assert refused(route, response), (route.path, method, response.status_code)


@pytest.mark.parametrize(("route", "method"), cases(INGEST))
def test_a_read_token_is_403_on_the_ingest_route(
    read_client: TokenClient, route: Route, method: str
) -> None:
    response = call(read_client, route, method)
    assert response.status_code == 403, (route.path, method, response.status_code)


@pytest.mark.parametrize(("route", "method"), cases(READ, PAGE))
def test_a_logged_in_user_who_is_not_staff_is_403_on_read_routes(
    django_user_model: Any, route: Route, method: str
) -> None:
    client = Client()
    client.force_login(django_user_model.objects.create_user("visitor"))
    response = call(client, route, method)
    assert refused(route, response, 403), (route.path, method, response.status_code)


@pytest.mark.parametrize("route", routes_of(READ, PAGE), ids=str)
def test_a_staff_user_without_the_permission_is_403(django_user_model: Any, route: Route) -> None:
    # is_staff used to be the whole test; now the host's permissions decide.
    client = Client()
    client.force_login(django_user_model.objects.create_user("staffer", is_staff=True))
    response = call(client, route, "GET", HTTP_ACCEPT="application/json")
    assert response.status_code == 403, (route.path, response.status_code)


@pytest.mark.parametrize("permission", [perms.DASHBOARD, perms.ARCHIVE])
def test_a_permission_granted_through_a_group_opens_exactly_its_routes(
    django_user_model: Any, permission: str
) -> None:
    client = Client()
    client.force_login(grant(django_user_model.objects.create_user("member"), permission))
    for route in routes_of(READ, PAGE):
        response = call(client, route, "GET", HTTP_ACCEPT="application/json")
        if permission in access(route).permissions:
            assert opened(response) and response.status_code != 302, route.path
        else:
            assert response.status_code == 403, (route.path, response.status_code)


@pytest.mark.parametrize("route", routes_of(READ, PAGE), ids=str)
def test_a_superuser_may_read_everything(django_user_model: Any, route: Route) -> None:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", "r@example.com"))
    response = call(client, route, "GET")
    assert opened(response) and response.status_code != 302, (route.path, response.status_code)


def test_every_session_route_names_a_permission() -> None:
    for route in routes_of(READ, PAGE):
        assert access(route).permissions, route.name


@pytest.mark.parametrize(("route", "method"), cases())
def test_an_inactive_staff_user_is_refused(
    django_user_model: Any, route: Route, method: str
) -> None:
    user = django_user_model.objects.create_user("former", is_staff=True)
    client = Client()
    client.force_login(user)
    user.is_active = False
    user.save()
    response = call(client, route, method)
    assert refused(route, response, 401, 403), (route.path, method, response.status_code)


# -- sessions and CSRF ----------------------------------------------------------------


def _csrf(client: Client) -> dict[str, str]:
    """Make ``client`` carry a CSRF cookie; return the header that matches it."""
    secret = get_random_string(32)
    client.cookies["csrftoken"] = secret
    return {"HTTP_X_CSRFTOKEN": secret}


@pytest.mark.parametrize(("route", "method"), [c for c in cases(INGEST) if c.values[1] == "POST"])
def test_a_staff_session_post_to_ingest_without_csrf_is_403_for_csrf(
    staff_client: Client, route: Route, method: str
) -> None:
    response = call(staff_client, route, method)
    assert response.status_code == 403
    # Refused by the CSRF check, before scope is even considered.
    assert "csrf" in error_of(response)["message"].lower()


@pytest.mark.parametrize(("route", "method"), cases(INGEST))
def test_a_staff_session_cannot_ingest_even_with_csrf(
    staff_client: Client, route: Route, method: str
) -> None:
    # Ingest is for replicas holding an ingest token; no session reaches it.
    response = call(staff_client, route, method, **_csrf(staff_client))
    assert response.status_code == 403
    assert "csrf" not in error_of(response)["message"].lower()


@pytest.mark.parametrize(
    ("route", "method"),
    [c for c in cases(READ, PAGE) if c.values[1] in ("POST", "PUT", "PATCH", "DELETE")],
)
def test_unsafe_methods_from_a_staff_session_need_csrf(
    staff_client: Client, route: Route, method: str
) -> None:
    response = call(staff_client, route, method, HTTP_ACCEPT="application/json")
    assert response.status_code == 403
    # Refused by the CSRF check (an API error document, or Django's CSRF page for the
    # dashboard's pages), before the method or the scope is considered.
    assert b"csrf" in response.content.lower()


# -- the doors that should open -------------------------------------------------------
# Without these, every "refused" above could pass against a broken URL or view.


@pytest.mark.parametrize("route", routes_of(READ), ids=str)
def test_read_routes_open_to_a_read_token_and_a_permitted_session(
    read_client: TokenClient, staff_client: Client, route: Route
) -> None:
    for client in (read_client, staff_client):
        response = call(client, route, "GET")
        assert opened(response), (route.path, response.status_code)


@pytest.mark.parametrize("route", routes_of(PAGE), ids=str)
def test_pages_open_to_a_permitted_session(staff_client: Client, route: Route) -> None:
    response = call(staff_client, route, "GET")
    assert opened(response) and response.status_code != 302, (route.path, response.status_code)


@pytest.mark.parametrize("route", routes_of(INGEST), ids=str)
def test_the_ingest_route_opens_to_an_ingest_token(
    ingest_client: TokenClient, route: Route
) -> None:
    response = call(ingest_client, route, "POST")
    assert response.status_code == 200, response.content
    assert response.json()["accepted"] == 0


# -- PUBLIC_ENDPOINTS -------------------------------------------------------------------


def test_opening_stats_opens_only_get_v1_stats(settings: Any, anonymous: Client) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "PUBLIC_ENDPOINTS": ["stats"]}
    doors = []
    for route in ROUTES:
        for method in route.methods:
            response = call(anonymous, route, method)
            if opened(response):
                doors.append((route.path, method, response.status_code))
    # POST on /v1/stats gets past the door only to be told the method is not served.
    assert sorted((path, method) for path, method, status in doors if status != 405) == [
        (f"{PREFIX}/v1/stats", "GET"),
        (f"{PREFIX}/v1/stats", "HEAD"),
        (f"{PREFIX}/v1/stats", "OPTIONS"),
    ]
    assert all(path == f"{PREFIX}/v1/stats" for path, _, _ in doors)
    assert anonymous.get(f"{PREFIX}/v1/stats").status_code == 200


@pytest.mark.parametrize("route", routes_of(READ, INGEST), ids=str)
def test_each_public_endpoint_name_opens_its_own_route_and_no_other(
    settings: Any, anonymous: Client, route: Route
) -> None:
    entry = access(route)
    settings.FERROX_STATS = {**settings.FERROX_STATS, "PUBLIC_ENDPOINTS": [entry.endpoint]}
    for other in ROUTES:
        response = call(anonymous, other, _main_method(other))
        is_open = opened(response)
        # Ingest stays closed whatever the setting names: anonymous writes are never allowed.
        expected = other is route and entry.scope == READ
        assert is_open == expected, (entry.endpoint, other.path, response.status_code)


def test_opening_every_endpoint_still_refuses_anonymous_ingest(
    settings: Any, anonymous: Client
) -> None:
    names = [entry.endpoint for entry in ACCESS.values() if entry.endpoint]
    settings.FERROX_STATS = {**settings.FERROX_STATS, "PUBLIC_ENDPOINTS": names}
    for route in ROUTES:
        response = call(anonymous, route, _main_method(route))
        if access(route).scope == READ:
            assert opened(response), (route.path, response.status_code)
        else:
            # Ingest and the staff pages stay closed whatever the setting names.
            assert refused(route, response, 401), (route.path, response.status_code)


@pytest.mark.parametrize("route", routes_of(READ, INGEST), ids=str)
def test_a_wrong_token_is_refused_even_on_a_public_endpoint(settings: Any, route: Route) -> None:
    # A bad credential is an error to report, not a reason to fall back to anonymous.
    settings.FERROX_STATS = {**settings.FERROX_STATS, "PUBLIC_ENDPOINTS": [access(route).endpoint]}
    response = call(
        Client(),
        route,
        _main_method(route),
        HTTP_AUTHORIZATION=WRONG_AUTHORIZATIONS["unknown-fxs-token"],
    )
    assert response.status_code == 401


# -- the error document -----------------------------------------------------------------

# A client that asks for JSON gets the one error document from every API route, the
# Swagger page included (it used to answer such a client 406 Not Acceptable, hiding
# the 401 and its WWW-Authenticate).


@pytest.mark.parametrize("route", routes_of(READ, INGEST), ids=str)
def test_401_errors_have_the_one_error_shape(anonymous: Client, route: Route) -> None:
    method = _main_method(route)
    response = call(anonymous, route, method, HTTP_ACCEPT="application/json")
    assert response.status_code == 401
    assert error_of(response)["code"] == "not_authenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")
    wrong = call(
        anonymous,
        route,
        method,
        HTTP_ACCEPT="application/json",
        HTTP_AUTHORIZATION=WRONG_AUTHORIZATIONS["unknown-fxs-token"],
    )
    assert wrong.status_code == 401
    assert error_of(wrong)["code"] == "authentication_failed"


@pytest.mark.parametrize("route", routes_of(READ, INGEST), ids=str)
def test_403_errors_have_the_one_error_shape(
    read_client: TokenClient, ingest_client: TokenClient, route: Route
) -> None:
    # The token that lacks this route's scope.
    client = ingest_client if access(route).scope == READ else read_client
    response = call(client, route, _main_method(route), HTTP_ACCEPT="application/json")
    assert response.status_code == 403
    assert error_of(response)["code"] == "permission_denied"


def test_the_schema_route_answers_errors_in_the_format_asked(anonymous: Client) -> None:
    # The schema's default rendering is YAML; asked for JSON, its errors are JSON too.
    response = anonymous.get(f"{PREFIX}/v1/schema?format=json")
    assert response.status_code == 401
    assert json.loads(response.content)["error"]["status"] == 401


# -- throttling is per caller --------------------------------------------------------


@pytest.fixture
def tight_history_throttle(settings: Any) -> Iterator[None]:
    settings.FERROX_STATS = {
        **settings.FERROX_STATS,
        "THROTTLE_RATES": {"ferrox_stats_history": "2/minute"},
    }
    # Throttle counts live in the cache, which outlives a test; start and end empty.
    cache.clear()
    yield
    cache.clear()


def test_one_tokens_throttle_does_not_throttle_another(
    tight_history_throttle: None, staff_client: Client
) -> None:
    # DRF keys a throttle on request.user.pk, and a token's user has none: every token
    # once shared one bucket, so one poller could starve every other poller and replica.
    _, first = tokens.issue("poller-a")
    _, second = tokens.issue("poller-b")
    url = f"{PREFIX}/v1/history"
    assert [TokenClient(first).get(url).status_code for _ in range(3)] == [200, 200, 429]
    assert TokenClient(second).get(url).status_code == 200
    assert staff_client.get(url).status_code == 200


# -- token lifetime ---------------------------------------------------------------------


def test_an_expired_token_is_401(settings: Any) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "TOKEN_CACHE_S": 0}
    token, secret = tokens.issue("poller")
    client = TokenClient(secret)
    assert client.get(f"{PREFIX}/v1/stats").status_code == 200
    token.expires_at = timezone.now()
    token.save(update_fields=["expires_at"])
    response = client.get(f"{PREFIX}/v1/stats", HTTP_ACCEPT="application/json")
    assert response.status_code == 401
    assert error_of(response)["code"] == "authentication_failed"


def test_the_token_of_an_inactive_user_is_401(settings: Any, django_user_model: Any) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, "TOKEN_CACHE_S": 0}
    owner = django_user_model.objects.create_user("alice")
    _, secret = tokens.issue("poller", owner=owner)
    client = TokenClient(secret)
    assert client.get(f"{PREFIX}/v1/stats").status_code == 200
    owner.is_active = False
    owner.save()
    assert client.get(f"{PREFIX}/v1/stats").status_code == 401
