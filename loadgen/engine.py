"""A simulated OpenAI-compatible inference engine: a test and demo tool, not a server to deploy.

``SimulatedEngine`` is a plain ASGI 3 app that pretends to be an inference engine serving
the OpenAI HTTP API, as vLLM's OpenAI server does. The pass-through tests, the benchmarks
and the demo put it behind the proxy, so that what the proxy forwards and records can be
checked against an engine whose every answer is known in advance:

- ``GET /v1/models``; ``POST /v1/chat/completions`` and ``POST /v1/completions``, whole or
  streamed as server-sent events (a usage chunk only with ``stream_options.include_usage``);
  ``POST /v1/embeddings`` (float lists, or base64 as the openai SDK asks by default).
- Deterministic answers: token ``i`` is a fixed word, the id is a hash of the request body
  without ``stream``/``stream_options`` (so a request sent directly and through a proxy gets
  the same id), vectors are hashes of the input, ``created`` is the injected wall clock.
- Time passes through the injected ``pause``: the time to first token, then one token per
  ``1 / tokens_per_s``; tests inject one that only advances a fake clock.
- Every error is an OpenAI error object; a client that leaves cancels its generation.

An extra body field ``"sim"`` (``extra_body={"sim": {...}}`` with the openai SDK) changes
one request:

| key | effect |
|---|---|
| ``ttft_ms``, ``tokens_per_s``, ``tokens`` | override the engine's timing, and the 16 tokens |
| ``fail: status`` | answer that status (400-599) at once, before any other check |
| ``stall_after: k`` | send nothing more after ``k`` tokens until the client leaves, or |
| | ``max_stall_s`` passes (then end the stream there); ``k`` = 0, or an answer not |
| | streamed: before the response starts (then a 504 ``stall_timeout``) |
| ``drop_after: k`` | break the connection after ``k`` tokens (not streamed: mid-body) |

A ``k`` past the last token takes effect just before the finish chunk.

Tests read what the engine saw and did from ``requests``, ``completed``, ``disconnected``
and ``active``. From a shell, on this machine only::

    python -m loadgen.engine --port 8001 --ttft-ms 150 --tokens-per-s 40

``engine_requests`` reads what a request asks, ``engine_bodies`` writes the answers and
``engine_asgi`` carries them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import engine_asgi as asgi
from . import engine_bodies as bodies
from .engine_asgi import Receive, Send
from .engine_requests import (
    CHAT,
    COMPLETION,
    ApiError,
    Generation,
    Sim,
    parse_embeddings,
    parse_generation,
    parse_json,
    parse_sim,
    simulated_failure,
)

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
ROUTES = {
    "/v1/models": "GET",
    "/v1/chat/completions": "POST",
    "/v1/completions": "POST",
    "/v1/embeddings": "POST",
}
KINDS = {"/v1/chat/completions": CHAT, "/v1/completions": COMPLETION}


class SimulatedDrop(Exception):
    """Raised out of the app mid-response so that the server breaks the connection."""


@dataclass
class SeenRequest:
    """A request as the engine received it; ``body`` is its JSON, None if absent or malformed."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class SimulatedEngine:
    """An ASGI 3 app answering like an OpenAI-compatible engine, as described above.

    What it did, changed only on the event loop serving it: ``requests`` (every request
    received, in order), ``completed`` (responses it ended, a stall that ran out included),
    ``disconnected`` (requests whose client left first, each counted once; the generation
    was cancelled) and ``active`` (requests being answered). A dropped connection counts
    as neither completed nor disconnected.
    """

    def __init__(
        self,
        *,
        ttft_s: float = 0.0,
        tokens_per_s: float | None = None,
        models: Sequence[str] = ("sim-small", "sim-large"),
        api_key: str | None = None,
        pause: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wall_clock: Callable[[], float] = time.time,
        max_stall_s: float = 30.0,
    ) -> None:
        if ttft_s < 0 or max_stall_s < 0:
            raise ValueError("ttft_s and max_stall_s must not be negative")
        if tokens_per_s is not None and tokens_per_s <= 0:
            raise ValueError("tokens_per_s must be positive (None: no decoding time)")
        if not models:
            raise ValueError("the engine must serve at least one model")
        self.ttft_s = ttft_s
        self.tokens_per_s = tokens_per_s
        self.models = tuple(models)
        self.api_key = api_key
        self.pause = pause
        self.wall_clock = wall_clock
        self.max_stall_s = max_stall_s
        self.requests: list[SeenRequest] = []
        self.completed = 0
        self.disconnected = 0
        self.active = 0

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await asgi.lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)
        # Any other scope (a websocket) is refused by returning without accepting it.

    async def _http(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        self.active += 1
        try:
            raw = await asgi.read_body(receive)
            if raw is None:
                self.disconnected += 1
                return
            headers = asgi.request_headers(scope)
            seen = SeenRequest(scope["method"], scope["path"], headers, asgi.json_or_none(raw))
            self.requests.append(seen)
            answer = asyncio.create_task(self._answer(seen, raw, send))
            gone = asyncio.create_task(asgi.disconnect(receive))
            try:
                await asyncio.wait((answer, gone), return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                # The server is going away: neither task may outlive this request.
                answer.cancel()
                gone.cancel()
                raise
            await asgi.stop(gone)
            # Checked first: a response that ended is complete even if its client left at once.
            if answer.done():
                answer.result()  # re-raises SimulatedDrop
                self.completed += 1
            else:
                await asgi.stop(answer)
                self.disconnected += 1
        finally:
            self.active -= 1

    async def _answer(self, seen: SeenRequest, raw: bytes, send: Send) -> None:
        try:
            await self._route(seen, raw, send)
        except ApiError as error:
            allow = ROUTES.get(seen.path, "") if error.status == 405 else ""
            await asgi.send_json(send, error.status, error.payload(), allow=allow)

    async def _route(self, seen: SeenRequest, raw: bytes, send: Send) -> None:
        if self.api_key is not None and not _authorized(seen.headers, self.api_key):
            raise ApiError(401, "Incorrect API key provided.", code="invalid_api_key")
        if seen.path not in ROUTES:
            raise ApiError(404, f"There is no route {seen.path}.", code="not_found")
        if seen.method != ROUTES[seen.path]:
            message = f"{seen.path} answers {ROUTES[seen.path]}, not {seen.method}."
            raise ApiError(405, message, code="method_not_allowed")
        if seen.path == "/v1/models":
            await asgi.send_json(send, 200, bodies.model_list(self.models))
            return
        body = parse_json(raw)
        sim = parse_sim(body)
        if sim.fail is not None:
            raise simulated_failure(sim.fail)
        ttft_s = self.ttft_s if sim.ttft_s is None else sim.ttft_s
        tokens_per_s = sim.tokens_per_s or self.tokens_per_s
        if seen.path == "/v1/embeddings":
            job = parse_embeddings(body, self.models)
            await self._whole(send, bodies.embeddings(job), ttft_s, sim)
            return
        gen = parse_generation(KINDS[seen.path], body, self.models, sim)
        created = int(self.wall_clock())
        if gen.stream:
            gap_s = 1 / tokens_per_s if tokens_per_s else 0.0
            await self._stream(send, gen, created, sim, ttft_s, gap_s)
        else:
            decode_s = gen.tokens / tokens_per_s if tokens_per_s else 0.0
            await self._whole(send, bodies.completion(gen, created), ttft_s + decode_s, sim)

    async def _whole(self, send: Send, payload: dict[str, Any], wait_s: float, sim: Sim) -> None:
        # Not streamed, a stall or drop at any token count happens before or inside the one body.
        if sim.stall_after is not None:
            await self._stall_unstarted()
        await self._wait(wait_s)
        if sim.drop_after is not None:
            body = json.dumps(payload).encode()
            await asgi.start(send, 200, asgi.JSON_HEADERS)
            await asgi.send_body(send, body[: len(body) // 2], more=True)
            raise SimulatedDrop("drop_after: the connection breaks mid-body")
        await asgi.send_json(send, 200, payload)

    async def _stream(
        self, send: Send, gen: Generation, created: int, sim: Sim, ttft_s: float, gap_s: float
    ) -> None:
        if sim.stall_after == 0:
            await self._stall_unstarted()
        await asgi.start(send, 200, asgi.EVENT_STREAM_HEADERS)
        if gen.kind == CHAT:
            await _event(send, bodies.role_chunk(gen, created))
        await self._wait(ttft_s)
        for index in range(gen.tokens):
            if await self._interrupted(send, sim, index, gen.tokens):
                return
            if index:
                await self._wait(gap_s)
            await _event(send, bodies.token_chunk(gen, created, index))
        if await self._interrupted(send, sim, gen.tokens, gen.tokens):
            return
        await _event(send, bodies.finish_chunk(gen, created))
        if gen.include_usage:
            await _event(send, bodies.usage_chunk(gen, created))
        await asgi.send_body(send, bodies.DONE, more=False)

    async def _interrupted(self, send: Send, sim: Sim, sent: int, tokens: int) -> bool:
        """Apply a drop or stall due after ``sent`` tokens; True if the stream has ended."""
        # A fault asked for after more tokens than there are fires before the finish chunk.
        if sim.drop_after is not None and min(sim.drop_after, tokens) == sent:
            raise SimulatedDrop(f"drop_after: the connection breaks after {sent} tokens")
        if sim.stall_after is not None and min(sim.stall_after, tokens) == sent:
            await asyncio.sleep(self.max_stall_s)
            await asgi.send_body(send, b"", more=False)
            return True
        return False

    async def _stall_unstarted(self) -> None:
        # Real time, not ``pause``: a stall waits for the client to give up, whatever the clock.
        await asyncio.sleep(self.max_stall_s)
        message = "simulated stall outlasted max_stall_s"
        raise ApiError(504, message, type="server_error", code="stall_timeout")

    async def _wait(self, seconds: float) -> None:
        if seconds > 0:
            await self.pause(seconds)


async def _event(send: Send, payload: dict[str, Any]) -> None:
    # Each event in its own body message, so a proxy sees tokens one by one.
    await asgi.send_body(send, bodies.sse(payload), more=True)


def _authorized(headers: dict[str, str], api_key: str) -> bool:
    given = headers.get("authorization", "").encode()
    return secrets.compare_digest(given, f"Bearer {api_key}".encode())


def main(argv: Sequence[str] | None = None) -> None:
    """Serve a simulated engine on this machine until SIGTERM or Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m loadgen.engine",
        description="A simulated OpenAI-compatible engine, for tests and demos only.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="127.0.0.1, localhost or ::1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--ttft-ms", type=_at_least_zero, default=0.0)
    parser.add_argument("--tokens-per-s", type=_above_zero, default=None)
    parser.add_argument("--models", default="sim-small,sim-large", help="comma-separated")
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    args = parser.parse_args(argv)
    if args.host not in LOCAL_HOSTS:
        parser.error(f"--host must be one of {', '.join(LOCAL_HOSTS)}: this is a test tool")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not models:
        parser.error("--models names no model")
    engine = SimulatedEngine(
        ttft_s=args.ttft_ms / 1000,
        tokens_per_s=args.tokens_per_s,
        models=models,
        api_key=args.api_key,
    )
    import uvicorn  # only the command line serves; importing the engine needs no server

    uvicorn.run(engine, host=args.host, port=args.port, log_level="warning", lifespan="on")


def _at_least_zero(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text} is not a number >= 0")
    return value


def _above_zero(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} is not a number > 0")
    return value


if __name__ == "__main__":
    main()
