"""The two minimal forwarders ``bench/proxy_clients.py`` serves (``uvicorn --factory``):
an ASGI app that reads the body, sends it to the engine with one client library, and
writes back what the engine answered (relaying a stream as the connection hands its
bytes over). Nothing else: no Django, no accounting, no record. What is left is the
client library's own cost, and a floor for any pass-through built on it.

The engine's URL comes from ``FERROX_BENCH_ENGINE_URL`` (``http://127.0.0.1:<port>``).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import aiohttp
import httpx

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

ENGINE = os.environ.get("FERROX_BENCH_ENGINE_URL", "http://127.0.0.1:8001")
HEADERS = {"Content-Type": "application/json", "Accept-Encoding": "identity"}


async def _body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        else:
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _start(send: Send, status: int, content_type: str) -> None:
    headers = [(b"content-type", content_type.encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})


def with_httpx() -> App:
    """One pooled ``httpx.AsyncClient``, as the pass-through had it until issue 13."""
    client: httpx.AsyncClient | None = None

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal client
        if scope["type"] == "lifespan":
            return await _lifespan(receive, send)
        if client is None:
            client = httpx.AsyncClient(base_url=ENGINE, timeout=60, trust_env=False)
        request = client.build_request("POST", scope["path"], content=await _body(receive))
        request.headers.update(HEADERS)
        answer = await client.send(request, stream=True)
        try:
            await _start(send, answer.status_code, answer.headers.get("content-type", ""))
            async for data in answer.aiter_raw():
                await send({"type": "http.response.body", "body": data, "more_body": True})
        finally:
            await answer.aclose()
        await send({"type": "http.response.body", "body": b""})

    return app


def with_aiohttp() -> App:
    """One pooled ``aiohttp.ClientSession``, as the pass-through has it now."""
    session: aiohttp.ClientSession | None = None

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal session
        if scope["type"] == "lifespan":
            return await _lifespan(receive, send)
        if session is None:
            session = aiohttp.ClientSession(ENGINE, auto_decompress=False)
        body = await _body(receive)
        async with session.post(scope["path"], data=body, headers=HEADERS) as answer:
            await _start(send, answer.status, answer.headers.get("Content-Type", ""))
            async for data in answer.content.iter_any():
                await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app
