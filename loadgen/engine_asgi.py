"""Plain ASGI 3 plumbing for the simulated engine: lifespan, bodies in and out, disconnects.

No framework: the engine speaks the ASGI messages itself, so what a server sees from it
(a stream cut short, a response never started) is exactly what it sends.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON_HEADERS = [(b"content-type", b"application/json")]
EVENT_STREAM_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


async def lifespan(receive: Receive, send: Send) -> None:
    """Answer a lifespan scope: startup and shutdown, with nothing to set up or tear down."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def read_body(receive: Receive) -> bytes | None:
    """The whole request body; None if the client left before sending it all."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def disconnect(receive: Receive) -> None:
    """Returns when the client has gone away."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def stop(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait until it has finished, however it ends."""
    task.cancel()
    await asyncio.wait((task,))
    if not task.cancelled():
        task.exception()  # retrieved, so that asyncio does not report it as lost


async def send_json(send: Send, status: int, payload: dict[str, Any], allow: str = "") -> None:
    """A whole JSON response (with an ``Allow`` header when ``allow`` names methods)."""
    body = json.dumps(payload).encode()
    headers = [*JSON_HEADERS, (b"content-length", str(len(body)).encode())]
    if allow:
        headers.append((b"allow", allow.encode()))
    await start(send, status, headers)
    await send_body(send, body, more=False)


async def start(send: Send, status: int, headers: list[tuple[bytes, bytes]]) -> None:
    """Start a response; without a content-length, the server chunks the body."""
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def send_body(send: Send, body: bytes, *, more: bool) -> None:
    """Send a part of the response body; ``more=False`` ends the response."""
    await send({"type": "http.response.body", "body": body, "more_body": more})


def request_headers(scope: MutableMapping[str, Any]) -> dict[str, str]:
    """The request's headers by lower-case name; repeated ones joined with ", "."""
    headers: dict[str, str] = {}
    for name, value in scope["headers"]:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


def json_or_none(raw: bytes) -> Any:
    """``raw`` parsed as JSON; None if empty or not JSON."""
    try:
        return json.loads(raw) if raw else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
