"""Where a tracked request's cost goes inside Django, counted in instructions (callgrind).

``bench/served.py`` measures the tracker in a real server as the difference of two
worker-CPU figures, each about 400 µs a request: a 3 µs tracker is lost in their noise
(its "tracker in the server" swings from -24x to +16x the tight loop from run to run).
This counts instead: ``valgrind --tool=callgrind`` runs a Python process that serves
``bench/served_app.py``'s views through Django's WSGI handler (the demo project's
middleware stack, ``DEBUG`` off, no archive and no heartbeat thread: what the request
thread itself executes), with a prebuilt WSGI environ, and counts the instructions it
executed. Each case runs twice, with ``N`` and ``2N`` timed requests after the same
warm-up, so ``(count(2N) - count(N)) / N`` is one request's instructions, start-up and
warm-up cancelled out. The collector is off while the requests are counted (a full
collection in one run and not the other would swamp the difference) and hashes are
seeded alike; the counts then repeat run to run, on a busy machine as on an idle one,
which times do not.

Cases: ``plain`` (the untracked view), ``tracked`` (the view inside ``live.track``),
``prometheus`` (the view recording with pre-bound prometheus_client children), and the
two tight loops with no Django around them: ``tracker loop`` (the tracked view's
``live.track`` block) and ``prometheus loop`` (its four updates and three clock reads).
Nothing folds the recorder's queued reports during the count (in production the
heartbeat's thread does, every 2 s; ``bench/hot_path.py`` prices a fold apart): the
count is the request thread's path, in the loop and in situ alike.

Printed: instructions per request of each case; the tracker in situ (``tracked`` -
``plain``) against its tight loop, and prometheus_client's likewise; with ``--cache``
(callgrind's cache simulation: slower), the first-level data and last-level misses per
request too, which is where a request's time goes that its instructions do not show.

Run from the repo root (needs Debian's ``valgrind``; about two minutes)::

    PYTHONPATH=.:bench python bench/served_instructions.py [--requests 1000] [--cache]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from host import callgrind, commit

REPO = Path(__file__).resolve().parent.parent
WARM_UP = 300

CASES = ("plain", "tracked", "prometheus", "tracker loop", "prometheus loop")

# What runs under valgrind: ``python -c CHILD <case> <requests>``.
CHILD = r"""
import io, os, sys, time
case, n = sys.argv[1], int(sys.argv[2])
os.environ["DJANGO_SETTINGS_MODULE"] = "served_settings"
import django
django.setup()
import served_app
from ferrox_stats import live

# No fold on the request thread: in production the heartbeat's thread folds the queued
# reports (bench/hot_path.py prices a fold apart); here a fold every 1024 requests
# would land in one count and not the other.
recorder = live.get_recorder()
recorder.fold_every = recorder.max_pending = recorder._fold_at = 10**9

def environ(path):
    return {
        "REQUEST_METHOD": "GET", "PATH_INFO": "/" + path, "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1", "HTTP_HOST": "127.0.0.1:8000",
        "HTTP_USER_AGENT": "wrk", "HTTP_ACCEPT": "*/*",
        "wsgi.input": io.BytesIO(b""), "wsgi.errors": sys.stderr, "wsgi.url_scheme": "http",
        "wsgi.multithread": False, "wsgi.multiprocess": True, "wsgi.run_once": False,
        "wsgi.version": (1, 0),
    }

def start_response(status, headers, exc_info=None):
    assert status.startswith("200"), status

if case in ("plain", "tracked", "prometheus"):
    app = served_app.wsgi()
    def one():
        for chunk in app(environ(case), start_response):
            pass
elif case == "tracker loop":
    track = live.track
    def one():
        with track(route=served_app.ROUTE, model=served_app.MODEL, stream=False,
                   client="127.0.0.1", via_api_key=None) as t:
            t.finish(status=200, finish_reason="stop", prompt_tokens=512, completion_tokens=128)
else:
    requests, ttft, duration, decode = served_app._bound
    monotonic = time.monotonic
    def one():
        arrived = monotonic(); first = monotonic(); end = monotonic()
        requests.inc(); ttft.observe(first - arrived)
        duration.observe(end - arrived); decode.observe(end - first)

for _ in range(WARM_UP):
    one()
# The collector off for the count: a full collection that falls in one run and not the
# other would add millions of instructions to it.
import gc
gc.collect()
gc.disable()
for _ in range(n):
    one()
"""


def count(case: str, requests: int, cache: bool, env: dict[str, str], tmp: Path) -> dict[str, int]:
    """Callgrind's totals (instructions, and with ``cache`` the misses) for one run."""
    child = [sys.executable, "-c", CHILD.replace("WARM_UP", str(WARM_UP)), case, str(requests)]
    try:
        return callgrind(child, tmp / "callgrind.out", env, cache)
    except RuntimeError as e:
        raise RuntimeError(f"{case}: {e}") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000, help="N: timed requests")
    parser.add_argument("--cache", action="store_true", help="simulate the caches too")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        name = Path(__file__).name
        print(f"{name}: skipped, valgrind is not installed (apt-get install -y valgrind)")
        return
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit()}, python "
        f"{sys.version.split()[0]}; N = {args.requests} after {WARM_UP} warm-up requests; "
        "per request = (count at 2N - count at N) / N"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "bench")]),
        # The request thread alone: no archive sink, no heartbeat thread, no database.
        "FERROX_BENCH_ARCHIVE": "0",
        "FERROX_BENCH_DATABASE_URL": "sqlite:///:memory:",
        # The same hashes, so the same dict and set layouts, in every run.
        "PYTHONHASHSEED": "0",
    }
    per_request: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        env["FERROX_BENCH_METRICS_DIR"] = tmp
        env["FERROX_BENCH_NO_HEARTBEAT"] = "1"
        for case in CASES:
            once = count(case, args.requests, args.cache, env, Path(tmp))
            twice = count(case, 2 * args.requests, args.cache, env, Path(tmp))
            per_request[case] = {k: (twice[k] - once[k]) / args.requests for k in once}
    names = {"Ir": "instructions", "D1mr": "D1 read misses", "D1mw": "D1 write misses"}
    names |= {"DLmr": "LL read misses", "DLmw": "LL write misses"}
    shown = [k for k in names if k in per_request["plain"]]
    print("\n| case | " + " | ".join(names[k] for k in shown) + " |")
    print("|---|" + "---:|" * len(shown))
    for case in CASES:
        cells = " | ".join(f"{per_request[case][k]:,.0f}" for k in shown)
        print(f"| {case} | {cells} |")
    ir = {case: per_request[case]["Ir"] for case in CASES}
    tracker = ir["tracked"] - ir["plain"]
    prometheus = ir["prometheus"] - ir["plain"]
    print(
        f"\ntracker in situ (tracked - plain): {tracker:,.0f} instructions = "
        f"{tracker / ir['tracker loop']:.2f}x its tight loop ({ir['tracker loop']:,.0f}) "
        "(goal ≤ 2x)"
    )
    print(
        f"prometheus_client in situ (prometheus - plain): {prometheus:,.0f} instructions = "
        f"{prometheus / ir['prometheus loop']:.2f}x its tight loop ({ir['prometheus loop']:,.0f})"
    )
    print(f"the plain request itself: {ir['plain']:,.0f} instructions")
    if args.cache:
        for key in ("D1mr", "DLmr"):
            t = per_request["tracked"][key] - per_request["plain"][key]
            print(
                f"{names[key]}: tracker in situ {t:,.1f} a request, its tight loop "
                f"{per_request['tracker loop'][key]:,.1f}"
            )


if __name__ == "__main__":
    main()
