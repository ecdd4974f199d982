"""Our pass-through beside LiteLLM's proxy, both in front of the same simulated engine.

Three servers on free ports of 127.0.0.1, as ``bench/proxy.py`` starts them (its
``servers()``: the simulated engine, our control plane under uvicorn with an infer
token and the default archive sink), plus LiteLLM's proxy from its own venv
(``--litellm-venv``, made by ``scripts/litellm-venv.sh``; skipped with a message when it
is missing). LiteLLM runs in the strongest fair configuration an operator would give
it: one ``openai/`` model pointing at the engine, a master key (our side checks a
bearer token too) and no database, no spend or error logs, no callbacks, message
logging off, the local model cost map (no fetch at start), log level ERROR, one worker
(ours is one uvicorn process), and uvloop, which it uses when installed (installed by
the script; our control plane uses what the main venv has).

The same body goes to the engine (``direct``), through ours (``ferrox``) and through
LiteLLM (``litellm``), each with its own keep-alive ``httpx.Client``, in interleaved
rounds whose order rotates, gc off while a round runs (``bench/proxy.py``'s client code):

1. a non-streamed chat completion with a small answer: p50/p99 client-observed, the
   latency each proxy adds to ``direct`` at p50 and p99;
2. TTFT of a streamed chat whose first token the engine holds ``--ttft-ms``: added p50;
3. streamed tokens/s with no decoding time (the relay's own throughput), ÷ direct.

Each figure of ours is set beside LiteLLM's as a ratio (added latency: ours ÷ theirs,
below 1 is less added; tokens/s: ours ÷ theirs, above 1 is faster). Run from the repo
root::

    PYTHONPATH=. python bench/proxy_litellm.py [--quick] [--litellm-venv DIR]
        [--rounds 10] [--requests 200] [--long-rounds 5] [--long-tokens 2000]

Every server is stopped by pid on the way out.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import proxy
from proxy import CHAT, REQUEST_TIMEOUT_S, Server, Target, chat_body, streamed, whole

DESCRIPTION = "Our pass-through vs LiteLLM's proxy, same engine: added latency, tokens/s."
DEFAULT_VENV = "/work/venvs/litellm"
MASTER_KEY = "sk-ferrox-bench"
START_TIMEOUT_S = 180.0  # LiteLLM imports a lot before it serves

CONFIG = """\
model_list:
  - model_name: {model}
    litellm_params:
      model: openai/{model}
      api_base: {engine}/v1
      api_key: none
litellm_settings:
  drop_params: true
  turn_off_message_logging: true
  callbacks: []
  success_callback: []
  failure_callback: []
general_settings:
  master_key: {key}
  disable_spend_logs: true
  disable_error_logs: true
"""


def litellm_version(venv: Path) -> str | None:
    """LiteLLM's version in ``venv``, or None when it has none."""
    python = venv / "bin" / "python"
    if not python.exists():
        return None
    done = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def start_litellm(venv: Path, engine: Server, tmp: Path) -> Server:
    port = proxy.free_port()
    config = tmp / "litellm.yaml"
    config.write_text(CONFIG.format(model=proxy.MODEL, engine=engine.url, key=MASTER_KEY))
    env = {
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": os.environ.get("HOME", str(tmp)),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
    }
    argv = [
        str(venv / "bin" / "litellm"), "--config", str(config), "--host", "127.0.0.1",
        "--port", str(port), "--num_workers", "1",
    ]  # fmt: skip
    log = tmp / "litellm.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server("litellm", f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"litellm exited with {process.returncode}:\n{server.tail()}")
            try:
                httpx.get(f"{server.url}/health/liveliness", timeout=2.0, trust_env=False)
                return server
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"litellm did not serve within {START_TIMEOUT_S} s"
                    ) from None
                time.sleep(0.2)
    except BaseException:
        proxy.stop(server)
        raise


def interleave(
    calls: Mapping[str, Callable[[], Any]],
    rounds: int,
    per_round: int,
    pids: Mapping[str, tuple[int, ...]],
) -> tuple[dict[str, list[Any]], dict[str, int]]:
    """Each variant's results over rotating rounds, and the CPU ns of its servers."""
    names = list(calls)
    results: dict[str, list[Any]] = {name: [] for name in names}
    cpu = dict.fromkeys(names, 0)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            gc.collect()
            gc.disable()
            try:
                before = sum(proxy.cpu_ns(pid) for pid in pids[name])
                results[name].extend(calls[name]() for _ in range(per_round))
                cpu[name] += sum(proxy.cpu_ns(pid) for pid in pids[name]) - before
            finally:
                gc.enable()
    return results, cpu


def p50_p99(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), statistics.quantiles(values, n=100, method="inclusive")[98]


def compare(
    args: argparse.Namespace, targets: dict[str, Target], pids: Mapping[str, tuple[int, ...]]
) -> dict[str, float]:
    figures: dict[str, float] = {}
    body = chat_body(stream=False, tokens=8)
    contents = {
        name: t.client.post(CHAT, content=body).json()["choices"][0]["message"]["content"]
        for name, t in targets.items()
    }
    assert len(set(contents.values())) == 1, contents
    for target in targets.values():
        for _ in range(args.warmup):
            whole(target, body)
    results, cpu = interleave(
        {name: partial(whole, t, body) for name, t in targets.items()},
        args.rounds,
        args.requests,
        pids,
    )
    p = {name: p50_p99([ns / 1e6 for ns in values]) for name, values in results.items()}
    print(
        f"\n1. Non-streamed chat, 8 tokens: {args.requests} requests x {args.rounds} rounds per "
        "variant\n\n| variant | p50 ms | p99 ms | added p50 ms | added p99 ms "
        "| CPU µs/request (proxy + engine) |\n|---|---:|---:|---:|---:|---:|"
    )
    for name, (p50, p99) in p.items():
        added = (p50 - p["direct"][0], p99 - p["direct"][1])
        print(
            f"| {name} | {p50:.3f} | {p99:.3f} | {added[0]:.3f} | {added[1]:.3f} "
            f"| {cpu[name] / len(results[name]) / 1e3:.0f} |"
        )
        figures[f"{name} added p50"], figures[f"{name} added p99"] = added
    for q in ("p50", "p99"):
        ours, theirs = figures[f"ferrox added {q}"], figures[f"litellm added {q}"]
        print(
            f"added latency at {q}, ferrox ÷ litellm: {ours / theirs:.2f}x "
            f"({ours:.3f} vs {theirs:.3f} ms)"
        )

    body = chat_body(stream=True, tokens=16, ttft_ms=args.ttft_ms)
    results, _ = interleave(
        {name: partial(streamed, t, body) for name, t in targets.items()},
        args.ttft_rounds,
        args.ttft_requests,
        pids,
    )
    ttft = {name: statistics.median(s.ttft / 1e6 for s in v) for name, v in results.items()}
    print(
        f"\n2. TTFT, the engine holds the first token {args.ttft_ms:g} ms: "
        f"{args.ttft_requests} streams x {args.ttft_rounds} rounds; p50 ms: "
        + ", ".join(f"{name} {value:.2f}" for name, value in ttft.items())
    )
    ours, theirs = ttft["ferrox"] - ttft["direct"], ttft["litellm"] - ttft["direct"]
    print(
        f"TTFT added at p50, ferrox ÷ litellm: {ours / theirs:.2f}x ({ours:.2f} vs {theirs:.2f} ms)"
    )

    body = chat_body(stream=True, tokens=args.long_tokens)
    results, cpu = interleave(
        {name: partial(streamed, t, body) for name, t in targets.items()},
        args.long_rounds,
        1,
        pids,
    )
    rate = {name: statistics.median(s.tokens_per_s for s in v) for name, v in results.items()}
    print(
        f"\n3. Streamed chat, {args.long_tokens} tokens, no decoding time: {args.long_rounds} "
        "streams per variant\n\n| variant | tok/s median | ÷ direct | CPU ms/stream (proxy + "
        "engine) |\n|---|---:|---:|---:|"
    )
    for name, value in rate.items():
        print(
            f"| {name} | {value:,.0f} | {value / rate['direct']:.2f}x "
            f"| {cpu[name] / args.long_rounds / 1e6:.0f} |"
        )
        figures[f"{name} tok/s ratio"] = value / rate["direct"]
    print(f"streamed tokens/s, ferrox ÷ litellm: {rate['ferrox'] / rate['litellm']:.2f}x")
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--litellm-venv", type=Path, default=Path(DEFAULT_VENV))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=200, help="per variant per round")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--ttft-rounds", type=int, default=5)
    parser.add_argument("--ttft-requests", type=int, default=20)
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--long-rounds", type=int, default=5)
    parser.add_argument("--long-tokens", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="about a minute")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.requests, args.warmup = 3, 50, 20
        args.ttft_rounds, args.ttft_requests = 2, 5
        args.long_rounds, args.long_tokens = 2, 500
    version = litellm_version(args.litellm_venv)
    if version is None:
        print(
            f"proxy_litellm.py: skipped, no litellm in {args.litellm_venv} (make it with "
            "scripts/litellm-venv.sh, or pass --litellm-venv)"
        )
        return
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    uvloop = "with uvloop" if _has_uvloop(args.litellm_venv) else "without uvloop"
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, python "
        f"{platform.python_version()}, litellm {version} (its own venv, {uvloop}), "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"
    )
    tmp = Path(tempfile.mkdtemp(prefix="pxlitellm_"))
    try:
        with proxy.servers(tmp, "lean") as (engine, plane, secret):
            litellm = start_litellm(args.litellm_venv, engine, tmp)
            try:
                options: dict[str, Any] = {"timeout": REQUEST_TIMEOUT_S, "trust_env": False}
                json_type = {"Content-Type": "application/json"}

                def client(server: Server, key: str | None) -> httpx.Client:
                    auth = {"Authorization": f"Bearer {key}"} if key else {}
                    return httpx.Client(
                        base_url=server.url, headers={**json_type, **auth}, **options
                    )

                targets = {
                    "direct": Target("direct", client(engine, None)),
                    "ferrox": Target("ferrox", client(plane, secret)),
                    "litellm": Target("litellm", client(litellm, MASTER_KEY)),
                }
                engine_pid = engine.process.pid
                pids = {
                    "direct": (engine_pid,),
                    "ferrox": (plane.process.pid, engine_pid),
                    "litellm": (litellm.process.pid, engine_pid),
                }
                try:
                    compare(args, targets, pids)
                finally:
                    for target in targets.values():
                        target.client.close()
            finally:
                proxy.stop(litellm)
    except BaseException:
        for log in sorted(tmp.glob("*.log")):
            if log.stat().st_size:
                print(f"--- {log.name}:\n{log.read_text(errors='replace')[-3000:]}")
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average now {os.getloadavg()[0]:.1f}")


def _has_uvloop(venv: Path) -> bool:
    return any(venv.glob("lib/python*/site-packages/uvloop"))


if __name__ == "__main__":
    main()
