"""A trivial Django view served for real: untracked vs tracked vs tracked + archive.

gunicorn serves ``bench/served_app.py`` (settings ``bench/served_settings.py``: the demo
project's middleware stack, ``DEBUG`` off) with 2 workers, ``--kind sync`` (gunicorn's
sync workers, WSGI: the ``wsgi.py`` way) and/or ``--kind uvicorn``
(``uvicorn.workers.UvicornWorker``, ASGI through ``ferrox_stats.asgi.wrap``, as the README
serves a control plane). One server per variant, on free ports of 127.0.0.1, on a
throwaway PostgreSQL database:

- ``untracked``: ``/plain``, a small JSON body (no recorder is ever built: none of
  ferrox_stats' threads run in it);
- ``tracked``: ``/tracked``, the same body inside ``live.track(...)`` as the README tells
  a host to record a request; ``ARCHIVE_SINK = None`` (its heartbeat is host-only);
- ``tracked + archive``: the same view with the default archive sink (each request
  queued and written to PostgreSQL by the worker's writer thread; heartbeats to it).

``wrk -t1`` drives each variant in turn, in interleaved rounds whose order rotates, after
a warm-up past the first heartbeats: requests/s as wrk counts them, and the workers' CPU
per request (utime + stime of each worker, all its threads, from ``/proc/<pid>/stat``,
10 ms ticks, over the requests wrk completed), split into the main thread and the
others (under sync workers: ferrox_stats' heartbeat and archive writer). Ratios are
medians of per-round ratios. The tracker's cost in the server is the per-round
difference of worker CPU per request, tracked minus untracked, set beside the view's
``live.track`` call in a tight loop in this process (thread CPU; what
``bench/hot_path.py`` measures). Then, per variant, what CPython's cycle collector
cost its workers (``gc.callbacks`` in ``served_app``, from each worker's 1 000th request
on): its thread CPU per request for young, middle and full collections, and how many
full collections there were (each walks the whole heap and stops every thread).

``--profile`` then starts one more server (the archive variant when there is
PostgreSQL) whose views count their own thread CPU, records its workers with py-spy
(``--gil``: samples of the thread holding the GIL, i.e. running Python) while wrk drives
``/tracked``, and prints where the samples go (the tracker block, the heartbeat's
document and publishing, the archive writer, gunicorn + Django) in µs per request, and
the tracker's cost in situ (the tracked view's own thread CPU minus the plain view's).
py-spy is looked for in ``/work/venvs/pyspy/bin`` and on PATH (``pip install py-spy``
in a venv of its own; it needs ptrace).

Needs ``wrk`` (Debian: ``apt-get install -y wrk``; skipped with a message without it)
and the local PostgreSQL (127.0.0.1:5432, trust auth; ``--server``; without it the
archive variant is skipped). Run from the repo root::

    PYTHONPATH=. python bench/served.py [--quick] [--kind sync uvicorn] [--rounds 9]
        [--seconds 4] [--connections 4] [--profile]

``--quick``: sync workers only, 3 rounds of 2 s (under a minute). Every server is
stopped by pid (SIGTERM to its master) on the way out.
"""

from __future__ import annotations

import argparse
import collections
import importlib.metadata
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

DESCRIPTION = "A trivial Django view under gunicorn + wrk: untracked vs tracked vs archived."

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
SERVER = "postgresql://postgres@127.0.0.1:5432"
DATABASE = "ferrox_bench_served"
WORKERS = 2
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0  # the archive drains its queue at exit
GOAL_TRACKED = 0.95
GOAL_ARCHIVED = 0.90
GOAL_IN_SERVER = 2.0  # the tracker's worker CPU per request vs the tight loop
KINDS = {
    "sync": ["served_app:wsgi()"],
    "uvicorn": ["served_app:asgi()", "-k", "uvicorn.workers.UvicornWorker"],
}
PY_SPY = ["/work/venvs/pyspy/bin/py-spy", "py-spy"]


def clock_ticks_ns() -> int:
    return 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def cpu_ns(stat: str) -> int:
    """CPU ns (utime + stime, 10 ms ticks) a ``/proc/.../stat`` file counts."""
    with open(stat) as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) * clock_ticks_ns()


def split_cpu_ns(pid: int) -> tuple[int, int]:
    """Process ``pid``'s CPU ns: its main thread's, and the rest (every other thread's,
    exited ones included). Under sync workers the main thread serves the requests and
    the others are ferrox_stats' (the heartbeat, the archive writer)."""
    main = cpu_ns(f"/proc/{pid}/task/{pid}/stat")
    return main, cpu_ns(f"/proc/{pid}/stat") - main


def children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (gunicorn's workers)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return sorted(found)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A gunicorn this script started: its master's process, port and workers."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    workers: list[int] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def cpu_ns(self) -> tuple[int, int]:
        """The workers' CPU ns: main threads, other threads."""
        main = other = 0
        for pid in self.workers:
            m, o = split_cpu_ns(pid)
            main, other = main + m, other + o
        return main, other

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def bench_env(
    database_url: str, *, sink: str, metrics_dir: Path, groups: int = 1
) -> dict[str, str]:
    """The environment of one server: ``sink`` is what it keeps ("memory", "archive",
    or "rollups": the archive with ``ROLLUPS`` on); ``groups`` how many label sets
    its tracked view cycles through (``served_app.LABELS``)."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(REPO), str(BENCH), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
        "DJANGO_SETTINGS_MODULE": "served_settings",
        "FERROX_BENCH_DATABASE_URL": database_url,
        "FERROX_BENCH_ARCHIVE": "0" if sink == "memory" else "1",
        "FERROX_BENCH_ROLLUPS": "1" if sink == "rollups" else "0",
        "FERROX_BENCH_GROUPS": str(groups),
        "FERROX_BENCH_METRICS_DIR": str(metrics_dir),
        "FERROX_BENCH_GC": "1",  # served_app counts the cycle collector's work
    }


def start(name: str, kind: str, env: dict[str, str], tmp: Path) -> Server:
    port = free_port()
    log = tmp / f"{name}.log"
    argv = [
        sys.executable, "-m", "gunicorn", *KINDS[kind], "-w", str(WORKERS),
        "-b", f"127.0.0.1:{port}", "--log-level", "warning",
    ]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(name, port, process, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{server.tail()}")
            try:
                with urllib.request.urlopen(server.url("/plain"), timeout=5.0) as response:
                    response.read()
                server.workers = children(process.pid)
                if len(server.workers) == WORKERS:
                    return server
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not serve within {START_TIMEOUT_S} s")
            time.sleep(0.1)
    except BaseException:
        stop(server)
        raise


def stop(server: Server) -> None:
    """SIGTERM to the master (its workers drain their archive queues at exit)."""
    if server.process.poll() is not None:
        return
    server.process.send_signal(signal.SIGTERM)
    try:
        server.process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@dataclass
class Run:
    requests: int
    per_s: float
    main_ns: int  # the workers' main threads' CPU over the run
    other_ns: int  # their other threads' (ferrox_stats' heartbeat and archive writer)

    @property
    def cpu_ns_per_request(self) -> float:
        return (self.main_ns + self.other_ns) / max(self.requests, 1)

    @property
    def other_ns_per_request(self) -> float:
        return self.other_ns / max(self.requests, 1)


WRK_REQUESTS = re.compile(r"(\d+) requests in ")
WRK_PER_S = re.compile(r"Requests/sec:\s+([\d.]+)")


def wrk(server: Server, path: str, seconds: float, connections: int) -> Run:
    """One wrk run against ``path``: what it counted and the workers' CPU meanwhile."""
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", server.url(path)]
    main, other = server.cpu_ns()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    main_after, other_after = server.cpu_ns()
    out = done.stdout
    if done.returncode != 0 or "Non-2xx" in out:
        raise RuntimeError(f"wrk {path} on {server.name} failed:\n{out}{done.stderr}")
    requests_match, per_s_match = WRK_REQUESTS.search(out), WRK_PER_S.search(out)
    assert requests_match and per_s_match, out
    requests = int(requests_match.group(1))
    return Run(requests, float(per_s_match.group(1)), main_after - main, other_after - other)


def tight_loop_ns(requests: int, rounds: int) -> dict[str, float]:
    """Thread-CPU ns per request of what the tracked and prometheus views add to the plain
    one (the ``live.track`` block; the prometheus_client updates), each in a tight loop
    in this process, median of rounds."""
    import served_app

    from ferrox_stats.live import Recorder

    recorder = Recorder(replica="bench")
    route, model = served_app.ROUTE, served_app.MODEL

    def tracked() -> None:
        track = recorder.track
        for _ in range(requests):
            with track(route=route, model=model, stream=False, client="127.0.0.1") as t:
                t.finish(status=200, finish_reason="stop", prompt_tokens=512, completion_tokens=128)

    def prometheus() -> None:
        counter, ttft, duration, decode = served_app._bound
        monotonic = time.monotonic
        for _ in range(requests):
            arrived = monotonic()
            first = monotonic()
            end = monotonic()
            counter.inc()
            ttft.observe(first - arrived)
            duration.observe(end - arrived)
            decode.observe(end - first)

    loops = {"tracked": tracked, "prometheus": prometheus}
    per_request: dict[str, list[float]] = {name: [] for name in loops}
    for r in range(rounds + 1):  # the first warms up
        for name, loop in loops.items():
            start = time.thread_time_ns()
            loop()
            if r:
                per_request[name].append((time.thread_time_ns() - start) / requests)
    return {name: statistics.median(values) for name, values in per_request.items()}


def pg_database(server: str) -> str | None:
    """A fresh ``DATABASE`` on ``server``, or None (with a message) if it cannot be had."""
    try:
        import psycopg

        with psycopg.connect(f"{server}/postgres", autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
    except Exception as exc:
        print(f"PostgreSQL at {server} unavailable ({exc}); the archive variant is skipped")
        return None
    return f"{server}/{DATABASE}"


def drop_database(server: str) -> None:
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


def archived_rows(database_url: str) -> int:
    import psycopg

    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT count(*) FROM ferrox_stats_finishedrequest").fetchone()
    return int(row[0]) if row else 0


def migrate(env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"migrate failed:\n{done.stderr}")


# The servers of one kind: what each keeps of the archive, and the variant it serves.
SERVERS = {
    "untracked": ("memory", "/plain"),
    "prometheus": ("memory", "/prometheus"),
    "tracked": ("memory", "/tracked"),
    "tracked + archive": ("archive", "/tracked"),
    "tracked + archive + rollups": ("rollups", "/tracked"),
}


@contextmanager
def serving(
    kind: str, database_url: str, archive: bool, tmp: Path, groups: int
) -> Iterator[dict[str, Server]]:
    """One server per variant (the untracked one never builds a recorder, so none of
    ferrox_stats' threads run in it); no archive variant without PostgreSQL."""
    with ExitStack() as stack:
        found: dict[str, Server] = {}
        for variant, (sink, _) in SERVERS.items():
            if sink != "memory" and not archive:
                continue
            name = f"{kind}-{variant.replace(' + ', '-')}"
            metrics = tmp / f"{name}-metrics"
            metrics.mkdir()
            env = bench_env(database_url, sink=sink, metrics_dir=metrics, groups=groups)
            server = start(name, kind, env, tmp)
            stack.callback(stop, server)
            found[variant] = server
        yield found


def measure(
    servers: dict[str, Server], rounds: int, seconds: float, connections: int
) -> dict[str, list[Run]]:
    names = list(servers)
    for name, server in servers.items():
        # Warm-up: imports, the recorder, its first heartbeats (the first tick imports).
        wrk(server, SERVERS[name][1], max(seconds, 3.0), connections)
    runs: dict[str, list[Run]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            runs[name].append(wrk(servers[name], SERVERS[name][1], seconds, connections))
    return runs


def report(kind: str, runs: dict[str, list[Run]], tight: dict[str, float]) -> dict[str, float]:
    """Print the kind's table and ratios; return the headline figures."""
    base = runs["untracked"]

    def median_of_rounds(name: str, of: Callable[[Run, Run], float]) -> float:
        return statistics.median(of(v, b) for v, b in zip(runs[name], base, strict=True))

    print(
        f"\n{kind}: {WORKERS} workers, {len(base)} rounds\n\n"
        "| variant | requests/s median | ratio to untracked (median of rounds) "
        "| worker CPU µs/request | of it, threads other than the main one "
        "| requests per round |\n|---|---:|---:|---:|---:|---:|"
    )
    figures: dict[str, float] = {}
    for name, values in runs.items():
        ratio = median_of_rounds(name, lambda v, b: v.per_s / b.per_s)
        cpu = statistics.median(v.cpu_ns_per_request for v in values) / 1e3
        other = statistics.median(v.other_ns_per_request for v in values) / 1e3
        print(
            f"| {name} | {statistics.median(v.per_s for v in values):,.0f} | {ratio:.3f} "
            f"| {cpu:.1f} | {other:.1f} | {statistics.median(v.requests for v in values):,.0f} |"
        )
        figures[name] = ratio
    added = {
        name: median_of_rounds(name, lambda v, b: v.cpu_ns_per_request - b.cpu_ns_per_request)
        for name in runs
        if name != "untracked"
    }
    for name, ns in added.items():
        by_cpu = median_of_rounds(name, lambda v, b: b.cpu_ns_per_request / v.cpu_ns_per_request)
        loop = tight["prometheus" if name == "prometheus" else "tracked"]
        print(
            f"{name}: worker CPU added {ns / 1e3:.1f} µs/request = {ns / loop:.1f}x its tight "
            f"loop ({loop / 1e3:.2f} µs); by CPU {by_cpu:.3f}x untracked"
        )
    goals = {
        "tracked": GOAL_TRACKED,
        "tracked + archive": GOAL_ARCHIVED,
        "tracked + archive + rollups": GOAL_ARCHIVED,
    }
    for name, goal in goals.items():
        if name in figures:
            met = "met" if figures[name] >= goal else "NOT met"
            print(
                f"{kind} {name} / untracked requests/s: {figures[name]:.3f}x (goal ≥ {goal}): {met}"
            )
    in_server = added["tracked"] / tight["tracked"]
    met = "met" if in_server <= GOAL_IN_SERVER else "NOT met"
    print(f"{kind} tracker in the server: {in_server:.1f}x the tight loop (goal ≤ 2x): {met}")
    figures["in-server x tight loop"] = in_server
    return figures


COLLECTOR = re.compile(r"COLLECTOR \d+ ((?:\d+ ){6}\d+)")


def report_collector(kind: str, servers: dict[str, Server]) -> None:
    """What the cycle collector cost each variant's workers, from their logs (stopped):
    its thread CPU per generation per request, and its full collections, from each
    worker's ``served_app.GC_WARM_UP``-th request on."""
    print(
        f"\n{kind}: the cycle collector in the workers, from each one's "
        "1 000th request on (thread CPU per request)\n\n"
        "| variant | young collections µs | middle µs | full µs | full collections "
        "| ms each | requests |\n|---|---:|---:|---:|---:|---:|---:|"
    )
    for name, server in servers.items():
        totals = [0] * 7  # requests, ns per generation, collections per generation
        for found in COLLECTOR.finditer(server.log.read_text(errors="replace")):
            for i, value in enumerate(found.group(1).split()):
                totals[i] += int(value)
        requests, ns, n = totals[0], totals[1:4], totals[4:7]
        if not requests:
            print(f"| {name} | no worker reported |  |  |  |  |  |")
            continue
        per = [x / requests / 1e3 for x in ns]
        each = ns[2] / n[2] / 1e6 if n[2] else 0.0
        print(
            f"| {name} | {per[0]:.1f} | {per[1]:.1f} | {per[2]:.1f} | {n[2]} | {each:.1f} "
            f"| {requests:,} |"
        )


def py_spy() -> str | None:
    for candidate in PY_SPY:
        if found := shutil.which(candidate):
            return found
    return None


# Where a worker's samples go: the first matching rule names a sample's category.
CATEGORIES = [
    ("tracker block (live.track and the tracker, in the view)", "tracked (", "ferrox_stats"),
    ("the rest of the tracked view", "tracked (", ""),
    ("heartbeat: the state document (breakdown fold, octaves)", "Heartbeat.document", ""),
    ("heartbeat: the rest (host file, database row)", "Heartbeat._run", ""),
    ("archive writer thread", "ArchiveWriter", ""),
    ("other ferrox_stats code", "ferrox_stats/", ""),
    ("gunicorn + Django outside the view", "", ""),
]


def categorize(raw: Path) -> tuple[int, collections.Counter[str], collections.Counter[str]]:
    """py-spy's raw samples: their total, count per category, and the tracker block's by
    its innermost frame."""
    total = 0
    counts: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        # Under ASGI every request enters through ferrox_stats.asgi.wrap's application:
        # its frame is left out, or everything beneath it would count as ours.
        frames = [f for f in stack.split(";") if not f.startswith("wrap.<locals>.application")]
        for name, outer, inner in CATEGORIES:
            at = next((i for i, f in enumerate(frames) if outer in f), None)
            if at is None or not any(inner in f for f in frames[at + 1 :] or [""]):
                continue
            counts[name] += n
            if name.startswith("tracker block"):
                leaves[frames[-1].split(" (")[0]] += n
            break
    return total, counts, leaves


def profile(
    kind: str,
    database_url: str,
    archive: bool,
    args: argparse.Namespace,
    tmp: Path,
    spy: str,
    tight: dict[str, float],
) -> None:
    """A server of its own with timed views: py-spy (GIL-holding samples) on its workers
    while wrk drives ``/tracked``, then both views' own thread CPU as the workers counted."""
    metrics = tmp / f"{kind}-profile-metrics"
    metrics.mkdir()
    sink = "archive" if archive else "memory"
    env = {**bench_env(database_url, sink=sink, metrics_dir=metrics, groups=args.groups)}
    env["FERROX_BENCH_TIME_VIEWS"] = "1"
    server = start(f"{kind}-profile", kind, env, tmp)
    try:
        wrk(server, "/plain", 1.0, args.connections)
        wrk(server, "/prometheus", 1.0, args.connections)
        wrk(server, "/tracked", 5.0, args.connections)  # past the first heartbeats
        outputs, spies = [], []
        for pid in server.workers:
            out = tmp / f"spy-{pid}.txt"
            outputs.append(out)
            spies.append(
                subprocess.Popen(
                    [spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "1000",
                     "--duration", f"{args.seconds * 2:.0f}", "--gil", "--threads",
                     "--nonblocking", "--output", str(out)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                )
            )  # fmt: skip
        time.sleep(0.5)
        run = wrk(server, "/tracked", args.seconds * 2 - 1, args.connections)
        for process in spies:
            _, err = process.communicate(timeout=args.seconds * 2 + 30)
            if process.returncode != 0:
                raise RuntimeError(f"py-spy failed: {err.decode(errors='replace')[-500:]}")
        for path in ("/plain", "/prometheus", "/tracked") * 2:
            wrk(server, path, args.seconds, args.connections)
    finally:
        stop(server)
    total, counts, leaves = 0, collections.Counter[str](), collections.Counter[str]()
    for out in outputs:
        t, c, leaf = categorize(out)
        total, counts, leaves = total + t, counts + c, leaves + leaf
    cpu_us = run.cpu_ns_per_request / 1e3
    print(
        f"\n{kind} ({'archive' if archive else 'memory'}), py-spy --gil on {len(outputs)} workers "
        f"while wrk drove /tracked: {total} samples, {run.requests} requests, worker CPU "
        f"{cpu_us:.0f} µs/request (shares below times it: µs/request)\n\n"
        "| where | share of samples | µs/request |\n|---|---:|---:|"
    )
    for name, _, _ in CATEGORIES:
        share = counts[name] / max(total, 1)
        print(f"| {name} | {100 * share:.1f} % | {share * cpu_us:.1f} |")
    block = counts[CATEGORIES[0][0]]
    print("the tracker block's samples by innermost frame:")
    for frame, n in leaves.most_common(12):
        print(f"  {100 * n / max(block, 1):5.1f} %  {frame}")
    timed: dict[str, list[int]] = {}
    for line in server.log.read_text(errors="replace").splitlines():
        if line.startswith("TIMED "):
            _, view, _, requests, ns = line.split()
            tally = timed.setdefault(view, [0, 0])
            tally[0] += int(ns)
            tally[1] += int(requests)
    if {"plain", "tracked", "prometheus"} <= timed.keys():
        per = {view: ns / requests / 1e3 for view, (ns, requests) in timed.items()}
        tracker, prom = per["tracked"] - per["plain"], per["prometheus"] - per["plain"]
        print(
            "each view's own thread CPU, counted in the workers (µs/request): plain "
            f"{per['plain']:.1f}, prometheus {per['prometheus']:.1f}, tracked "
            f"{per['tracked']:.1f}; so in situ the tracker costs {tracker:.1f} µs "
            f"({tracker * 1e3 / tight['tracked']:.1f}x its tight loop), prometheus_client "
            f"{prom:.1f} µs ({prom * 1e3 / tight['prometheus']:.1f}x its tight loop): "
            f"tracker ÷ prometheus in situ {tracker / prom:.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--kind", nargs="+", choices=sorted(KINDS), default=["sync", "uvicorn"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=4.0, help="wrk duration per run")
    parser.add_argument("--connections", type=int, default=2 * WORKERS)
    parser.add_argument("--quick", action="store_true", help="3 rounds of 2 s, sync only")
    parser.add_argument("--profile", action="store_true", help="py-spy the tracked view")
    parser.add_argument(
        "--groups",
        type=int,
        default=1,
        help="label sets (model, key) the tracked view cycles through: rollup groups",
    )
    parser.add_argument("--server", default=SERVER, help="PostgreSQL URL without a database")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.kind = 3, 2.0, ["sync"]
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if shutil.which("wrk") is None:
        print("served.py: skipped, wrk is not installed (Debian: apt-get install -y wrk)")
        return
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    versions = ", ".join(
        f"{name} {importlib.metadata.version(name)}" for name in ("django", "gunicorn", "uvicorn")
    )
    wrk_version = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split("\n")[
        0
    ]
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, python "
        f"{platform.python_version()}, {versions}, {wrk_version.strip()}; {os.cpu_count()} cores, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"wrk -t1 -c{args.connections} -d{args.seconds:g}s per run; {args.rounds} interleaved "
        "rounds; worker CPU from /proc/<pid>/stat"
    )
    database_url = pg_database(args.server)
    archive = database_url is not None
    if database_url is None:
        database_url = "sqlite:///" + str(Path(tempfile.gettempdir()) / "ferrox_bench_served.db")
    sys.path.insert(0, str(BENCH))
    tight = tight_loop_ns(20_000, 5)
    print(
        f"tight loops in this process (thread CPU): the view's live.track block "
        f"{tight['tracked']:.0f} ns/request, its prometheus_client updates "
        f"{tight['prometheus']:.0f} ns/request"
    )
    tmp = Path(tempfile.mkdtemp(prefix="servedbench_"))
    tracked_archived = 0
    try:
        migrate(bench_env(database_url, sink="archive", metrics_dir=tmp))
        for kind in args.kind:
            with serving(kind, database_url, archive, tmp, args.groups) as servers:
                runs = measure(servers, args.rounds, args.seconds, args.connections)
            report(kind, runs, tight)
            report_collector(kind, servers)
            if args.profile:
                if spy := py_spy():
                    profile(kind, database_url, archive, args, tmp, spy, tight)
                else:
                    print("--profile: py-spy not found (pip install py-spy in a venv)")
            if archive:
                tracked_archived += sum(r.requests for r in runs["tracked + archive"])
        if archive:
            rows = archived_rows(database_url)
            print(
                f"\narchived rows after the servers stopped: {rows:,} (timed requests of "
                f"'tracked + archive': {tracked_archived:,}, plus warm-ups)"
            )
    except BaseException:
        for log in sorted(tmp.glob("*.log")):
            if log.stat().st_size:
                print(f"--- {log.name}:\n{log.read_text(errors='replace')[-3000:]}")
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if archive:
            drop_database(args.server)
    print(f"load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
