"""``GET /v1/requests?limit=100`` against a plain ``JsonResponse`` of the same 100 dicts.

The fair baseline (issue 13): a plain Django view answering ``JsonResponse`` of the
page's document built once, 100 prebuilt dicts (``bench/poll_urls.py``), beside the
app in the same server, through the same middleware (``bench/poll_settings.py``: the
demo project's). The ring holds ``bench/api.py``'s seeded records (1324 tracked, 1024
kept); every variant answers the same 100 rows.

Part 1, served over HTTP: gunicorn with one worker, first with uvicorn's workers (ASGI,
as the README serves the app), then with its sync workers (WSGI); ``wrk`` (Debian's)
drives each variant for ``--duration`` seconds at ``--connections``, rounds interleaved
in rotating order. Per round: requests/s (wrk) and the worker's CPU per request
(``/proc/<pid>/stat``, all its threads), each as a ratio to the baseline in that round;
the median of the per-round ratios is reported. On a shared machine wall-clock
requests/s includes waiting for a core; worker CPU does not.

Variants: ``/v1/requests`` (public, as ``PUBLIC_ENDPOINTS`` opens it); the same with a
read token (checked as on a closed endpoint); ``cold``: no row's JSON kept, every row
encoded (a first poll); the baseline; ``floor``: a constant ``HttpResponse`` (server,
URL resolution and middleware only).

Part 2, in-process: the same urlconf and variants through Django's test ``Client``
(``bench/api.py``'s harness: rounds interleaved, gc off while timed), by CPU time.

Part 3, the parts of one poll without HTTP: the page from kept rows; every row encoded;
DRF's renderer on the whole document (what the view did before); orjson on it (when
importable: ``PYTHONPATH`` may name a side venv's site-packages); ``JsonResponse``'s
encoding of the prebuilt document. ``--profile N``: N in-process polls under cProfile.

Run from the repository root::

    PYTHONPATH=. python bench/api_poll.py [--quick] [--rounds 7] [--duration 4]
        [--connections 4] [--servers asgi,sync] [--no-http] [--profile 500]

``--quick`` (about a minute): 3 rounds of 2 s, no cold or floor variants.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))
PREFIX = "/control/telemetry"
START_TIMEOUT_S = 60.0

SERVERS = {
    # As the README serves the app: gunicorn with uvicorn's workers, the project's ASGI app.
    "asgi": ["project.asgi:application", "-k", "uvicorn.workers.UvicornWorker"],
    "sync": ["project.wsgi:application", "-k", "sync"],
}


def variants(query: str, quick: bool) -> dict[str, str]:
    """Each variant's path, the baseline last."""
    paths = {
        "/v1/requests": f"{PREFIX}/v1/requests{query}",
        "/v1/requests, read token": f"{PREFIX}/v1/requests{query}",
        "/v1/requests, cold": f"/bench/cold/v1/requests{query}",
        "floor": "/bench/floor",
        "JsonResponse": "/bench/json",
    }
    if quick:
        del paths["/v1/requests, cold"], paths["floor"]
    return paths


BASELINE = "JsonResponse"
TOKENED = "/v1/requests, read token"


def environment(db: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(REPO), str(BENCH), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
        "DJANGO_SETTINGS_MODULE": "poll_settings",
        "FERROX_BENCH_DB": str(db),
    }


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, headers: dict[str, str] | None = None) -> bytes:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return bytes(response.read())


@contextmanager
def gunicorn(kind: str, env: dict[str, str], workers: int, log: Path) -> Iterator[tuple[str, int]]:
    """A gunicorn this script started (base URL, master pid); stopped by its pid after."""
    port = free_port()
    argv = [sys.executable, "-m", "gunicorn", *SERVERS[kind], "-w", str(workers)]
    argv += ["-b", f"127.0.0.1:{port}", "--log-level", "warning"]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"gunicorn exited:\n{log.read_text()[-2000:]}")
            try:
                get(url + "/bench/floor")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("gunicorn did not serve in time") from None
                time.sleep(0.1)
        yield url, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def worker_cpu_ticks(master: int) -> int:
    """utime + stime of the master's children (the workers, every thread), in ticks."""
    total = 0
    with open(f"/proc/{master}/task/{master}/children") as f:
        children = [int(pid) for pid in f.read().split()]
    for pid in children:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total


def wrk(url: str, seconds: float, connections: int, headers: dict[str, str]) -> int:
    """Requests wrk completed in ``seconds`` (non-2xx answers fail the run)."""
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s"]
    for name, value in headers.items():
        argv += ["-H", f"{name}: {value}"]
    out = subprocess.run([*argv, url], capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk {url}:\n{out}")
    match = re.search(r"(\d+) requests in", out)
    assert match, out
    return int(match.group(1))


def served(
    args: argparse.Namespace, env: dict[str, str], kind: str, secret: str, tmp: Path
) -> None:
    import poll_urls  # only for QUERY; the server fills its own ring alike

    paths = variants(poll_urls.QUERY, args.quick)
    tick_s = 1 / os.sysconf("SC_CLK_TCK")
    with gunicorn(kind, env, args.workers, tmp / f"{kind}.log") as (url, master):
        bearer = {"Authorization": f"Bearer {secret}"}
        headers = {name: bearer if name == TOKENED else {} for name in paths}
        # Same rows, same document (but for the instance, each worker's own).
        expected = json.loads(get(url + paths[BASELINE]))
        for name, p in paths.items():
            if name != "floor":
                doc = json.loads(get(url + p, headers[name]))
                assert len(doc["entries"]) == poll_urls.PAGE, name
                assert {**doc, "instance": None} == {**expected, "instance": None}, name
        for name, p in paths.items():  # warm up: imports, first queries, kept rows
            wrk(url + p, 1, args.connections, headers[name])
        rps: dict[str, list[float]] = {name: [] for name in paths}
        cpu: dict[str, list[float]] = {name: [] for name in paths}
        names = list(paths)
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                before = worker_cpu_ticks(master)
                done = wrk(url + paths[name], args.duration, args.connections, headers[name])
                ticks = worker_cpu_ticks(master) - before
                rps[name].append(done / args.duration)
                cpu[name].append(ticks * tick_s / done * 1e6)
    print(
        f"\n### Served: gunicorn, {args.workers} {kind} worker(s) "
        f"({' '.join(SERVERS[kind][1:])}); wrk -t1 -c{args.connections}, "
        f"{args.duration} s x {args.rounds} rounds\n"
    )
    table(rps, cpu, "requests/s")


def table(rate: dict[str, list[float]], cpu: dict[str, list[float]], unit: str) -> None:
    """Medians, and the medians of the per-round ratios to the baseline."""
    print(
        f"| variant | {unit} | ÷ JsonResponse (median of rounds) | worker CPU µs / request "
        "| ÷ JsonResponse, by CPU |\n|---|---:|---:|---:|---:|"
    )
    for name in rate:
        by_rate = [a / b for a, b in zip(rate[name], rate[BASELINE], strict=True)]
        by_cpu = [b / a for a, b in zip(cpu[name], cpu[BASELINE], strict=True)]
        print(
            f"| {name} | {statistics.median(rate[name]):.0f} | {statistics.median(by_rate):.2f}x "
            f"| {statistics.median(cpu[name]):.0f} | {statistics.median(by_cpu):.2f}x |"
        )


def in_process(args: argparse.Namespace, secret: str) -> None:
    """Part 2: the same urlconf and variants through Django's test Client."""
    import poll_urls
    from api import interleave
    from django.test import Client

    client = Client()
    paths = variants(poll_urls.QUERY, args.quick)
    bearer = {"Authorization": f"Bearer {secret}"}

    def call(name: str) -> Callable[[], Any]:
        path, headers = paths[name], bearer if name == TOKENED else None

        def poll() -> Any:
            response = client.get(path, headers=headers)
            assert response.status_code == 200, (name, response.content[:200])
            return response

        return poll

    calls = {name: call(name) for name in paths}
    for poll in calls.values():
        for _ in range(10):
            poll()
    timings = interleave(calls, args.requests, args.rounds)
    rate = {name: [1e9 / ns for ns in timings.wall[name]] for name in paths}
    cpu = {name: [ns / 1000 for ns in timings.cpu[name]] for name in paths}
    print(
        f"\n### In-process: Django's test Client, {args.requests} requests x {args.rounds} "
        "rounds (CPU: this process)\n"
    )
    table(rate, cpu, "requests/s")


def profile(args: argparse.Namespace, secret: str) -> None:
    """Where an in-process poll's time goes now: cProfile, top functions by cumulative time."""
    import cProfile
    import io
    import pstats

    import poll_urls
    from django.test import Client

    client = Client()
    path = f"{PREFIX}/v1/requests{poll_urls.QUERY}"
    bearer = {"Authorization": f"Bearer {secret}"}
    for _ in range(10):
        client.get(path, headers=bearer)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(args.profile):
        client.get(path, headers=bearer)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("cumulative").print_stats(25)
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    print(f"\n### cProfile: {args.profile} in-process polls with a read token, top 25\n")
    print("```")
    print("\n".join(line.rstrip() for line in lines[start:] if line.strip()))
    print("```")


def parts(args: argparse.Namespace) -> None:
    """Part 3: one 100-row poll's encoding, without HTTP."""
    import poll_urls
    from api import interleave
    from django.core.serializers.json import DjangoJSONEncoder

    from ferrox_stats import documents
    from ferrox_stats.api import wire
    from ferrox_stats.api.base import FerroxJSONRenderer

    stats = poll_urls.recorder.stats
    page = stats.since(poll_urls.TOTAL - poll_urls.PAGE, poll_urls.PAGE)
    ours, drf = wire.RingPageRenderer(), FerroxJSONRenderer()
    document = wire.RingDocument(stats, page, documents.ring_page)

    def cold() -> bytes:
        wire.ROW_JSON.clear()
        return bytes(ours.render(document, "application/json", {}))

    calls: dict[str, Callable[[], Any]] = {
        "page from kept rows (RingPageRenderer)": lambda: ours.render(document),
        "every row encoded: entry() + stdlib json, spliced": cold,
        "before: documents.ring_page + DRF's renderer": lambda: drf.render(
            documents.ring_page(page)
        ),
        "JsonResponse's encoding of the prebuilt document": lambda: json.dumps(
            poll_urls.PREBUILT, cls=DjangoJSONEncoder
        ),
    }
    try:
        import orjson  # type: ignore[import-not-found, unused-ignore]

        calls["documents.ring_page + orjson.dumps"] = lambda: orjson.dumps(
            documents.ring_page(page)
        )
        note = f"orjson {orjson.__version__}"
    except ImportError:
        note = "orjson not importable: its row skipped"
    assert ours.render(document) == drf.render(documents.ring_page(page))
    timings = interleave(calls, 20, args.rounds)
    print(f"\n### One 100-row poll's document, no HTTP (CPU µs per call; {note})\n")
    print("| part | CPU µs |\n|---|---:|")
    for name, ns in timings.median("cpu").items():
        print(f"| {name} | {ns / 1000:.0f} |")


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True)
    return done.stdout.decode().strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about a minute")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--duration", type=int, default=4, help="seconds of wrk per run")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--servers", default="asgi,sync")
    parser.add_argument("--requests", type=int, default=50, help="in-process, per round")
    parser.add_argument("--no-http", action="store_true", help="in-process parts only")
    parser.add_argument("--profile", type=int, default=0, help="polls under cProfile; 0: none")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.duration, args.requests = 3, 2, 20

    import django
    import gunicorn
    import uvicorn
    from rest_framework import VERSION as drf_version

    tmp = Path(tempfile.mkdtemp(prefix="ferrox_bench_poll-"))
    try:
        env = environment(tmp / "tokens.sqlite3")
        for name in ("DJANGO_SETTINGS_MODULE", "FERROX_BENCH_DB"):
            os.environ[name] = env[name]
        manage(env, "migrate", "--verbosity", "0")
        created = manage(env, "ferrox_stats_token", "create", "bench-poller")
        secret = created.strip().splitlines()[-1]
        django.setup()
        started = time.monotonic()
        print(
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit()}, "
            f"python {platform.python_version()}, Django {django.__version__}, "
            f"DRF {drf_version}, gunicorn {gunicorn.__version__}, uvicorn {uvicorn.__version__}, "
            f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"
        )
        if not args.no_http:
            if shutil.which("wrk") is None:
                print("\nwrk not found (apt-get install wrk): the served part is skipped")
            else:
                for kind in args.servers.split(","):
                    served(args, env, kind, secret, tmp)
        in_process(args, secret)
        parts(args)
        if args.profile:
            profile(args, secret)
        print(
            f"\ntotal {time.monotonic() - started:.0f} s, load average now {os.getloadavg()[0]:.1f}"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
