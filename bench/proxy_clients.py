"""Which HTTP client a pass-through is built on: httpx or aiohttp, each in a forwarder that
does nothing else, beside the engine directly and our pass-through.

Why the pass-through uses aiohttp (issue 13). Four targets, each a uvicorn subprocess on
127.0.0.1 (uvloop and httptools when importable, for all of them), in interleaved
rounds (``bench/proxy.py``'s harness):

- ``direct``: the simulated engine (``python -m loadgen.engine``);
- ``httpx``, ``aiohttp``: ``bench/proxy_clients_app.py``, an ASGI app that forwards the
  body with that library's pooled client and writes back the answer (a stream as the
  connection hands its bytes over): the floor of any pass-through on that library;
- ``through``: our pass-through (``bench/proxy.py``'s control plane, SQLite archive).

1. added latency of a non-streamed chat (8 tokens) at p50 and p99, each target minus
   direct, median of per-round figures;
2. unpaced streams (the engine sends ``--tokens`` tokens as fast as it can): tokens/s
   from the answer's headers to its last content chunk, ÷ direct, median of per-round
   ratios.

Run from the repo root::

    PYTHONPATH=. python bench/proxy_clients.py [--quick] [--rounds 10] [--requests 200]
        [--stream-rounds 6] [--tokens 1000]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from proxy import (
    CHAT,
    REQUEST_TIMEOUT_S,
    Target,
    chat_body,
    free_port,
    interleave,
    percentiles,
    servers,
    start,
    stop,
    streamed,
    whole,
)

DESCRIPTION = "The pass-through's HTTP client: httpx vs aiohttp forwarders, direct, ours."
QUICK = {"rounds": 5, "requests": 100, "stream_rounds": 4, "tokens": 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--rounds", type=int, default=10, help="latency rounds")
    parser.add_argument("--requests", type=int, default=200, help="per target per round")
    parser.add_argument("--stream-rounds", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=1000, help="per unpaced stream")
    parser.add_argument("--quick", action="store_true", help="fewer rounds (about 30 s)")
    args = parser.parse_args()
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, value)
    extras = [name for name in ("uvloop", "httptools") if importlib.util.find_spec(name)]
    versions = ", ".join(
        f"{name} {importlib.metadata.version(name)}" for name in ("httpx", "aiohttp", "uvicorn")
    )
    print(
        f"python {platform.python_version()}, {versions}, uvicorn with "
        f"{' + '.join(extras) if extras else 'asyncio + h11'}; {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    tmp = Path(tempfile.mkdtemp(prefix="pxclients_"))
    with servers(tmp, "lean") as (engine, plane, secret):
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
            ),
            "FERROX_BENCH_ENGINE_URL": engine.url,
        }
        forwarders = []
        try:
            for library in ("httpx", "aiohttp"):
                port = free_port()
                argv = [
                    sys.executable, "-m", "uvicorn", "--factory",
                    f"proxy_clients_app:with_{library}", "--host", "127.0.0.1",
                    "--port", str(port), "--log-level", "warning", "--no-access-log",
                ]  # fmt: skip
                forwarders.append((library, start(library, argv, port, env, tmp)))
            run(args, engine, plane, secret, forwarders)
        finally:
            for _, server in forwarders:
                stop(server)


def run(args: argparse.Namespace, engine: Any, plane: Any, secret: str, forwarders: Any) -> None:
    options: dict[str, Any] = {"timeout": REQUEST_TIMEOUT_S, "trust_env": False}
    json_type = {"Content-Type": "application/json"}
    targets = {"direct": Target("direct", httpx.Client(base_url=engine.url, **options))}
    for library, server in forwarders:
        targets[library] = Target(library, httpx.Client(base_url=server.url, **options))
    targets["through"] = Target(
        "through",
        httpx.Client(
            base_url=plane.url,
            headers={**json_type, "Authorization": f"Bearer {secret}"},
            **options,
        ),
    )
    for target in targets.values():
        target.client.headers.update(json_type)
    pids = (plane.process.pid, engine.process.pid)

    body = chat_body(stream=False, tokens=8)
    answers = {
        name: t.client.post(CHAT, content=body).json()["choices"] for name, t in targets.items()
    }
    assert all(a == answers["direct"] for a in answers.values()), answers
    for target in targets.values():
        for _ in range(args.requests):
            whole(target, body)
    tallies = interleave(
        {name: partial(whole, t, body) for name, t in targets.items()},
        args.rounds,
        args.requests,
        pids,
    )
    print(
        f"\n1. Non-streamed chat, 8 tokens: {args.requests} requests x {args.rounds} rounds "
        "per target; added = target - direct, per round, median (min-max)\n\n"
        "| target | p50 ms | added at p50 ms | added at p99 ms |\n|---|---:|---:|---:|"
    )
    direct = tallies["direct"].per_round
    for name, tally in tallies.items():
        p50 = statistics.median(tally.results) / 1e6
        if name == "direct":
            print(f"| direct | {p50:.3f} | | |")
            continue
        at_p50 = [
            (percentiles(t)[0] - percentiles(d)[0]) / 1e6
            for d, t in zip(direct, tally.per_round, strict=True)
        ]
        at_p99 = [
            (percentiles(t)[2] - percentiles(d)[2]) / 1e6
            for d, t in zip(direct, tally.per_round, strict=True)
        ]
        print(f"| {name} | {p50:.3f} | {spread(at_p50)} | {spread(at_p99)} |")

    body = chat_body(stream=True, tokens=args.tokens)
    texts = {name: streamed(t, body, keep_text=True).text for name, t in targets.items()}
    assert all(text == texts["direct"] and text for text in texts.values()), "the streams differ"
    tallies = interleave(
        {name: partial(streamed, t, body) for name, t in targets.items()},
        args.stream_rounds,
        1,
        pids,
    )
    print(
        f"\n2. Streamed chat, {args.tokens} tokens, no decoding time: {args.stream_rounds} "
        "streams per target\n\n| target | tok/s median | ÷ direct, median of rounds (min-max) |"
        "\n|---|---:|---:|"
    )
    direct = tallies["direct"].per_round
    for name, tally in tallies.items():
        rate = statistics.median(s.tokens_per_s for s in tally.results)
        ratios = [
            t[0].tokens_per_s / d[0].tokens_per_s
            for d, t in zip(direct, tally.per_round, strict=True)
        ]
        print(
            f"| {name} | {rate:,.0f} | {statistics.median(ratios):.2f}x "
            f"({min(ratios):.2f}-{max(ratios):.2f}) |"
        )


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


if __name__ == "__main__":
    main()
