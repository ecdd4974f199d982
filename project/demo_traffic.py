"""Plausible inference traffic for the demo, driven through the real in-process tracker.

Demo-only: a daemon thread that plays a few concurrent fake requests (several models,
streaming and not, client aborts, engine errors) for a bounded time, then stops.
It sleeps because it stands in for real serving time; nothing in the app does.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from ferrox_stats import live

MODELS = ("llama-3.1-8b-instruct", "qwen2.5-14b-instruct", "mistral-7b-instruct")
ROUTES = ("/v1/chat/completions", "/v1/completions")

_started = threading.Event()


def fake_request(rng: random.Random) -> None:
    stream = rng.random() < 0.7
    with live.track(
        route=rng.choice(ROUTES),
        model=rng.choice(MODELS),
        stream=stream,
        request_id=f"chatcmpl-{uuid.uuid4().hex[:24]}",
        client=f"10.0.0.{rng.randint(2, 40)}",
        via_api_key=rng.choice(("team-search", "team-chat", None)),
    ) as tracker:
        time.sleep(rng.expovariate(1 / 0.02))  # queueing
        tracker.started()
        prompt = rng.randint(20, 900)
        tracker.tokens(prompt=prompt)
        time.sleep(rng.lognormvariate(-2.3, 0.5))  # prefill: ~100 ms
        if rng.random() < 0.03:
            tracker.finish(status=500, error="EngineError")
            return
        tokens = rng.randint(8, 300)
        tok_per_s = rng.uniform(25, 90)
        abort_at = rng.randint(2, tokens) if rng.random() < 0.05 else None
        for n in range(1, tokens + 1):
            tracker.tokens(completion=1)
            if n == abort_at:
                tracker.abort("client_disconnect")
                tracker.finish(status=200)
                return
            time.sleep(1 / tok_per_s)
        tracker.finish(
            status=200,
            finish_reason="length" if rng.random() < 0.1 else "stop",
            prompt_tokens=prompt,
            completion_tokens=tokens,
        )
        live.get_recorder().observe_gauges(pool_used=rng.randint(100, 4000), pool_total=4096)


def run(duration_s: float = 600.0, concurrency: int = 4, seed: int | None = None) -> None:
    """Play traffic for ``duration_s`` seconds with ``concurrency`` requests at a time."""
    rng = random.Random(seed)
    deadline = time.monotonic() + duration_s
    with ThreadPoolExecutor(concurrency, thread_name_prefix="demo-traffic") as pool:

        def worker(worker_seed: int) -> None:
            worker_rng = random.Random(worker_seed)
            while time.monotonic() < deadline:
                fake_request(worker_rng)
                time.sleep(worker_rng.expovariate(1 / 0.3))

        for _ in range(concurrency):
            pool.submit(worker, rng.randrange(2**32))


def start_once(duration_s: float = 600.0) -> bool:
    """Start the traffic thread unless this process already did; returns whether it started."""
    if _started.is_set():
        return False
    _started.set()
    threading.Thread(target=run, args=(duration_s,), name="demo-traffic", daemon=True).start()
    return True
