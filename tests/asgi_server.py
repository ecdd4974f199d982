"""A real uvicorn server for an ASGI app, on a free port of this machine, in a thread.

For what an in-process transport cannot show: a client that leaves mid-stream, a
connection broken mid-body, an SDK talking real HTTP.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

START_TIMEOUT_S = 10.0


@contextlib.contextmanager
def serve(app: Callable[..., Any]) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 while the block runs; yields its ``http://127.0.0.1:<port>``."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="asgi-server", daemon=True)
    thread.start()
    try:
        if not wait_for(lambda: server.started or not thread.is_alive(), START_TIMEOUT_S):
            raise RuntimeError(f"uvicorn did not start within {START_TIMEOUT_S} s")
        if not server.started:
            raise RuntimeError("uvicorn stopped before it started serving")
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT_S)


def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    """Whether ``condition()`` came true within ``timeout_s``, checked every few ms."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True
