"""Every benchmark in ``bench/``, one after another, and a summary of their headlines.

``make bench`` runs this with ``--quick``: each bench with the small arguments of the
table below (each about a minute or less, but for ``usage_api``: about 15 minutes,
most of it loading its two rollup histories), then the lines that carry its ratios and
goals. Without ``--quick`` each runs with its own defaults (its full mode: tens of
minutes in all). Each bench's whole output goes to ``--out`` (one file per bench), and
the summary names it; a bench that needs what is missing (``wrk``, the LiteLLM venv)
prints "<script>: skipped, <why>" and is summarised as skipped. Run from the repo root::

    PYTHONPATH=. python bench/all.py [--quick] [--only NAME ...] [--out DIR]

A script of ``bench/`` that runs as ``__main__`` and is not in ``BENCHES`` is named at the
end, so a new bench is not left out silently: add its row here.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from host import commit, cpu_model

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
TIMEOUT_S = 900  # one quick bench; a hung server must not hang the run


@dataclass(frozen=True)
class Bench:
    script: str
    quick: str  # the arguments of its quick mode (its defaults are its full mode)
    headline: str  # a regex: the output lines the summary shows
    needs: str = ""  # what it needs besides this venv, for the reader
    timeout_s: int = TIMEOUT_S


# One row per bench: add new benches here (the runner names scripts it does not list).
BENCHES: dict[str, Bench] = {
    # name: Bench(script, quick arguments, headline regex, needs)
    "hot_path": Bench(
        "hot_path.py",
        "--quick --clock cpu",
        r"HEADLINE|request path alone|^\s+tracked / |ns/request|threads / 1",
    ),
    "ring_since": Bench("ring_since.py", "--quick", r"x$"),
    "ring_memory": Bench("ring_memory.py", "--quick", r"B per record|x$"),
    "served": Bench(
        "served.py",
        "--quick",
        r"goal|worker CPU added|tight loops|in situ|skipped",
        "wrk; PostgreSQL for the archive variant",
    ),
    "served_instructions": Bench(
        "served_instructions.py", "--requests 200", r"in situ|itself", "valgrind"
    ),
    "api": Bench(
        "api.py",
        "--rows 20000 --rounds 5 --requests 20 --calls 4 --history-rounds 5 --profile 50",
        r"goal|deep/first",
        "PostgreSQL",
    ),
    "archive_write": Bench(
        "archive_write.py", "--rows 10000 --rounds 3", r"archiver vs|alone|rollups:", "PostgreSQL"
    ),
    "archive_write_sqlite": Bench(
        "archive_write_sqlite.py", "--rows 3000 --rounds 3", r"÷|per row"
    ),
    "gil_wait": Bench("gil_wait.py", "--rows 3000 --rounds 3", r"probe late|÷"),
    "archive_writers": Bench(
        "archive_writers.py", "--rows 10000 --rounds 1 --writers 1 2", r"writer\(s\)", "PostgreSQL"
    ),
    "rollup_instructions": Bench(
        "rollup_instructions.py", "--batch 500", r"cost the writer", "valgrind, PostgreSQL"
    ),
    "rollup_fold": Bench(
        "rollup_fold.py", "--deltas 500 2000 --rounds 2", r"deltas pending", "PostgreSQL"
    ),
    "api_poll": Bench("api_poll.py", "--quick", r"goal|ratio", "wrk"),
    "archive_read": Bench(
        "archive_read.py", "--quick --filters all", r"goal|/ first page|worst", "PostgreSQL"
    ),
    # It fills two rollup histories (30 and 300 days) first: 12 minutes on the machine
    # of 2026-12-07 17:32, 19 on a slower one the same day.
    "usage_api": Bench("usage_api.py", "--quick", r"HEADLINE", "PostgreSQL", timeout_s=2400),
    "partition_retention": Bench(
        "partition_retention.py", "--quick", r"HEADLINE|migration", "PostgreSQL"
    ),
    "fleet": Bench(
        "fleet.py", "--instances 16 --records 5000 --calls 10", r"goal|% of", "PostgreSQL"
    ),
    "fleet_compute": Bench(
        "fleet_compute.py", "--instances 16 --records 5000 --calls 20", r" ms", "PostgreSQL"
    ),
    "metrics": Bench("metrics.py", "--records 5000 --rounds 5", r"goal"),
    "proxy": Bench("proxy.py", "--quick", r"goal|added at p50"),
    "proxy_clients": Bench("proxy_clients.py", "--quick", r"^\| (httpx|aiohttp|through) \|"),
    "proxy_litellm": Bench(
        "proxy_litellm.py",
        "--quick",
        r"÷|skipped",
        "the LiteLLM venv (scripts/litellm-venv.sh)",
    ),
}


def benches_in_directory() -> set[str]:
    """The scripts of ``bench/`` that run as ``__main__`` (helpers and apps do not)."""
    return {
        path.name
        for path in BENCH.glob("*.py")
        if path.name != "all.py" and 'if __name__ == "__main__":' in path.read_text()
    }


def run(name: str, bench: Bench, quick: bool, out: Path) -> tuple[str, float, list[str]]:
    """Run one bench; its status, seconds, and its headline lines."""
    argv = [sys.executable, str(BENCH / bench.script), *(shlex.split(bench.quick) if quick else [])]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(REPO), str(BENCH), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    print(f"\n=== {name}: {' '.join(argv[1:])}", flush=True)
    started = time.monotonic()
    log = out / f"{name}.txt"
    try:
        with log.open("w") as f:
            done = subprocess.run(
                argv, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=bench.timeout_s
            )
        status = "ok" if done.returncode == 0 else f"failed (exit {done.returncode})"
    except subprocess.TimeoutExpired:
        status = f"failed (over {bench.timeout_s} s)"
    seconds = time.monotonic() - started
    text = log.read_text(errors="replace")
    # A bench that cannot run here says so on a line of its own: "<script>: skipped, …".
    if status == "ok" and re.search(rf"^{re.escape(bench.script)}: skipped", text, re.MULTILINE):
        status = "skipped"
    pattern = re.compile(bench.headline)
    lines = [line.rstrip() for line in text.splitlines() if pattern.search(line)]
    if status.startswith("failed"):
        lines = text.splitlines()[-15:]
    print(f"--- {status} in {seconds:.0f} s; output: {log}", flush=True)
    for line in lines:
        print(f"  {line}")
    return status, seconds, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="each bench's quick arguments")
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHES), help="these benches")
    parser.add_argument(
        "--out", type=Path, default=Path("bench-results"), help="where each bench's output goes"
    )
    args = parser.parse_args()
    out = args.out / time.strftime("%Y%m%dT%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit()}, python "
        f"{platform.python_version()}, {os.cpu_count()} cores ({cpu_model()}), load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {'quick' if args.quick else 'full'} "
        f"mode; outputs in {out}"
    )
    results = {}
    for name in args.only or list(BENCHES):
        results[name] = run(name, BENCHES[name], args.quick, out)
    print("\n=== summary\n\n| bench | status | s |\n|---|---|---:|")
    for name, (status, seconds, _) in results.items():
        print(f"| {name} | {status} | {seconds:.0f} |")
    unlisted = benches_in_directory() - {bench.script for bench in BENCHES.values()}
    if unlisted:
        print(f"\nnot in bench/all.py's table (not run): {', '.join(sorted(unlisted))}")
    print(f"load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if any(status.startswith("failed") for status, _, _ in results.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
