"""Fault injection for tests: a database that goes away without stopping the shared server.

``FaultProxy`` is a TCP proxy on 127.0.0.1 in front of the PostgreSQL server; a Django
alias pointed at it (``route_through``) loses its database when the test says so.
``TokenDatabase`` stands in for the token lookup alone, for tests that need no server.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

from django.db import OperationalError, connections

from ferrox_stats import tokens
from ferrox_stats.models import ApiToken

PASS = "pass"  # forward both ways
REFUSE = "refuse"  # close each new connection at once, as a stopped server does
STALL = "stall"  # accept, and forward nothing on any connection, as a silent network does
MODES = (PASS, REFUSE, STALL)


def _rst(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), not an orderly FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class FaultProxy:
    """A TCP proxy to ``target`` on a free port of 127.0.0.1, switchable at run time.

    ``mode`` is one of ``MODES``; ``reset()`` breaks every open connection with a TCP
    reset. It stops by itself ``lifetime_s`` after it started (resetting what is
    open), so a test that forgets to close it cannot leave it running.
    """

    def __init__(self, target: tuple[str, int], lifetime_s: float = 300.0) -> None:
        self.target = target
        self.lifetime_s = lifetime_s
        self._mode = PASS
        self._flowing = threading.Event()
        self._flowing.set()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self.accepted = 0
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    @mode.setter
    def mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self._mode = mode
        if mode == STALL:
            self._flowing.clear()
        else:
            self._flowing.set()

    def start(self) -> FaultProxy:
        self._deadline = time.monotonic() + self.lifetime_s
        self._acceptor.start()
        return self

    def reset(self) -> int:
        """Break every open connection with a reset; return how many sockets were reset."""
        with self._lock:
            sockets = list(self._open)
            self._open.clear()
        for sock in sockets:
            _rst(sock)
        return len(sockets)

    def close(self) -> None:
        self._stopped.set()
        self._flowing.set()  # let stalled pipes see the stop
        if self._acceptor.is_alive():
            self._acceptor.join(5)
        self.reset()
        for thread in self._threads:
            thread.join(5)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stopped.is_set() and time.monotonic() < self._deadline:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            self.accepted += 1
            if self._mode == REFUSE:
                _rst(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _rst(client)
                continue
            with self._lock:
                self._open.update((client, server))
            for src, dst in ((client, server), (server, client)):
                pipe = threading.Thread(target=self._pipe, args=(src, dst), daemon=True)
                self._threads.append(pipe)
                pipe.start()
        self._stopped.set()
        self.reset()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self._stopped.is_set():
                if not self._flowing.wait(0.05):
                    continue  # stalled: the bytes wait in the kernel's buffers
                ready, _, _ = select.select([src], [], [], 0.05)
                if not ready or not self._flowing.is_set():
                    continue
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except (OSError, ValueError):  # reset under our feet: select() on a closed socket
            pass
        finally:
            with self._lock:
                self._open.discard(src)
                self._open.discard(dst)
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.close()


@contextlib.contextmanager
def fault_proxy(target: tuple[str, int], lifetime_s: float = 300.0) -> Iterator[FaultProxy]:
    """A started ``FaultProxy``, closed when the block ends."""
    proxy = FaultProxy(target, lifetime_s).start()
    try:
        yield proxy
    finally:
        proxy.close()


@contextlib.contextmanager
def route_through(proxy: FaultProxy, alias: str = "default") -> Iterator[dict[str, Any]]:
    """Point the ``alias`` connections every thread opens from now on at ``proxy``.

    The settings dict is the one every thread's connection shares, so this reaches the
    archive writer's and a served request's connections too. Restored afterwards.
    """
    settings_dict: dict[str, Any] = connections.settings[alias]
    saved = settings_dict["HOST"], settings_dict["PORT"]
    settings_dict["HOST"], settings_dict["PORT"] = "127.0.0.1", str(proxy.port)
    connections[alias].close()
    try:
        yield settings_dict
    finally:
        settings_dict["HOST"], settings_dict["PORT"] = saved
        connections[alias].close()


class TokenDatabase:
    """Stands in for the token lookup: answers as the real one does, or fails as an
    unreachable server does (``down``); counts the lookups made."""

    def __init__(self) -> None:
        self.down = False
        self.lookups = 0
        self._real = tokens._lookup

    def __call__(self, digest: str) -> ApiToken | None:
        self.lookups += 1
        if self.down:
            raise OperationalError("connection refused")
        return self._real(digest)
