"""Serving the project under ASGI (``ferrox_stats.asgi``); here for the pass-through's fixtures."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from django.http import HttpRequest

from ferrox_stats import live
from ferrox_stats.asgi import wrap
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
