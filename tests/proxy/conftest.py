"""The pass-through under test: a simulated engine and the control plane, each served
by a real uvicorn on 127.0.0.1, with this process's recorder on a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from django.core.asgi import get_asgi_application

from ferrox_stats import live, tokens
from ferrox_stats.asgi import wrap
from ferrox_stats.core.requests import Record, entry
from ferrox_stats.proxy.clients import aclose_clients
from loadgen.engine import SimulatedEngine
from tests.asgi_server import serve, wait_for
from tests.conftest import FakeClock

UPSTREAM_KEY = "sk-upstream-canary-0123456789"
# The engine's `created`: fixed, so answers sent directly and through compare equal.
CREATED = 1_767_225_600.0


def lockstep(clock: FakeClock, engine: SimulatedEngine) -> Callable[[float], Awaitable[None]]:
    """The engine's pause: move the fake clock, but only once the pass-through has seen
    every token the engine sent before it, so each token is stamped at the fake time it
    was sent. Time then moves only here: the recorded TTFT, decode and duration are
    exactly what the engine was told to take. For one request at a time, through the
    pass-through (compare with ``twin``, which does not wait)."""
    request_count = 0
    pauses = 0
    baseline = 0

    async def pause(seconds: float) -> None:
        nonlocal request_count, pauses, baseline
        if len(engine.requests) != request_count:  # a new request: its first pause
            request_count, pauses, baseline = len(engine.requests), 0, _completion_seen()
        # A stream's first pause is its TTFT, before any token; each later one follows
        # one more token.
        sent = baseline + pauses
        pauses += 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5.0
        while _completion_seen() < sent and loop.time() < deadline:
            await asyncio.sleep(0.001)
        clock.advance(seconds)

    return pause


def _completion_seen() -> int:
    recorder = live.get_recorder()
    return recorder.serving.snapshot(recorder.clock.monotonic()).completion_tokens_total


class LoopCapture:
    """The project's ASGI app as the README serves it (``ferrox_stats.asgi.wrap``),
    remembering the loop it is served on (to close its clients)."""

    def __init__(self, **options: Any) -> None:
        self.app = wrap(get_asgi_application(), **options)
        self.loop: asyncio.AbstractEventLoop | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.loop = asyncio.get_running_loop()
        await self.app(scope, receive, send)


@dataclass
class Plane:
    """The control plane as a client sees it, and what it recorded."""

    url: str
    engine: SimulatedEngine
    engine_url: str
    twin_url: str
    secret: str
    clock: FakeClock
    opened: list[openai.OpenAI] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"{self.url}/v1"

    def sdk(self, *, direct: bool = False) -> openai.OpenAI:
        """An openai client of the pass-through, or of the engine's twin (``direct``);
        closed when the test ends, so no keep-alive socket outlives it."""
        base, key = (f"{self.twin_url}/v1", UPSTREAM_KEY) if direct else (self.base, self.secret)
        client = openai.OpenAI(base_url=base, api_key=key, max_retries=0)
        self.opened.append(client)
        return client

    def records(self) -> list[Record]:
        return [record for _, record in live.get_recorder().stats.since(0, 256).rows]

    def entries(self) -> list[dict[str, Any]]:
        return [entry(record) for record in self.records()]

    def only_entry(self) -> dict[str, Any]:
        assert wait_for(lambda: len(self.records()) >= 1)
        (found,) = self.entries()
        return found

    def inflight(self) -> int:
        return live.get_recorder().serving.active


@pytest.fixture
def engine(clock: FakeClock) -> SimulatedEngine:
    """The engine behind the pass-through, on the test's fake time."""
    engine = SimulatedEngine(api_key=UPSTREAM_KEY, wall_clock=lambda: CREATED)
    engine.pause = lockstep(clock, engine)
    return engine


async def no_pause(seconds: float) -> None:
    """An engine that takes no time: for what is not about time."""


@pytest.fixture
def twin_url() -> Iterator[str]:
    """An engine like ``engine`` that clients call directly, to compare answers with."""
    with serve(
        SimulatedEngine(api_key=UPSTREAM_KEY, wall_clock=lambda: CREATED, pause=no_pause)
    ) as url:
        yield url


@pytest.fixture
def engine_url(engine: SimulatedEngine) -> Iterator[str]:
    with serve(engine) as url:
        yield url


def upstreams(**urls: str) -> dict[str, Any]:
    return {name: {"BASE_URL": f"{url}/v1", "API_KEY": UPSTREAM_KEY} for name, url in urls.items()}


@pytest.fixture
def proxy_settings(settings: Any, engine_url: str) -> Any:
    """FERROX_STATS with the engine as the only upstream; tests may change it further."""
    settings.FERROX_STATS = {**settings.FERROX_STATS, "PROXY_UPSTREAMS": upstreams(sim=engine_url)}
    return settings


def set_proxy(settings: Any, **values: Any) -> None:
    settings.FERROX_STATS = {**settings.FERROX_STATS, **values}


@pytest.fixture
def plane(
    proxy_settings: Any,
    engine: SimulatedEngine,
    engine_url: str,
    twin_url: str,
    clock: FakeClock,
    recorder: live.Recorder,
    transactional_db: None,
) -> Iterator[Plane]:
    """The control plane served by uvicorn, a key with the infer scope labelled
    "team-a", and the recorder fresh on the fake clock."""
    _, secret = tokens.issue("team-a", read=False, infer=True)
    app = LoopCapture()
    with serve(app) as url:
        plane = Plane(url, engine, engine_url, twin_url, secret, clock)
        try:
            yield plane
        finally:
            for client in plane.opened:
                client.close()
            if app.loop is not None:  # its pooled connections, closed on their own loop
                asyncio.run_coroutine_threadsafe(aclose_clients(), app.loop).result(5)
    tokens.recent.forget(tokens.hash_secret(secret))
