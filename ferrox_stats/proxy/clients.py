"""Pooled HTTP clients to the upstreams: one ``httpx.AsyncClient`` per upstream and
event loop, so connections are reused across requests instead of opened per request.

A client's connections belong to the loop that opened them; an ASGI server runs one
loop per process, so in practice this is one client per upstream.
"""

from __future__ import annotations

import asyncio
import threading
import weakref

import httpx

from ..conf import conf
from .upstreams import Upstream

# A client is made for an upstream with the settings of the moment: (connect timeout,
# read timeout, connection limit). Changed settings get a new client.
_Key = tuple[Upstream, float, float, int]

_lock = threading.Lock()
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[_Key, httpx.AsyncClient]]
_clients = weakref.WeakKeyDictionary()


def client_for(upstream: Upstream) -> httpx.AsyncClient:
    """The running loop's client for ``upstream``, made on first use."""
    loop = asyncio.get_running_loop()
    key = (
        upstream,
        conf.PROXY_CONNECT_TIMEOUT_S,
        conf.PROXY_READ_TIMEOUT_S,
        conf.PROXY_MAX_CONNECTIONS,
    )
    with _lock:
        per_loop = _clients.setdefault(loop, {})
        client = per_loop.get(key)
        if client is None or client.is_closed:
            client = per_loop[key] = _new_client(*key[1:])
    return client


def _new_client(connect: float, read: float, limit: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        # read: the longest silence from an upstream, before its answer or mid-stream.
        timeout=httpx.Timeout(read, connect=connect, pool=connect),
        limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit),
        # An upstream is addressed directly: HTTP_PROXY meant for the outside world
        # must not capture engine traffic.
        trust_env=False,
    )


async def aclose_clients() -> None:
    """Close the running loop's clients (a server's shutdown, a test's teardown)."""
    loop = asyncio.get_running_loop()
    with _lock:
        clients = list(_clients.pop(loop, {}).values())
    for client in clients:
        await client.aclose()
