"""What the machine did to a benchmark while it ran, shared by the benches."""

from __future__ import annotations


def runqueue_ns() -> int:
    """ns this process has spent runnable but waiting for a core (Linux schedstat)."""
    try:
        with open("/proc/self/schedstat") as f:
            return int(f.read().split()[1])
    except OSError:
        return 0
