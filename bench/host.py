"""What the machine did to a benchmark while it ran, shared by the benches."""

from __future__ import annotations

import os
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
