"""The simulated engine's KV-cache pool: how many blocks the requests in flight hold.

Both feeders hold a plan's blocks while it plays, so the occasional pool report (a
gauge over the tracker, or riding on an ingest batch) moves with the load.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .plan import RequestPlan


class Pool:
    """KV-cache blocks held by requests in flight: what the occasional pool reports say."""

    def __init__(self, blocks: int = 1024, block_tokens: int = 16) -> None:
        self.blocks = blocks
        self.block_tokens = block_tokens
        self._tokens = 0
        self._lock = threading.Lock()

    @contextmanager
    def hold(self, plan: RequestPlan) -> Iterator[None]:
        tokens = (plan.prompt_tokens or 0) + plan.completion_tokens
        with self._lock:
            self._tokens += tokens
        try:
            yield
        finally:
            with self._lock:
                self._tokens -= tokens

    def gauges(self) -> dict[str, int]:
        with self._lock:
            used = min(self.blocks, math.ceil(self._tokens / self.block_tokens))
        return {"pool_used": used, "pool_total": self.blocks}
