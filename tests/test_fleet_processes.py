"""The fleet as it runs in production: real processes on one PostgreSQL.

gunicorn with four uvicorn workers plays one host; a uvicorn server with another
replica and its own metrics directory plays a second host; a simulated engine (in this
process) sits behind the pass-through. Traffic comes through ingest, the pass-through
(the official ``openai`` client) and the host's own view recording with the in-process
tracker, each on a fresh connection, so gunicorn spreads it over its workers as a load
balancer would. What a user reads must then be the fleet's: the commit-order tail
(``v1/history?order=committed``) delivers each request once whichever worker answers,
``v1/fleet`` sums the live instances exactly, ``/metrics`` answers for the whole host.

PostgreSQL only (the processes share the archive's database); each test creates and
drops a database of its own (tests/fleet/harness.py). Every wait is bounded and polls.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.engine import SimulatedEngine
from tests.asgi_server import serve
from tests.fleet import harness
from tests.fleet.settings import UPSTREAM_KEY

SERVER_URL = harness.postgres_url(os.environ.get("DATABASE_URL"))
pytestmark = pytest.mark.skipif(
    SERVER_URL is None,
    reason="PostgreSQL only: the fleet's processes share the archive's database, which "
    "SQLite (one process's file) cannot be; set DATABASE_URL=postgres://…",
)

INGEST_REPLICA = "fleet-engines"
# Small, so the tests wait little for the heartbeats; not smaller, so a heartbeat late
# on a busy machine does not make a live worker stale (after 3 * HEARTBEAT_S).
HEARTBEAT_S = 0.5
# Long enough for every wait below on a busy machine, bounded all the same.
CATCH_UP_S = 30.0


async def no_pause(seconds: float) -> None:
    """The engine takes no time: these tests are about counting, not latency."""


@pytest.fixture(scope="module")
def engine_url() -> Iterator[str]:
    """The simulated engine behind every server's pass-through, served in this process."""
    with serve(SimulatedEngine(api_key=UPSTREAM_KEY, pause=no_pause)) as url:
        yield url


# -- the fleet -----------------------------------------------------------------------------


@dataclass
class Fleet:
    """The servers of one test, the token that reads, ingests and infers, and its database."""

    hosts: dict[str, harness.Server]
    secret: str = field(repr=False)
    database_url: str = ""

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}"}

    def get(self, host: str, path: str, **params: Any) -> httpx.Response:
        """One GET on a fresh connection (so gunicorn may hand it to any worker)."""
        return httpx.get(
            f"{self.hosts[host].url}{path}", params=params, headers=self.auth, timeout=10.0
        )

    def fleet(self, host: str = "a") -> dict[str, Any]:
        response = self.get(host, "/telemetry/v1/fleet")
        assert response.status_code == 200, response.text
        document: dict[str, Any] = response.json()
        return document

    def instance_pids(self, host: str) -> set[int]:
        return {self.get(host, "/host/whoami").json()["pid"] for _ in range(4)}

    def describe(self) -> str:
        return "\n".join(server.describe() for server in self.hosts.values())


@contextlib.contextmanager
def fleet(
    tmp_path: Path,
    engine_url: str,
    *,
    second_host: bool = True,
    workers: int = 4,
    gunicorn_options: tuple[str, ...] = (),
    **settings: str,
) -> Iterator[Fleet]:
    """A database of the test's own, migrated, with a token; gunicorn (host "a") and,
    with ``second_host``, a uvicorn server (host "b"); every worker's recorder (and
    heartbeat) started. ``settings`` are ``FERROX_FLEET_*`` values for every server."""
    assert SERVER_URL is not None
    values = {"FERROX_FLEET_ENGINE_URL": engine_url, "FERROX_FLEET_HEARTBEAT_S": str(HEARTBEAT_S)}
    values.update(settings)
    with harness.database(SERVER_URL) as database_url, contextlib.ExitStack() as stack:
        env = harness.environ(database_url, **values)
        harness.django_admin(env, "migrate", "--noinput", "-v", "0")
        secret = harness.issue_token(env, "fleet-tests", INGEST_REPLICA)
        commands = {"a": harness.gunicorn(workers, *gunicorn_options)}
        if second_host:
            commands["b"] = harness.uvicorn
        hosts: dict[str, harness.Server] = {}
        for name, command in commands.items():
            host_env = {
                **env,
                "FERROX_FLEET_REPLICA": f"fleet-host-{name}",
                "FERROX_FLEET_METRICS_DIR": str(tmp_path / f"metrics-{name}"),
            }
            hosts[name] = stack.enter_context(
                harness.serving(f"host-{name}", command, host_env, tmp_path)
            )
        the_fleet = Fleet(hosts, secret, database_url)
        try:
            warm(the_fleet, workers)
            yield the_fleet
        except BaseException as exc:
            exc.add_note(the_fleet.describe())
            raise


def warm(fleet: Fleet, workers: int) -> None:
    """Every gunicorn worker has answered once (so each has its recorder and heartbeat)."""
    seen: set[int] = set()

    def probe() -> set[int]:
        seen.update(fleet.instance_pids("a"))
        return seen

    harness.until(f"all {workers} workers answer", probe, lambda s: len(s) >= workers, timeout_s=30)
    if "b" in fleet.hosts:
        fleet.instance_pids("b")


# -- traffic -------------------------------------------------------------------------------


@dataclass
class Sent:
    """What the tests sent and the servers acknowledged: ids, and counts by host."""

    ids: list[str] = field(default_factory=list)
    requests: Counter[str] = field(default_factory=Counter)
    prompt: Counter[str] = field(default_factory=Counter)
    completion: Counter[str] = field(default_factory=Counter)
    failed: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, host: str, request_id: str, prompt: int, completion: int) -> None:
        with self.lock:
            self.ids.append(request_id)
            self.requests[host] += 1
            self.prompt[host] += prompt
            self.completion[host] += completion


def fresh_connections(transport: httpx.BaseTransport | None = None) -> httpx.Client:
    """An HTTP client that opens a connection per request: each may land on any worker."""
    return httpx.Client(
        limits=httpx.Limits(max_keepalive_connections=0), timeout=30.0, transport=transport
    )


class ResendUnread(httpx.BaseTransport):
    """Sends a request again when a recycling worker closed its connection unread.

    A uvicorn worker that reached gunicorn's ``max_requests`` closes the connections it
    has accepted but not yet read a request from (``H11Protocol.shutdown``: a request in
    progress is finished and answered first). The client sees one of two things, by
    whether its request had reached the worker's socket when it closed: "Server
    disconnected without sending a response" (closed first: a FIN), or "Connection reset
    by peer" (the kernel answers a close over unread bytes with a RST). Either way no
    worker read the request, so sending it again counts nothing twice, as a load
    balancer or Prometheus' next scrape would. Any other error, and a third such close
    in a row, is raised.
    """

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
        self.resent = 0

    @staticmethod
    def closed_unread(error: httpx.TransportError) -> bool:
        if isinstance(error, httpx.RemoteProtocolError):
            return "without sending a response" in str(error)
        if isinstance(error, httpx.ReadError | httpx.WriteError):
            return "Connection reset by peer" in str(error)
        return False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for attempt in range(3):
            try:
                return self.inner.handle_request(request)
            except httpx.TransportError as error:
                if not self.closed_unread(error) or attempt == 2:
                    raise
                self.resent += 1
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.inner.close()


def ingest(fleet: Fleet, host: str, sent: Sent, first: int, count: int) -> None:
    """``count`` records reported by an engine elsewhere, in one batch."""
    now_ms = int(time.time() * 1000)
    records = [
        {
            "request_id": f"ing-{n}",
            "at_ms": now_ms - 1000,
            "route": "/v1/chat/completions",
            "model": "engine-model",
            "status": 200,
            "stream": True,
            "prompt_tokens": 10 + n % 7,
            "completion_tokens": 3 + n % 5,
            "ttft_ms": 20.0,
            "duration_ms": 100.0 + n,
            "decode_ms": 60.0,
            "finish_reason": "stop",
        }
        for n in range(first, first + count)
    ]
    body = {"records": records, "instance": f"engine-proc-{first}"}
    response = httpx.post(
        f"{fleet.hosts[host].url}/telemetry/v1/ingest", json=body, headers=fleet.auth, timeout=30
    )
    assert response.status_code == 200, response.text
    assert response.json()["accepted"] == count, response.text
    for record in records:
        sent.add(host, record["request_id"], record["prompt_tokens"], record["completion_tokens"])


def pass_through(fleet: Fleet, host: str, sent: Sent, n: int) -> None:
    """One chat completion through the pass-through with the official client; streamed
    every other time (with usage, so the client knows the tokens it was billed)."""
    with fresh_connections() as http:
        client = openai.OpenAI(
            base_url=f"{fleet.hosts[host].url}/v1",
            api_key=fleet.secret,
            max_retries=0,
            http_client=http,
        )
        messages: Any = [{"role": "user", "content": f"request {n} " + "word " * (n % 9)}]
        if n % 2:
            stream = client.chat.completions.create(
                model="sim-small",
                messages=messages,
                max_tokens=2 + n % 6,
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = list(stream)
            (answer_id,) = {chunk.id for chunk in chunks}
            (usage,) = [chunk.usage for chunk in chunks if chunk.usage is not None]
        else:
            completion = client.chat.completions.create(
                model="sim-small", messages=messages, max_tokens=2 + n % 6
            )
            answer_id, usage = completion.id, completion.usage
        assert usage is not None
        sent.add(host, answer_id, usage.prompt_tokens, usage.completion_tokens)


def tracked(fleet: Fleet, host: str, sent: Sent, n: int, http: httpx.Client | None = None) -> str:
    """One request served by the host's own view, recorded with ``live.track``; the
    instance that recorded it."""
    request_id, prompt, completion = f"trk-{n}", 5 + n % 11, 1 + n % 4
    with contextlib.ExitStack() as stack:
        client = http or stack.enter_context(fresh_connections())
        response = client.get(
            f"{fleet.hosts[host].url}/host/tracked",
            params={"id": request_id, "prompt": prompt, "completion": completion},
        )
    assert response.status_code == 200, response.text
    sent.add(host, request_id, prompt, completion)
    instance: str = response.json()["instance"]
    return instance


def mixed_load(fleet: Fleet, total: int, hosts: tuple[str, ...]) -> Sent:
    """``total`` requests, a third each through ingest (batches of 5), the pass-through
    and the tracker view, spread over ``hosts``, eight at a time in a shuffled order."""
    sent = Sent()
    third = total // 3
    host_of = itertools.cycle(hosts)
    work: list[Callable[[], None]] = []
    for first in range(0, third, 5):
        work.append(_bind(ingest, fleet, next(host_of), sent, first, min(5, third - first)))
    for n in range(third):
        work.append(_bind(pass_through, fleet, next(host_of), sent, n))
    for n in range(total - 2 * third):
        work.append(_bind(tracked, fleet, next(host_of), sent, n))
    random.Random(10).shuffle(work)
    with ThreadPoolExecutor(8) as pool:
        for future in [pool.submit(job) for job in work]:
            future.result(timeout=120)
    assert len(sent.ids) == total
    return sent


def _bind(function: Callable[..., Any], *args: Any) -> Callable[[], None]:
    def job() -> None:
        function(*args)

    return job


# -- reading it back -------------------------------------------------------------------------


def follow_tail(fleet: Fleet, expected: set[str], hosts: tuple[str, ...]) -> list[str]:
    """Follow ``v1/history?order=committed`` by its ``next_cursor``, each poll on a fresh
    connection to the next host, until every expected id came (bounded); every id
    delivered, in order, duplicates included."""
    delivered: list[str] = []
    cursor: str | None = None
    host_of = itertools.cycle(hosts)

    def poll() -> set[str]:
        nonlocal cursor
        params = {"order": "committed", "limit": 37, **({"cursor": cursor} if cursor else {})}
        response = fleet.get(next(host_of), "/telemetry/v1/history", **params)
        assert response.status_code == 200, response.text
        page = response.json()
        delivered.extend(entry["request_id"] for entry in page["entries"])
        if page["entries"]:
            assert page["next_cursor"] is not None
        cursor = page["next_cursor"] or cursor
        return set(delivered)

    harness.until(
        "the fleet tail delivers every request",
        poll,
        lambda got: expected <= got,
        timeout_s=CATCH_UP_S,
        every_s=0.0,
    )
    # Caught up: further polls, on every host, bring nothing more.
    for _ in range(2 * len(hosts)):
        poll()
    return delivered


def totals_equal(sent: Sent, hosts: tuple[str, ...]) -> Callable[[dict[str, Any]], bool]:
    def done(document: dict[str, Any]) -> bool:
        totals = document["totals"]
        return (
            totals["completed"] == sum(sent.requests[h] for h in hosts)
            and totals["prompt_tokens_total"] == sum(sent.prompt[h] for h in hosts)
            and totals["completion_tokens_total"] == sum(sent.completion[h] for h in hosts)
            and totals["active"] == 0
        )

    return done


@dataclass(frozen=True)
class HostCounters:
    """What one ``/metrics`` scrape says the host served."""

    requests: float
    prompt_tokens: float
    completion_tokens: float
    running: float | None


def scrape(fleet: Fleet, host: str = "a", http: httpx.Client | None = None) -> HostCounters:
    if http is None:
        response = fleet.get(host, "/telemetry/metrics")
    else:
        response = http.get(f"{fleet.hosts[host].url}/telemetry/metrics", headers=fleet.auth)
    assert response.status_code == 200, response.text
    requests = prompt = completion = 0.0
    running: float | None = None
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == "gen_ai_server_request_duration_seconds_count":
                requests += sample.value
            elif sample.name == "gen_ai_client_token_usage_sum":
                kind = sample.labels.get("gen_ai_token_type")
                if kind == "input":
                    prompt += sample.value
                elif kind == "output":
                    completion += sample.value
            elif sample.name == "ferrox_stats_requests_running":
                running = (running or 0.0) + sample.value
    return HostCounters(requests, prompt, completion, running)


def host_share(sent: Sent, host: str) -> HostCounters:
    return HostCounters(
        float(sent.requests[host]), float(sent.prompt[host]), float(sent.completion[host]), 0.0
    )


# -- the tests -------------------------------------------------------------------------------


def test_the_fleet_tail_stats_and_metrics_count_every_request_once(
    tmp_path: Path, engine_url: str
) -> None:
    hosts = ("a", "b")
    with fleet(tmp_path, engine_url) as the_fleet:
        sent = mixed_load(the_fleet, 300, hosts)
        assert sent.requests["a"] and sent.requests["b"]

        # The tail: each request once, whichever worker of whichever host answers a poll.
        delivered = follow_tail(the_fleet, set(sent.ids), hosts)
        duplicates = [rid for rid, n in Counter(delivered).items() if n > 1]
        assert duplicates == []
        assert sorted(delivered) == sorted(sent.ids)

        # Fleet stats: every worker of both hosts summed, once the heartbeats caught up.
        every_one_live = totals_equal(sent, hosts)
        document = harness.until(
            "v1/fleet totals equal what was sent, every instance live",
            the_fleet.fleet,
            lambda d: every_one_live(d) and {row["state"] for row in d["instances"]} == {"live"},
            timeout_s=CATCH_UP_S,
        )
        instances = document["instances"]
        assert document["totals"]["instances"] == len(instances) == 5
        assert document["stale"] == [] and document["lost"] == []
        assert sum(row["completed"] for row in instances) == len(sent.ids)
        replicas = Counter(row["replica"] for row in instances)
        assert replicas == {"fleet-host-a": 4, "fleet-host-b": 1}
        # Any worker answers the same (the numbers are the heartbeats', not its own).
        for host in (*hosts, *hosts):
            assert totals_equal(sent, hosts)(the_fleet.fleet(host))

        # /metrics on the gunicorn host: its four workers' share, on every scrape.
        share = host_share(sent, "a")
        harness.until(
            "/metrics has the host's share",
            lambda: scrape(the_fleet),
            share.__eq__,
            timeout_s=CATCH_UP_S,
        )
        scrapes = [scrape(the_fleet) for _ in range(20)]
        assert scrapes == [share] * 20
        assert scrape(the_fleet, "b") == host_share(sent, "b")

        # A clean stop (SIGTERM) loses nothing: every worker drained its archive queue
        # and left the clean-shutdown mark.
        for server in the_fleet.hosts.values():
            harness.stop(server)
        marks = harness.query(
            the_fleet.database_url, "SELECT stopped, count(*) FROM ferrox_stats_instance GROUP BY 1"
        )
        assert dict(marks) == {True: 5}
        (archived,) = harness.query(
            the_fleet.database_url, "SELECT count(*) FROM ferrox_stats_finishedrequest"
        )
        assert archived == (len(sent.ids),)


def test_a_worker_killed_mid_traffic_is_reported_lost_with_what_it_had_not_archived(
    tmp_path: Path, engine_url: str
) -> None:
    # The archive writes only once a minute: what the killed worker had queued is lost,
    # and its last heartbeat says how much.
    with fleet(
        tmp_path, engine_url, second_host=False, FERROX_FLEET_FLUSH_S="60", FERROX_FLEET_LOST_S="3"
    ) as the_fleet:
        master = the_fleet.hosts["a"].pid
        sent = Sent()
        stop = threading.Event()
        errors: list[BaseException] = []

        def traffic(offset: int) -> None:
            with fresh_connections() as http:
                for n in itertools.count(offset, 4):
                    if stop.is_set():
                        return
                    try:
                        tracked(the_fleet, "a", sent, n, http)
                    except (httpx.HTTPError, AssertionError) as exc:  # the killed worker's
                        errors.append(exc)

        threads = [threading.Thread(target=traffic, args=(k,), daemon=True) for k in range(4)]
        for thread in threads:
            thread.start()
        try:
            # A worker that heartbeated having served requests, killed while traffic flows.
            document = harness.until(
                "every worker heartbeated having served some requests",
                the_fleet.fleet,
                lambda d: (
                    len(d["instances"]) == 4
                    and all(row["completed"] >= 3 for row in d["instances"])
                ),
                timeout_s=CATCH_UP_S,
            )
            victim = max(document["instances"], key=lambda row: row["completed"])
            assert victim["pid"] in harness.children(master)  # one of ours, by its pid
            before_kill = scrape(the_fleet)
            os.kill(victim["pid"], signal.SIGKILL)
            harness.until(
                "gunicorn replaced the killed worker",
                lambda: harness.children(master),
                lambda pids: len(pids) == 4 and victim["pid"] not in pids,
                timeout_s=CATCH_UP_S,
            )
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)

        document = harness.until(
            "v1/fleet reports the killed worker lost",
            the_fleet.fleet,
            lambda d: victim["instance"] in {row["instance"] for row in d["lost"]},
            timeout_s=CATCH_UP_S,
        )
        (lost,) = [row for row in document["lost"] if row["instance"] == victim["instance"]]
        (row,) = [row for row in document["instances"] if row["instance"] == victim["instance"]]
        assert row["state"] == "lost"
        # Nothing was archived yet (a minute's flush): all it had finished was pending.
        assert row["pending"] == lost["not_archived"]
        assert 1 <= lost["not_archived"] <= row["completed"]
        # Not summed: the totals are the live workers'.
        live = [r for r in document["instances"] if r["state"] == "live"]
        assert document["totals"]["instances"] == len(live)
        assert document["totals"]["completed"] == sum(r["completed"] for r in live)
        assert victim["instance"] not in {r["instance"] for r in live}
        # The host's counters keep what the killed worker last published.
        assert scrape(the_fleet).requests >= before_kill.requests


SQL_INSTANCES = "SELECT instance FROM ferrox_stats_instance"


def test_a_worker_recycled_by_max_requests_never_sets_the_hosts_counters_back(
    tmp_path: Path, engine_url: str
) -> None:
    with fleet(
        tmp_path,
        engine_url,
        second_host=False,
        workers=2,
        gunicorn_options=("--max-requests", "20"),
    ) as the_fleet:
        master = the_fleet.hosts["a"].pid
        workers_seen = set(harness.children(master))
        announced: set[str] = set()
        sent = Sent()
        scrapes: list[HostCounters] = []
        with fresh_connections(ResendUnread()) as http:
            for n in range(64):
                instance = tracked(the_fleet, "a", sent, n, http)
                if instance not in announced:
                    # A worker recycled within its first heartbeat interval leaves no
                    # row (by design: heartbeat._publish_final), so a fast run could
                    # recycle one unseen. Each instance is let heartbeat once before it
                    # is sent more; read in the database, since a poll through the
                    # server would count toward its --max-requests.
                    announced.add(instance)
                    harness.until(
                        f"{instance} heartbeated",
                        lambda: harness.query(the_fleet.database_url, SQL_INSTANCES),
                        lambda rows: (instance,) in rows,  # noqa: B023 (used at once)
                        timeout_s=CATCH_UP_S,
                    )
                if n % 4 == 3:
                    scrapes.append(scrape(the_fleet, http=http))
                workers_seen |= harness.children(master)
            final = harness.until(
                "/metrics has every request",
                lambda: scrape(the_fleet, http=http),
                host_share(sent, "a").__eq__,
                timeout_s=CATCH_UP_S,
            )
        scrapes.append(final)
        # 64 requests and 16 scrapes, at most 20 per worker: workers were recycled.
        assert len(workers_seen) >= 4, workers_seen
        assert len(announced) >= 4, announced
        for before, after in itertools.pairwise(scrapes):
            assert after.requests >= before.requests, scrapes
            assert after.prompt_tokens >= before.prompt_tokens, scrapes
            assert after.completion_tokens >= before.completion_tokens, scrapes

        # Each recycled worker left with the clean-shutdown mark: stopped, never lost.
        document = harness.until(
            "v1/fleet has no stale or lost instance",
            the_fleet.fleet,
            lambda d: not d["stale"] and not d["lost"],
            timeout_s=CATCH_UP_S,
        )
        running = harness.children(master)
        states = {row["pid"]: row["state"] for row in document["instances"]}
        assert {pid: state for pid, state in states.items() if pid not in running} == {
            pid: "stopped" for pid in states.keys() - running
        }
        assert len(states.keys() - running) >= 2, states


def test_a_stale_instance_is_named_and_not_summed(tmp_path: Path, engine_url: str) -> None:
    hosts = ("a", "b")
    with fleet(tmp_path, engine_url) as the_fleet:
        sent = Sent()
        with ThreadPoolExecutor(4) as pool:
            jobs = [pool.submit(tracked, the_fleet, hosts[n % 2], sent, n) for n in range(40)]
            for job in jobs:
                job.result(timeout=60)
        harness.until(
            "v1/fleet totals equal what was sent",
            the_fleet.fleet,
            totals_equal(sent, hosts),
            timeout_s=CATCH_UP_S,
        )
        host_b = the_fleet.hosts["b"]
        stale_instance = the_fleet.get("b", "/host/whoami").json()["instance"]
        os.kill(host_b.pid, signal.SIGSTOP)  # its heartbeats stop; it is not gone
        try:
            document = harness.until(
                "v1/fleet names the stopped host's instance stale",
                the_fleet.fleet,
                lambda d: stale_instance in d["stale"],
                timeout_s=CATCH_UP_S,
            )
            (row,) = [r for r in document["instances"] if r["instance"] == stale_instance]
            assert row["state"] == "stale"
            assert row["completed"] == sent.requests["b"]
            # Summed: host a's live workers only.
            assert totals_equal(sent, ("a",))(document), document["totals"]
            assert document["totals"]["instances"] == 4
        finally:
            os.kill(host_b.pid, signal.SIGCONT)
        # Back: its heartbeats resume and it is summed again.
        harness.until(
            "the resumed host is live and summed again",
            the_fleet.fleet,
            lambda d: stale_instance not in d["stale"] and totals_equal(sent, hosts)(d),
            timeout_s=CATCH_UP_S,
        )
