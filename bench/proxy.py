"""The OpenAI-compatible pass-through against the simulated engine: through it vs directly.

Two servers on free ports of 127.0.0.1, each a uvicorn subprocess (asyncio and h11, or
uvloop and httptools when they are importable):

- the simulated engine, ``python -m loadgen.engine`` (no time to first
  token, no decoding time unless a request's ``"sim"`` field asks for them);
- a control plane serving ``ferrox_stats.proxy`` under ASGI with ``bench/proxy_settings.py``:
  ``DEBUG`` off, the demo project's middleware (minus its demo traffic), a SQLite file
  in a temp directory (migrated with ``manage.py migrate``), the default archive sink
  (every request is queued for the archive and written by its thread), the engine as
  its one upstream. Callers send an API token with the infer scope, issued with
  ``manage.py ferrox_stats_token create bench --infer --no-read``: the real path.

The same body is sent to the engine (``direct``, the baseline) and to the control plane
(``through``), each with its own keep-alive ``httpx.Client``, in interleaved rounds
whose order alternates, after a warm-up, with gc off while a round runs:

1. latency of a non-streamed chat completion with a small answer (8 tokens, no TTFT, no
   decoding time): p50/p90/p99 client-observed, the added ms at p50 and the ratio;
2. TTFT of a streamed chat, the engine waiting ``--ttft-ms`` before the first token:
   time from sending the request to the first chunk with content, p50 difference;
3. streamed tokens/s from the answer's headers to its last content chunk, client-observed:
   ``--long-tokens`` with no decoding time (the engine sends as fast as it can, so both
   measure the relay's own throughput) and ``--paced-tokens`` at ``--paced-rate`` tokens/s.

Both answers are checked to carry the same content before timing. The CPU the control
plane and the engine spent (all threads, ``/proc/<pid>/stat``, 10 ms ticks) is summed
over each variant's rounds and shown per request. Run from the repo root::

    PYTHONPATH=. python bench/proxy.py [--rounds 10] [--requests 200] [--ttft-rounds 8]
        [--ttft-requests 20] [--ttft-ms 20] [--long-rounds 15] [--long-tokens 2000]
        [--paced-rounds 3] [--paced-tokens 400] [--paced-rate 200]

About a minute with the defaults. Both servers are stopped by pid on the way out.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
from host import runqueue_ns

DESCRIPTION = "The pass-through vs the simulated engine directly: latency, TTFT, tokens/s."

REPO = Path(__file__).resolve().parent.parent
MODEL = "sim-small"
CHAT = "/v1/chat/completions"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0  # the archive writer drains its queue at exit (10 s deadline)
REQUEST_TIMEOUT_S = 60.0
GOAL_ADDED_MS = 1.0  # at p50, c=1 (issue 13)
GOAL_ADDED_P99_MS = 2.0
GOAL_STREAM_RATIO = 0.8

# A chunk with content; the chat stream's first chunk carries the role and "content":"".
CONTENT = b'"content":"'
EMPTY_CONTENT = b'"content":""'

# What --quick runs: every part, fewer and shorter rounds (under a minute in all).
QUICK = {
    "rounds": 6,
    "requests": 100,
    "warmup": 50,
    "ttft_rounds": 4,
    "ttft_requests": 10,
    "long_rounds": 9,
    "long_tokens": 1000,
    "paced_rounds": 2,
    "paced_tokens": 100,
    "concurrent_rounds": 3,
    "concurrent_tokens": 200,
}

# ---------------------------------------------------------------------------------------
# The two servers.


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A uvicorn subprocess this script started, and where its output goes."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 20) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


def start(name: str, argv: list[str], port: int, env: dict[str, str], tmp: Path) -> Server:
    """Start ``argv`` and wait until it answers HTTP on ``port``; stopped again on failure."""
    log = tmp / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(name, f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:  # any HTTP answer (a 404 on /) means it is serving
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{server.tail()}")
            try:
                httpx.get(server.url + "/", timeout=1.0, trust_env=False)
                return server
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not serve within {START_TIMEOUT_S} s") from None
                time.sleep(0.05)
    except BaseException:  # Ctrl-C included: leave no server behind
        stop(server)
        raise


def stop(server: Server) -> None:
    """Stop the subprocess by its pid (SIGTERM: the control plane drains its archive
    queue at lifespan shutdown, ``ferrox_stats.asgi.wrap``), then kill it if it will not go.
    """
    if server.process.poll() is not None:
        return
    server.process.send_signal(signal.SIGTERM)
    try:
        server.process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


@contextmanager
def servers(tmp: Path, stack: str) -> Iterator[tuple[Server, Server, str]]:
    """The engine, the control plane in front of it, and an infer token's secret."""
    engine_port, plane_port = free_port(), free_port()
    env = {
        **os.environ,
        # The caller's PYTHONPATH after ours: a side install (uvloop, say) reaches the servers.
        "PYTHONPATH": os.pathsep.join(
            [str(REPO), str(REPO / "bench"), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
        "DJANGO_SETTINGS_MODULE": "proxy_settings",
        "FERROX_BENCH_DB": str(tmp / "control_plane.sqlite3"),
        "FERROX_BENCH_ENGINE_URL": f"http://127.0.0.1:{engine_port}/v1",
    }
    manage(env, "migrate", "--verbosity", "0")
    secret = manage(env, "ferrox_stats_token", "create", "bench", "--infer", "--no-read")
    secret = secret.strip().splitlines()[-1]
    started: list[Server] = []
    try:
        engine_argv = [sys.executable, "-m", "loadgen.engine", "--host", "127.0.0.1"]
        started.append(
            start("engine", [*engine_argv, "--port", str(engine_port)], engine_port, env, tmp)
        )
        plane_argv = [
            sys.executable, "-m", "uvicorn", "--factory", f"proxy_app:{stack}",
            "--host", "127.0.0.1", "--port", str(plane_port),
            "--log-level", "warning", "--lifespan", "on", "--no-access-log",
        ]  # fmt: skip
        started.append(start("control plane", plane_argv, plane_port, env, tmp))
        yield started[0], started[1], secret
    finally:
        for server in reversed(started):
            stop(server)


def cpu_ns(pid: int) -> int:
    """CPU ns process ``pid`` has used, all its threads, exited ones too (10 ms ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------
# The client side: one request, one stream.


@dataclass
class Target:
    """Where a variant sends its requests: the engine, or the control plane with a key."""

    name: str
    client: httpx.Client
    sent: int = 0


def chat_body(*, stream: bool, **sim: float) -> bytes:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me about the benchmark."}],
        "stream": stream,
        "sim": sim,
    }
    return json.dumps(body).encode()


def whole(target: Target, body: bytes) -> int:
    """ns from sending a non-streamed request to having its whole answer."""
    target.sent += 1
    started = time.perf_counter_ns()
    response = target.client.post(CHAT, content=body)
    elapsed = time.perf_counter_ns() - started
    if response.status_code != 200:
        raise RuntimeError(f"{target.name}: {response.status_code} {response.text[:300]}")
    return elapsed


@dataclass
class StreamTiming:
    """One streamed answer as the client saw it: ns since the request was sent."""

    headers: int  # the answer's status line and headers
    first_byte: int
    token_at: list[int]  # when each content chunk arrived
    end: int
    text: bytes  # the content chunks' bodies, to compare the variants

    @property
    def ttft(self) -> int:
        return self.token_at[0]

    @property
    def tokens_per_s(self) -> float:
        """Content chunks per second from the answer's start (its headers) to the last
        one. Not from the first content chunk: a relay that hands on events in bursts
        (all that arrived while it wrote the last one) would be credited for starting
        its count late, with many tokens in its first burst."""
        span = self.token_at[-1] - self.headers
        return len(self.token_at) * 1e9 / span if span > 0 else float("inf")


def streamed(target: Target, body: bytes, *, keep_text: bool = False) -> StreamTiming:
    target.sent += 1
    clock = time.perf_counter_ns
    started = clock()
    first_byte = 0
    token_at: list[int] = []
    texts: list[str] = []
    with target.client.stream("POST", CHAT, content=body) as response:
        headers = clock() - started
        if response.status_code != 200:
            response.read()
            raise RuntimeError(f"{target.name}: {response.status_code} {response.text[:300]}")
        pending = b""
        for data in response.iter_raw():
            now = clock() - started
            first_byte = first_byte or now
            *events, pending = (pending + data).split(b"\n\n")
            for event in events:
                if CONTENT in event and EMPTY_CONTENT not in event:
                    token_at.append(now)
                    if keep_text:
                        texts.append(json.loads(event[5:])["choices"][0]["delta"]["content"])
    end = clock() - started
    if not token_at:
        raise RuntimeError(f"{target.name}: a stream without content")
    return StreamTiming(headers, first_byte, token_at, end, "".join(texts).encode())


# ---------------------------------------------------------------------------------------
# The harness: interleaved rounds, alternating order, gc off while a round runs.


@dataclass
class Tally:
    """What one variant gave over all rounds, and what the servers spent on it."""

    results: list[Any] = field(default_factory=list)
    per_round: list[list[Any]] = field(default_factory=list)
    plane_cpu_ns: int = 0
    engine_cpu_ns: int = 0


def interleave(
    calls: Mapping[str, Callable[[], Any]], rounds: int, per_round: int, pids: tuple[int, int]
) -> dict[str, Tally]:
    names = list(calls)
    tallies = {name: Tally() for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            call, tally = calls[name], tallies[name]
            gc.collect()
            gc.disable()
            try:
                plane, engine = cpu_ns(pids[0]), cpu_ns(pids[1])
                results = [call() for _ in range(per_round)]
                tally.plane_cpu_ns += cpu_ns(pids[0]) - plane
                tally.engine_cpu_ns += cpu_ns(pids[1]) - engine
            finally:
                gc.enable()
            tally.results.extend(results)
            tally.per_round.append(results)
    return tallies


def percentiles(values: list[float]) -> tuple[float, float, float]:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return statistics.median(values), cuts[89], cuts[98]


def cpu_per_call_us(tally: Tally) -> str:
    calls = len(tally.results)
    return f"{tally.plane_cpu_ns / calls / 1e3:.0f} + {tally.engine_cpu_ns / calls / 1e3:.0f}"


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


# ---------------------------------------------------------------------------------------
# The three parts.


def part_latency(
    args: argparse.Namespace, targets: dict[str, Target], pids: tuple[int, int]
) -> tuple[float, float]:
    body = chat_body(stream=False, tokens=8)
    answers: dict[str, Any] = {}
    for name, target in targets.items():
        target.sent += 1
        answers[name] = target.client.post(CHAT, content=body).json()
    assert answers["direct"]["choices"] == answers["through"]["choices"], answers
    for target in targets.values():
        for _ in range(args.warmup):
            whole(target, body)
    calls = {name: partial(whole, t, body) for name, t in targets.items()}
    tallies = interleave(calls, args.rounds, args.requests, pids)
    ms = {name: [ns / 1e6 for ns in tally.results] for name, tally in tallies.items()}
    p = {name: percentiles(values) for name, values in ms.items()}
    print(
        f"\n1. Non-streamed chat, 8 tokens, no TTFT or decoding time: {args.requests} requests"
        f" x {args.rounds} rounds per variant, after {args.warmup} warm-up"
    )
    print(
        "\n| variant | p50 ms | p90 ms | p99 ms | requests/s (1 client) "
        "| CPU µs/request: control plane + engine |\n|---|---:|---:|---:|---:|---:|"
    )
    for name, (p50, p90, p99) in p.items():
        per_s = 1000 / statistics.mean(ms[name])
        print(
            f"| {name} | {p50:.3f} | {p90:.3f} | {p99:.3f} | {per_s:.0f} "
            f"| {cpu_per_call_us(tallies[name])} |"
        )
    added = [b - a for a, b in zip(p["direct"], p["through"], strict=True)]
    pairs = list(zip(tallies["direct"].per_round, tallies["through"].per_round, strict=True))
    # Round by round (each round's two variants ran back to back), then the median.
    at_p50 = [(statistics.median(t) - statistics.median(d)) / 1e6 for d, t in pairs]
    at_p99 = [(percentiles(t)[2] - percentiles(d)[2]) / 1e6 for d, t in pairs]
    ratios = [statistics.median(t) / statistics.median(d) for d, t in pairs]
    print(
        f"| **added** (all requests) | **{added[0]:.3f}** | {added[1]:.3f} | {added[2]:.3f} | | |\n"
        f"per round, median (min-max): added at p50 {statistics.median(at_p50):.3f} ms "
        f"({min(at_p50):.3f}-{max(at_p50):.3f}); added at p99 {statistics.median(at_p99):.3f} ms "
        f"({min(at_p99):.3f}-{max(at_p99):.3f}); through ÷ direct at p50 "
        f"{statistics.median(ratios):.2f}x"
    )
    return statistics.median(at_p50), statistics.median(at_p99)


def part_ttft(args: argparse.Namespace, targets: dict[str, Target], pids: tuple[int, int]) -> float:
    body = chat_body(stream=True, tokens=16, ttft_ms=args.ttft_ms)
    texts = {name: streamed(t, body, keep_text=True).text for name, t in targets.items()}
    assert texts["direct"] == texts["through"] and texts["direct"], texts
    for target in targets.values():
        for _ in range(5):
            streamed(target, body)
    calls = {name: partial(streamed, t, body) for name, t in targets.items()}
    tallies = interleave(calls, args.ttft_rounds, args.ttft_requests, pids)
    print(
        f"\n2. Streamed chat, 16 tokens, the engine waits {args.ttft_ms:g} ms before the first: "
        f"{args.ttft_requests} streams x {args.ttft_rounds} rounds per variant"
    )
    print(
        "\n| variant | first byte p50 ms | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms "
        "| whole stream p50 ms | CPU µs/stream: control plane + engine |"
        "\n|---|---:|---:|---:|---:|---:|---:|"
    )
    p50: dict[str, float] = {}
    for name, tally in tallies.items():
        ttft = percentiles([s.ttft / 1e6 for s in tally.results])
        first = statistics.median(s.first_byte / 1e6 for s in tally.results)
        end = statistics.median(s.end / 1e6 for s in tally.results)
        p50[name] = ttft[0]
        print(
            f"| {name} | {first:.2f} | {ttft[0]:.2f} | {ttft[1]:.2f} | {ttft[2]:.2f} | {end:.2f} "
            f"| {cpu_per_call_us(tally)} |"
        )
    rounds_added = [
        statistics.median(s.ttft for s in t) / 1e6 - statistics.median(s.ttft for s in d) / 1e6
        for d, t in zip(tallies["direct"].per_round, tallies["through"].per_round, strict=True)
    ]
    added = statistics.median(rounds_added)
    print(
        f"TTFT added at p50, median of rounds: {added:.2f} ms "
        f"({min(rounds_added):.2f}-{max(rounds_added):.2f}); all streams: "
        f"{p50['through'] - p50['direct']:.2f} ms"
    )
    return added


def part_tokens(
    args: argparse.Namespace, targets: dict[str, Target], pids: tuple[int, int], *, paced: bool
) -> float:
    if paced:
        tokens, rounds, label = args.paced_tokens, args.paced_rounds, f"{args.paced_rate:g} tok/s"
        body = chat_body(stream=True, tokens=tokens, tokens_per_s=args.paced_rate)
    else:
        tokens, rounds, label = args.long_tokens, args.long_rounds, "no decoding time"
        body = chat_body(stream=True, tokens=tokens)
    texts = {name: streamed(t, body, keep_text=True).text for name, t in targets.items()}
    assert texts["direct"] == texts["through"] and texts["direct"], "the streams differ"
    calls = {name: partial(streamed, t, body) for name, t in targets.items()}
    tallies = interleave(calls, rounds, 1, pids)
    print(f"\n3{'b' if paced else 'a'}. Streamed chat, {tokens} tokens, {label}: {rounds} streams")
    print(
        "\n| variant | tok/s median | tok/s min-max | gap p99 ms "
        "| CPU ms/stream: control plane + engine |\n|---|---:|---:|---:|---:|"
    )
    rate: dict[str, float] = {}
    for name, tally in tallies.items():
        assert all(len(s.token_at) == tokens for s in tally.results), name
        rates = [s.tokens_per_s for s in tally.results]
        gaps = [b - a for s in tally.results for a, b in pairwise(s.token_at)]
        rate[name] = statistics.median(rates)
        cpu = f"{tally.plane_cpu_ns / rounds / 1e6:.0f} + {tally.engine_cpu_ns / rounds / 1e6:.0f}"
        print(
            f"| {name} | {rate[name]:,.0f} | {min(rates):,.0f}-{max(rates):,.0f} "
            f"| {percentiles(gaps)[2] / 1e6:.2f} | {cpu} |"
        )
    ratios = [
        t[0].tokens_per_s / d[0].tokens_per_s
        for d, t in zip(tallies["direct"].per_round, tallies["through"].per_round, strict=True)
    ]
    ratio = statistics.median(ratios)
    print(f"through ÷ direct, median of rounds: {ratio:.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")
    return ratio


def concurrent_streams(target: Target, body: bytes, streams: int) -> tuple[int, int]:
    """``streams`` streams at once, each on its own connection (an asyncio client): the
    content chunks received in all, and ns from sending the first to the last's end."""
    target.sent += streams

    async def one(client: httpx.AsyncClient) -> int:
        tokens, pending = 0, b""
        async with client.stream("POST", CHAT, content=body) as response:
            if response.status_code != 200:
                raise RuntimeError(f"{target.name}: {response.status_code}")
            async for data in response.aiter_raw():
                *events, pending = (pending + data).split(b"\n\n")
                tokens += sum(CONTENT in e and EMPTY_CONTENT not in e for e in events)
        return tokens

    async def run() -> tuple[int, int]:
        async with httpx.AsyncClient(
            base_url=target.client.base_url,
            headers=target.client.headers,
            limits=httpx.Limits(max_connections=streams),
            timeout=REQUEST_TIMEOUT_S,
            trust_env=False,
        ) as client:
            started = time.perf_counter_ns()
            counts = await asyncio.gather(*(one(client) for _ in range(streams)))
            return sum(counts), time.perf_counter_ns() - started

    return asyncio.run(run())


def part_concurrent(
    args: argparse.Namespace, targets: dict[str, Target], pids: tuple[int, int]
) -> float:
    streams, tokens = args.concurrency, args.concurrent_tokens
    body = chat_body(stream=True, tokens=tokens)
    calls = {name: partial(concurrent_streams, t, body, streams) for name, t in targets.items()}
    tallies = interleave(calls, args.concurrent_rounds, 1, pids)
    print(
        f"\n3c. {streams} streamed chats at once, {tokens} tokens each, no decoding time: "
        f"{args.concurrent_rounds} rounds; tokens/s over all streams, first sent to last ended"
    )
    print(
        "\n| variant | tok/s median | tok/s min-max | CPU ms/round: control plane + engine "
        "|\n|---|---:|---:|---:|"
    )
    for name, tally in tallies.items():
        assert all(n == streams * tokens for n, _ in tally.results), name
        rates = [n * 1e9 / ns for n, ns in tally.results]
        rounds = len(tally.results)
        cpu = f"{tally.plane_cpu_ns / rounds / 1e6:.0f} + {tally.engine_cpu_ns / rounds / 1e6:.0f}"
        print(
            f"| {name} | {statistics.median(rates):,.0f} "
            f"| {min(rates):,.0f}-{max(rates):,.0f} | {cpu} |"
        )
    ratios = [
        (t[0][0] / t[0][1]) / (d[0][0] / d[0][1])
        for d, t in zip(tallies["direct"].per_round, tallies["through"].per_round, strict=True)
    ]
    ratio = statistics.median(ratios)
    print(f"through ÷ direct, median of rounds: {ratio:.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")
    return ratio


def archived_rows(tmp: Path) -> int:
    with sqlite3.connect(tmp / "control_plane.sqlite3") as db:
        return int(db.execute("SELECT COUNT(*) FROM ferrox_stats_finishedrequest").fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--rounds", type=int, default=10, help="latency rounds")
    parser.add_argument("--requests", type=int, default=200, help="per variant per round")
    parser.add_argument("--warmup", type=int, default=100, help="latency warm-up requests")
    parser.add_argument("--ttft-rounds", type=int, default=8)
    parser.add_argument("--ttft-requests", type=int, default=20, help="per variant per round")
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--long-rounds", type=int, default=15)
    parser.add_argument("--long-tokens", type=int, default=2000)
    parser.add_argument("--paced-rounds", type=int, default=3)
    parser.add_argument("--paced-tokens", type=int, default=400)
    parser.add_argument("--paced-rate", type=float, default=200.0, help="tokens/s")
    parser.add_argument("--concurrency", type=int, default=32, help="streams at once in 3c")
    parser.add_argument("--concurrent-rounds", type=int, default=5)
    parser.add_argument("--concurrent-tokens", type=int, default=500, help="per stream in 3c")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer rounds and shorter streams (under a minute): for make bench and re-runs",
    )
    parser.add_argument(
        "--stack",
        choices=("lean", "full"),
        default="lean",
        help="the pass-through without the project's middleware (ferrox_stats.asgi.wrap's "
        "default) or behind all of it",
    )
    parser.add_argument(
        "--litellm",
        action="store_true",
        help="then the three-way run of bench/proxy_litellm.py (LiteLLM's proxy beside ours)",
    )
    args = parser.parse_args()
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, value)
    # A SIGTERM ends the run like Ctrl-C does: through the finally blocks that stop the servers.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    versions = ", ".join(
        f"{name} {importlib.metadata.version(name)}" for name in ("django", "uvicorn", "aiohttp")
    )
    # What uvicorn picks (for both servers) when they are importable; else asyncio and h11.
    extras = [name for name in ("uvloop", "httptools") if importlib.util.find_spec(name)]
    versions += f", uvicorn with {' + '.join(extras) if extras else 'asyncio + h11'}"
    print(f"control plane stack: {args.stack}")
    print(
        f"python {platform.python_version()}, {versions}; {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    tmp = Path(tempfile.mkdtemp(prefix="pxbench_"))
    started, waited_before = time.perf_counter(), runqueue_ns()
    try:
        with servers(tmp, args.stack) as (engine, plane, secret):
            pids = (plane.process.pid, engine.process.pid)
            options: dict[str, Any] = {"timeout": REQUEST_TIMEOUT_S, "trust_env": False}
            headers = {"Content-Type": "application/json"}
            targets = {
                "direct": Target(
                    "direct", httpx.Client(base_url=engine.url, headers=headers, **options)
                ),
                "through": Target(
                    "through",
                    httpx.Client(
                        base_url=plane.url,
                        headers={**headers, "Authorization": f"Bearer {secret}"},
                        **options,
                    ),
                ),
            }
            try:
                added, added_p99 = part_latency(args, targets, pids)
                ttft_added = part_ttft(args, targets, pids)
                long_ratio = part_tokens(args, targets, pids, paced=False)
                paced_ratio = part_tokens(args, targets, pids, paced=True)
                concurrent_ratio = part_concurrent(args, targets, pids)
            finally:
                for target in targets.values():
                    target.client.close()
        problems = [line for line in plane.tail(200).splitlines() if line.strip()]
        rows = archived_rows(tmp)
    except BaseException:
        for name in ("engine", "control plane"):
            log = tmp / f"{name}.log"
            if log.exists() and log.stat().st_size:
                print(f"--- {name} log:\n{log.read_text(errors='replace')[-3000:]}")
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    wall = time.perf_counter() - started
    waited = (runqueue_ns() - waited_before) / 1e9
    print(
        f"\nadded latency at p50: {added:.3f} ms (goal ≤ {GOAL_ADDED_MS:g} ms): "
        f"{verdict(added <= GOAL_ADDED_MS)}; at p99: {added_p99:.3f} ms "
        f"(goal ≤ {GOAL_ADDED_P99_MS:g} ms): {verdict(added_p99 <= GOAL_ADDED_P99_MS)}"
    )
    print(f"TTFT added at p50: {ttft_added:.2f} ms")
    for label, ratio in (
        ("no decoding time, c=1", long_ratio),
        (f"no decoding time, c={args.concurrency}", concurrent_ratio),
        (f"{args.paced_rate:g} tok/s", paced_ratio),
    ):
        print(
            f"streamed tokens/s through ÷ direct, {label}: {ratio:.2f}x "
            f"(goal ≥ {GOAL_STREAM_RATIO}x): {verdict(ratio >= GOAL_STREAM_RATIO)}"
        )
    print(
        f"archived rows after shutdown: {rows} of {targets['through'].sent} requests sent "
        f"through; control plane log lines: {len(problems)}"
    )
    for line in problems[:10]:
        print(f"  {line}")
    print(
        f"total {wall:.0f} s, load average now {os.getloadavg()[0]:.1f}; this process waited "
        f"{waited:.1f} s ({100 * waited / wall:.0f}% of the run) for a free core"
    )
    if args.litellm:
        import proxy_litellm

        print("\n--- LiteLLM's proxy beside ours (bench/proxy_litellm.py)")
        proxy_litellm.main([])


if __name__ == "__main__":
    main()
