"""What the machine did to a benchmark while it ran, shared by the benches."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path


def runqueue_ns() -> int:
    """ns this process has spent runnable but waiting for a core (Linux schedstat)."""
    try:
        with open("/proc/self/schedstat") as f:
            return int(f.read().split()[1])
    except OSError:
        return 0


def cpu_model() -> str:
    """The processor's model name (Linux ``/proc/cpuinfo``; ``platform`` elsewhere): a
    bench's figures are this machine's, and ratios move between processors."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown processor"


def commit() -> str:
    """The checkout's short commit, for a bench's header line (``unknown`` outside git)."""
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=Path(__file__).resolve().parent,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or "unknown"


def header(what: str) -> str:
    """A bench's first line: when, the commit, Python, then ``what`` and the load average."""
    return (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit()}, python "
        f"{sys.version.split()[0]}, {what}, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


def interleaved(names: Sequence[str], rounds: int) -> Iterator[tuple[int, str]]:
    """``(round, name)`` for round 0 (the warm-up) to ``rounds``, every name once a
    round, each round's order rotated by one."""
    for r in range(rounds + 1):
        for name in [*names[r % len(names) :], *names[: r % len(names)]]:
            yield r, name


def callgrind(
    argv: Sequence[str], out: Path, env: dict[str, str], cache: bool = False
) -> dict[str, int]:
    """Callgrind's totals for running ``argv`` (a command) under ``valgrind
    --tool=callgrind``, its output in ``out``: instructions (``Ir``), and with ``cache``
    the cache simulation's misses too. Raises if the command fails."""
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        *(["--cache-sim=yes"] if cache else []),
        *argv,
    ]
    cwd = Path(__file__).resolve().parent.parent
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"valgrind exited {done.returncode}:\n{done.stderr[-3000:]}")
    text = out.read_text()
    events = re.search(r"^events: (.+)$", text, re.M)
    totals = re.search(r"^totals: (.+)$", text, re.M) or re.search(r"^summary: (.+)$", text, re.M)
    assert events and totals, "no totals in callgrind's output"
    return dict(zip(events.group(1).split(), map(int, totals.group(1).split()), strict=True))
