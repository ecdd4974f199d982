"""Real server processes for the fleet tests: a database of their own, gunicorn with
uvicorn workers, a second server playing another host; each bounded and always stopped.

Every process is started in a session of its own (``start_new_session``), so stopping
one is by its process group id, which is its pid: SIGTERM first (gunicorn then stops its
workers, uvicorn runs the lifespan shutdown), SIGKILL to the group after a deadline, so
no worker outlives the test even if its master was killed. Output goes to a log file
that a failure message quotes.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = "tests.fleet.settings"
APP = "tests.fleet.asgi:application"
# uvicorn's own gunicorn worker class (deprecated by uvicorn for the separate
# uvicorn-worker package, and still shipped by it).
WORKER_CLASS = "uvicorn.workers.UvicornWorker"

START_TIMEOUT_S = 60.0  # Django imported by every worker, on a shared 2-core machine
STOP_TIMEOUT_S = 15.0
COMMAND_TIMEOUT_S = 120.0
LOG_TAIL_CHARS = 4000

T = TypeVar("T")


# -- waiting ---------------------------------------------------------------------------


class Timeout(AssertionError):
    """A bounded wait ran out; says what was waited for and what was seen last."""


def until(
    what: str,
    probe: Callable[[], T],
    done: Callable[[T], bool],
    *,
    timeout_s: float,
    every_s: float = 0.05,
) -> T:
    """Call ``probe`` until ``done`` holds for its answer, at most ``timeout_s``; return
    that answer. A probe that raises counts as not done (a worker restarting)."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = probe()
            if done(last):
                return last
        except (httpx.HTTPError, OSError, ValueError) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise Timeout(f"{what}: not within {timeout_s} s; last seen: {last!r:.2000}")
        time.sleep(every_s)


# -- the database ----------------------------------------------------------------------


def postgres_url(url: str | None) -> str | None:
    """``url`` if it names a PostgreSQL server, else None."""
    if url and urlsplit(url).scheme in {"postgres", "postgresql", "pgsql"}:
        return url
    return None


def with_database(url: str, name: str) -> str:
    """``url`` on the same server, naming database ``name``."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def _connect(url: str) -> Any:
    import psycopg

    dsn = url.replace("postgres://", "postgresql://", 1).replace("pgsql://", "postgresql://", 1)
    return psycopg.connect(dsn, autocommit=True, connect_timeout=10)


@contextlib.contextmanager
def database(server_url: str, *, template: str | None = None) -> Iterator[str]:
    """A database of its own on ``server_url``'s server (a copy of ``template`` when
    given), dropped afterwards whatever still holds it; yields its URL."""
    name = f"ferrox_fleet_{secrets.token_hex(6)}"
    copy = f" TEMPLATE {template}" if template else ""
    with _connect(server_url) as admin:
        admin.execute(f"CREATE DATABASE {name}{copy}")
    try:
        yield with_database(server_url, name)
    finally:
        with _connect(server_url) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def query(url: str, sql: str) -> list[tuple[Any, ...]]:
    """The rows ``sql`` selects in the database at ``url`` (a test's own)."""
    with _connect(url) as connection:
        rows: list[tuple[Any, ...]] = connection.execute(sql).fetchall()
        return rows


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


# -- commands and servers ----------------------------------------------------------------


def environ(database_url: str, **values: str) -> dict[str, str]:
    """The environment of a fleet process: this checkout first on the path, the fleet
    settings, the database, then ``values`` (``FERROX_FLEET_*``)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {
        **os.environ,
        "PYTHONPATH": path,
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "DATABASE_URL": database_url,
        "PYTHONUNBUFFERED": "1",
        **values,
    }
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


def django_admin(env: Mapping[str, str], *args: str) -> str:
    """Run ``django-admin`` with ``args`` in the fleet's environment; its stdout, or an
    AssertionError with its output."""
    result = subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, f"django-admin {' '.join(args)}:\n{result.stderr}"
    return result.stdout


def issue_token(env: Mapping[str, str], label: str, ingest_replica: str) -> str:
    """A token with the read, ingest and infer scopes, issued by the management command;
    its secret."""
    out = django_admin(
        env, "ferrox_stats_token", "create", label, "--ingest", ingest_replica, "--infer"
    )
    secret = out.strip().splitlines()[-1]
    assert re.fullmatch(r"\S{20,}", secret), out
    return secret


def free_port() -> int:
    """A port nothing listens on now (gunicorn cannot bind port 0 and tell us which)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    """One server process (its group: a gunicorn master and its workers), its URL and log."""

    name: str
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return text[-LOG_TAIL_CHARS:]

    def describe(self) -> str:
        return f"--- {self.name} (pid {self.pid}, exit {self.process.poll()}) log tail:\n" + (
            self.log_tail()
        )


def gunicorn(workers: int, *options: str) -> Callable[[int], list[str]]:
    """gunicorn with ``workers`` uvicorn workers on a port, and more ``options``."""
    return lambda port: [
        sys.executable, "-m", "gunicorn", APP,
        "--worker-class", WORKER_CLASS,
        "--workers", str(workers),
        "--bind", f"127.0.0.1:{port}",
        "--graceful-timeout", "5",
        "--timeout", "60",
        "--log-level", "warning",
        *options,
    ]  # fmt: skip


def uvicorn(port: int) -> list[str]:
    """One uvicorn process on ``port``."""
    return [
        sys.executable, "-m", "uvicorn", APP,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--log-level", "warning",
    ]  # fmt: skip


@contextlib.contextmanager
def serving(
    name: str,
    command: Callable[[int], Sequence[str]],
    env: Mapping[str, str],
    log_dir: Path,
    *,
    ready_path: str = "/host/whoami",
) -> Iterator[Server]:
    """Start ``command(port)`` for a free port; yield once ``ready_path`` answers 200
    (within START_TIMEOUT_S); always stop it afterwards (``stop``)."""
    port = free_port()
    log = log_dir / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            list(command(port)),
            cwd=ROOT,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Server(name, process, f"http://127.0.0.1:{port}", log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(f"{server.url}{ready_path}"):
            if process.poll() is not None:
                raise AssertionError(f"{name} exited before serving\n{server.describe()}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{name} did not answer within {START_TIMEOUT_S} s\n{server.describe()}"
                )
            time.sleep(0.1)
        yield server
    finally:
        stop(server)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def stop(server: Server, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM the server's process (resumed first, should a test have SIGSTOPped it),
    then SIGKILL its whole group (it leads one: ``start_new_session``) if it is still
    there after ``timeout_s``, and whatever of the group is left in any case."""
    process = server.process
    group = process.pid
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
            process.wait(timeout_s)
    # Workers whose master is gone (killed above, or by the test) must not outlive it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


def children(pid: int) -> set[int]:
    """The pids of ``pid``'s children now (Linux)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found.update(int(child) for child in (task / "children").read_text().split())
    return found
