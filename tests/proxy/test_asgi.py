"""Serving the project under ASGI (``ferrox_stats.asgi``); here for the pass-through's fixtures."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from django.conf.urls.i18n import i18n_patterns
from django.core.signals import request_finished, request_started
from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt

from ferrox_stats import live
from ferrox_stats.asgi import PassThroughHandler, PassThroughRoutes, _sends_inline, wrap
from ferrox_stats.proxy.clients import aclose_clients
from tests.asgi_server import serve
from tests.proxy.conftest import LoopCapture, Plane

# The paths a project middleware saw, in order.
SEEN: list[str] = []


def recording_middleware(
    get_response: Callable[[HttpRequest], Any],
) -> Callable[[HttpRequest], Any]:
    def middleware(request: HttpRequest) -> Any:
        SEEN.append(request.path)
        return get_response(request)

    return middleware


@pytest.fixture
def recording(settings: Any) -> list[str]:
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "tests.proxy.test_asgi.recording_middleware"]
    SEEN.clear()
    return SEEN


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("lean", [True, False])
def test_the_pass_through_skips_the_projects_middleware_unless_told(
    plane: Plane, recording: list[str], lean: bool
) -> None:
    app = LoopCapture(lean_pass_through=lean)  # built after the middleware was added
    headers = {"Authorization": f"Bearer {plane.secret}"}
    body = {"model": "sim-small", "messages": [{"role": "user", "content": "hi"}]}
    with serve(app) as url:
        assert httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers).is_success
        assert httpx.get(f"{url}/control/telemetry/v1/stats").status_code == 401
        if app.loop is not None:
            asyncio.run_coroutine_threadsafe(aclose_clients(), app.loop).result(5)
    passed = ["/v1/chat/completions"] if not lean else []
    assert recording == [*passed, "/control/telemetry/v1/stats"]
    # Both ways, the request is recorded.
    assert len(plane.records()) == 1


class Sink:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def submit(self, seq: int, record: Any) -> None:
        pass

    def close(self) -> None:
        self.log.append("archive drained")


def test_lifespan_shutdown_stops_the_project_then_drains_the_archive(
    recorder: live.Recorder,
) -> None:
    log: list[str] = []
    recorder.sink = Sink(log)

    async def stop_traffic() -> None:
        log.append("project stopped")

    async def server() -> list[str]:
        app = wrap(_unused, on_shutdown=stop_traffic)
        inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
        sent: list[str] = []

        async def receive() -> dict[str, str]:
            return inbox.pop(0)

        async def send(message: Any) -> None:
            sent.append(message["type"])

        await app({"type": "lifespan"}, receive, send)
        return sent

    assert asyncio.run(server()) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert log == ["project stopped", "archive drained"]


async def _unused(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("the lifespan scope is answered by wrap itself")


def test_other_scopes_reach_the_project() -> None:
    reached: list[str] = []

    async def project(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    with serve(wrap(project, lean_pass_through=False)) as url:
        assert httpx.get(f"{url}/v1/models").status_code == 204
    assert reached == ["/v1/models"]


# The project's own views and URLconfs, beside the pass-through or without it.


@csrf_exempt
def host_models(request: HttpRequest) -> JsonResponse:
    """The project's own ``/v1/models``: needs what its middleware sets (``request.user``)."""
    return JsonResponse({"host": True, "authenticated": request.user.is_authenticated})


PROXY = "ferrox_stats.proxy.urls"


class NotMounted:
    urlpatterns = [path("v1/models", host_models)]


class UnderPrefix:
    urlpatterns = [path("v1/models", host_models), path("llm/", include(PROXY))]


class TwoMounts:
    urlpatterns = [path("", include(PROXY)), path("llm/", include(PROXY))]


class Nested:
    urlpatterns = [path("api/", include([path("openai/", include(PROXY))]))]


class Localized:
    urlpatterns = i18n_patterns(path("llm/", include(PROXY)))


def lean_app(settings: Any, urlconf: type, **overrides: Any) -> LoopCapture:
    """The project's ASGI app as ``wrap`` serves it, built after ``urlconf`` and
    ``overrides`` are the settings (the handlers read MIDDLEWARE when built)."""
    settings.ROOT_URLCONF = urlconf
    for name, value in overrides.items():
        setattr(settings, name, value)
    return LoopCapture()


@pytest.mark.parametrize(
    ("path", "root_path", "force", "taken"),
    [
        ("/llm/v1/models", "", None, True),
        ("/v1/models", "", None, False),  # the project's own
        ("/llm/v1/model", "", None, False),
        ("/app/llm/v1/models", "/app", None, True),  # served below a root path
        ("/app/llm/v1/models", "", "/app", True),  # FORCE_SCRIPT_NAME
        ("/app/llm/v1/models", "", None, False),
        ("/apple/llm/v1/models", "/app", None, False),  # not below it
    ],
)
def test_the_routing_check_resolves_as_django_does(
    settings: Any, path: str, root_path: str, force: str | None, taken: bool
) -> None:
    settings.ROOT_URLCONF = UnderPrefix
    settings.FORCE_SCRIPT_NAME = force
    match = PassThroughRoutes().match({"type": "http", "path": path, "root_path": root_path})
    assert (match is not None) is taken
    if match is not None:
        assert match.view_name == "ferrox_stats_proxy:models"


# Every request through Django: the lean handler's sync work runs on asgiref's one shared
# thread, where an earlier test may have left a connection for request_started to check.
through_django = pytest.mark.django_db(transaction=True)


def is_pass_through(response: httpx.Response) -> bool:
    """Whether the pass-through answered (no key: its 401), not the project's view."""
    return response.status_code == 401 and response.json()["error"]["code"] == "missing_api_key"


@through_django
@pytest.mark.parametrize("urlconf", [NotMounted, UnderPrefix])
def test_the_projects_own_v1_models_gets_its_middleware(
    settings: Any, recording: list[str], urlconf: type
) -> None:
    with serve(lean_app(settings, urlconf)) as url:
        response = httpx.post(f"{url}/v1/models")
    assert response.status_code == 200
    assert response.json() == {"host": True, "authenticated": False}
    assert recording == ["/v1/models"]


@through_django
@pytest.mark.parametrize(
    ("urlconf", "taken", "left"),
    [
        (UnderPrefix, ["/llm/v1/models"], ["/v1/models"]),
        (TwoMounts, ["/v1/models", "/llm/v1/models"], []),
        (Nested, ["/api/openai/v1/models"], []),
        # LANGUAGE_CODE's prefix; German reaches the pass-through through the middleware.
        (Localized, ["/en-us/llm/v1/models"], ["/de/llm/v1/models"]),
    ],
)
def test_the_lean_path_takes_exactly_where_the_pass_through_is_mounted(
    settings: Any, recording: list[str], urlconf: type, taken: list[str], left: list[str]
) -> None:
    app = lean_app(
        settings,
        urlconf,
        LANGUAGE_CODE="en-us",
        LANGUAGES=[("en-us", "English"), ("de", "German")],
        MIDDLEWARE=["django.middleware.locale.LocaleMiddleware", *settings.MIDDLEWARE],
    )
    with serve(app) as url:
        for route in taken:
            assert is_pass_through(httpx.get(f"{url}{route}")), route
        left_answers = {route: httpx.get(f"{url}{route}") for route in left}
        # Not a route of the pass-through where it is mounted: never lean.
        assert httpx.get(f"{url}/llm/v1/nothing").status_code == 404
    assert recording == [*left, "/llm/v1/nothing"]
    if urlconf is Localized:
        assert is_pass_through(left_answers["/de/llm/v1/models"])


@through_django
def test_a_disallowed_host_is_a_400_on_the_lean_path(settings: Any, recording: list[str]) -> None:
    with serve(lean_app(settings, UnderPrefix)) as url:
        response = httpx.get(f"{url}/llm/v1/models", headers={"Host": "evil.example"})
        assert is_pass_through(httpx.get(f"{url}/llm/v1/models"))
    assert response.status_code == 400
    assert b"Bad Request" in response.content
    assert recording == []  # the lean path answered both


SECURITY = "django.middleware.security.SecurityMiddleware"


@through_django
def test_the_https_redirect_applies_on_the_lean_path(settings: Any, recording: list[str]) -> None:
    app = lean_app(
        settings,
        "tests.urls",
        MIDDLEWARE=[SECURITY, *settings.MIDDLEWARE],
        SECURE_SSL_REDIRECT=True,
    )
    with serve(app) as url:
        response = httpx.get(f"{url}/v1/models?x=1")
    assert response.status_code == 301
    assert response.headers["Location"] == f"https://{url.removeprefix('http://')}/v1/models?x=1"
    assert recording == []


@through_django
def test_no_security_headers_when_the_project_has_no_security_middleware(
    settings: Any, recording: list[str]
) -> None:
    with serve(lean_app(settings, UnderPrefix, SECURE_SSL_REDIRECT=True)) as url:
        response = httpx.get(f"{url}/llm/v1/models")
    assert is_pass_through(response)  # as Django would: nothing redirects without it
    assert "X-Content-Type-Options" not in response.headers


@through_django
@pytest.mark.parametrize("stream", [False, True])
def test_the_security_headers_are_on_pass_through_answers(
    plane: Plane, settings: Any, recording: list[str], stream: bool
) -> None:
    app = lean_app(
        settings,
        "tests.urls",
        MIDDLEWARE=[SECURITY, *settings.MIDDLEWARE],
        SECURE_HSTS_SECONDS=3600,
        SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"),
    )
    headers = {"Authorization": f"Bearer {plane.secret}", "X-Forwarded-Proto": "https"}
    body = {"model": "sim-small", "messages": [{"role": "user", "content": "hi"}]}
    with serve(app) as url:
        with httpx.stream(
            "POST", f"{url}/v1/chat/completions", json={**body, "stream": stream}, headers=headers
        ) as response:
            response.read()
        if app.loop is not None:
            asyncio.run_coroutine_threadsafe(aclose_clients(), app.loop).result(5)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith(
        "text/event-stream" if stream else "application/json"
    )
    assert response.headers["Strict-Transport-Security"] == "max-age=3600"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "same-origin"
    assert response.headers["Cross-Origin-Opener-Policy"] == "same-origin"
    assert recording == []  # served by the lean path


@through_django
def test_the_lean_path_sends_the_request_signals(settings: Any, recording: list[str]) -> None:
    """Django's own housekeeping receivers alone are called on the loop (no thread hop);
    a project's receivers are called as Django calls them, on both signals."""
    assert _sends_inline(request_started, PassThroughHandler)
    assert _sends_inline(request_finished, PassThroughHandler)
    seen: list[str] = []

    def started(sender: Any, **kwargs: Any) -> None:
        seen.append("started")

    def finished(sender: Any, **kwargs: Any) -> None:
        seen.append("finished")

    request_started.connect(started)
    request_finished.connect(finished)
    try:
        assert not _sends_inline(request_started, PassThroughHandler)
        with serve(lean_app(settings, UnderPrefix)) as url:
            assert is_pass_through(httpx.get(f"{url}/llm/v1/models"))
    finally:
        request_started.disconnect(started)
        request_finished.disconnect(finished)
    assert seen == ["started", "finished"]
    assert recording == []  # the lean path answered it
