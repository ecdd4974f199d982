"""What the machine did to a benchmark while it ran, shared by the benches."""

from __future__ import annotations

import subprocess
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
