"""Pooled HTTP clients to the upstreams: one ``aiohttp.ClientSession`` per upstream and
event loop, so connections are reused across requests instead of opened per request.

aiohttp, not httpx: on the same simulated engine, an ASGI app that only forwards a
request adds 0.36-0.41 ms at p50 with aiohttp and 0.84-1.03 ms with httpx, and relays
an unpaced stream at 1.13-1.18x the engine's tokens/s against 0.62-0.70x
(``bench/proxy_clients.py``, docs/benchmarks.md, issue 13).

A session's connections belong to the loop that opened them; an ASGI server runs one
loop per process, so in practice this is one session per upstream.
"""

from __future__ import annotations

import asyncio
import threading
import weakref

import aiohttp

from ..conf import conf
from .upstreams import Upstream

# What counts as the exchange with an upstream failing (no connection, a broken or
# malformed answer, a timeout), as opposed to a bug here.
UPSTREAM_ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientError, TimeoutError)

# A session is made for an upstream with the settings of the moment: (connect timeout,
# read timeout, connection limit). Changed settings get a new session.
_Key = tuple[Upstream, float, float, int]

# How long an idle pooled connection is kept.
_IDLE_S = 4.0

_lock = threading.Lock()
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[_Key, aiohttp.ClientSession]]
_clients = weakref.WeakKeyDictionary()


def client_for(upstream: Upstream) -> aiohttp.ClientSession:
    """The running loop's session for ``upstream``, made on first use."""
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
        if client is None or client.closed:
            client = per_loop[key] = _new_client(*key[1:])
    return client


def _new_client(connect: float, read: float, limit: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        # An idle connection is dropped before the upstream's server would drop it
        # (uvicorn's default keep-alive is 5 s, vLLM's and SGLang's servers included):
        # one reused as the server closes it fails the request sent on it.
        connector=aiohttp.TCPConnector(limit=limit, keepalive_timeout=_IDLE_S),
        timeout=aiohttp.ClientTimeout(
            total=None,
            # connect: a free connection from the pool, or a new one, within this;
            # sock_read: the longest silence from an upstream, before its answer or
            # mid-stream.
            connect=connect,
            sock_connect=connect,
            sock_read=read,
        ),
        # Bytes are relayed as the upstream sent them (and asked for uncompressed).
        auto_decompress=False,
        # An upstream is addressed directly: HTTP_PROXY meant for the outside world
        # must not capture engine traffic.
        trust_env=False,
    )


async def aclose_clients() -> None:
    """Close the running loop's sessions (a server's shutdown, a test's teardown)."""
    loop = asyncio.get_running_loop()
    with _lock:
        clients = list(_clients.pop(loop, {}).values())
    for client in clients:
        await client.close()
