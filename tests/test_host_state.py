"""The host's state files (``ferrox_stats.host_state``): publish, read, fold what ended."""

from __future__ import annotations

import fcntl
import json
import logging
import multiprocessing
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferrox_stats import host_state, octave
from ferrox_stats.core.breakdown import DISTRIBUTIONS
from ferrox_stats.core.distribution import Distribution
from ferrox_stats.core.requests import Record
from ferrox_stats.host_state import RETIRED, file_name, host_totals, publish
from ferrox_stats.live import Recorder
from ferrox_stats.state import process_state
from tests.conftest import FakeClock


def now_ms() -> int:
    return int(time.time() * 1000)


def dead_pid() -> int:
    """The pid of a process that certainly ran and certainly ended (reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def state(
    instance: str,
    *,
    pid: int | None = None,
    completed: int = 0,
    active: int = 0,
    pending: int = 0,
    stopped: bool = False,
    at_ms: int | None = None,
    started_ms: int | None = None,
    aborts: dict[str, int] | None = None,
    archive: bool = True,
    gauges: dict[str, Any] | None = None,
    breakdown: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A process's state document (the shape of ``ferrox_stats.state.process_state``)."""
    rate = {"amount": 0.0, "span_s": 0.0, "samples": 0, "window_s": 5.0}
    return {
        "version": 1,
        "instance": instance,
        "replica": "test-replica",
        "host": socket.gethostname(),
        "pid": os.getpid() if pid is None else pid,
        "started_ms": now_ms() - 1000 if started_ms is None else started_ms,
        "at_ms": now_ms() if at_ms is None else at_ms,
        "uptime_s": 1.0,
        "stopped": stopped,
        "serving": {
            "active": active,
            "completed": completed,
            "aborts": aborts or {},
            "prompt_tokens_total": 10 * completed,
            "completion_tokens_total": 20 * completed,
        },
        "rates": {"decode": dict(rate), "prefill": dict(rate)},
        "breakdown": breakdown or [],
        "gauges": gauges or {"pool_occupancy": None, "queue_depth": None, "refused": 0},
        "recorded_total": completed,
        "sink_errors": 0,
        "archive": {
            "accepted": completed,
            "persisted": completed - pending,
            "duplicates": 0,
            "pending": pending,
            "dropped": {},
            "dead_lettered": 0,
        }
        if archive
        else None,
    }


@pytest.fixture
def metrics_dir(settings: Any, tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "metrics"
    settings.FERROX_STATS = {**settings.FERROX_STATS, "METRICS_DIR": str(where)}
    host_state.reset()
    yield where
    host_state.reset()


def files(where: Path) -> list[str]:
    return sorted(p.name for p in where.iterdir() if not p.name.startswith("."))


def completed(totals: host_state.HostTotals) -> int:
    return int(totals.state["serving"]["completed"])


# -- publish -----------------------------------------------------------------------------


def test_publish_writes_one_file_per_instance_in_a_private_directory(metrics_dir: Path) -> None:
    assert publish(state("web/1/aa", completed=3))
    assert publish(state("web/1/aa", completed=4))
    assert publish(state("web/2/bb", completed=5))
    assert files(metrics_dir) == sorted([file_name("web/1/aa"), file_name("web/2/bb")])
    assert metrics_dir.stat().st_mode & 0o777 == 0o700
    written = json.loads((metrics_dir / file_name("web/1/aa")).read_text())
    assert written["serving"]["completed"] == 4


def test_publish_writes_a_process_state_document_as_it_is(
    metrics_dir: Path, clock: FakeClock
) -> None:
    recorder = Recorder(replica="r", clock=clock, instance="r/1/abc")
    recorder.ingested(Record(model="m", route="/x", duration_ms=1500.0))
    doc = process_state(recorder)
    assert publish(doc)
    # Version 2: already at power-of-two resolution, so written with nothing gathered,
    # its breakdown by column (one list per field, cell i's value at i).
    written = json.loads((metrics_dir / file_name("r/1/abc")).read_text())
    assert {**written, "breakdown": None} == {**doc, "breakdown": None}
    [cell] = doc["breakdown"]
    assert written["breakdown"] == {
        **{column: [cell[column]] for column in octave.COLUMNS},
        **{name: {field: [cell[name][field]] for field in octave.FIELDS} for name in DISTRIBUTIONS},
    }
    cells = host_totals().cells
    [key] = cells.keys
    assert (cells.count_at_most("duration", key, 0), cells.count_at_most("duration", key, 1)) == (
        0,
        1,
    )


def test_publish_gathers_an_older_document_by_octave(metrics_dir: Path) -> None:
    full = Distribution()
    full.add_many([1.1, 1.2, 3.0])
    cell = {
        "model": "m",
        "route": "/x",
        "outcome": "ok",
        "requests": 3,
        "input_tokens": 0,
        "output_tokens": 0,
        **{name: full.to_wire() for name in DISTRIBUTIONS},
    }
    assert publish(state("web/1/aa", breakdown=[cell]))
    written = json.loads((metrics_dir / file_name("web/1/aa")).read_text())
    assert written["resolution"] == "octave"
    assert written["breakdown"][0]["duration"]["counts"] == {"63": 2, "95": 1}


def test_file_names_are_safe_and_distinct() -> None:
    assert file_name("a/b") != file_name("a_b")
    name = file_name("../../etc/passwd\x00" + "x" * 500)
    assert "/" not in name and "\x00" not in name and len(name) < 120
    assert name.endswith(".json") and name != RETIRED


def test_an_older_document_never_replaces_a_newer_one(metrics_dir: Path) -> None:
    assert publish(state("w/1/a", completed=9, at_ms=2000))
    assert not publish(state("w/1/a", completed=7, at_ms=1000))
    assert completed(host_totals()) == 9


def test_publish_never_raises_and_logs_once(
    settings: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    settings.FERROX_STATS = {**settings.FERROX_STATS, "METRICS_DIR": str(blocker / "sub")}
    host_state.reset()
    with caplog.at_level(logging.WARNING, logger="ferrox_stats.metrics"):
        assert not publish(state("w/1/a"))
        assert not publish(state("w/1/a", at_ms=now_ms() + 1))
    assert host_state.failures == 2
    assert len(caplog.records) == 1
    host_state.reset()


def test_a_directory_others_may_write_is_refused(metrics_dir: Path) -> None:
    metrics_dir.mkdir(mode=0o700)
    (metrics_dir / file_name("w/9/planted")).write_text(json.dumps(state("w/9/planted")))
    metrics_dir.chmod(0o777)
    mine = state("w/1/mine", completed=2)
    assert not publish(mine)
    totals = host_totals(mine)
    assert not totals.host_wide
    assert (completed(totals), totals.instances) == (2, 1)


def test_the_default_directory_is_per_settings_module_and_user() -> None:
    where = host_state.default_directory()
    assert where.startswith(os.path.join(__import__("tempfile").gettempdir(), "ferrox_stats-"))
    assert "tests.settings" in where
    assert where.endswith(f"-{os.getuid()}")


def test_the_default_directory_stays_put_under_overridden_settings(settings: Any) -> None:
    before = host_state.default_directory()
    settings.FERROX_STATS = {"REPLICA": "other"}  # override_settings hides SETTINGS_MODULE
    assert host_state.default_directory() == before


# -- reading the host --------------------------------------------------------------------


def test_the_host_is_the_sum_of_its_running_processes(metrics_dir: Path) -> None:
    publish(state("w/1/a", completed=3, active=1, aborts={"client_disconnect": 1}))
    publish(state("w/2/b", completed=4, active=2, aborts={"client_disconnect": 2}))
    totals = host_totals()
    assert totals.instances == 2
    assert completed(totals) == 7
    assert totals.state["serving"]["active"] == 3
    assert totals.state["serving"]["aborts"] == {"client_disconnect": 3}
    assert totals.skipped == 0 and totals.host_wide


def test_the_callers_own_document_stands_in_for_its_file(metrics_dir: Path) -> None:
    publish(state("w/1/a", completed=3))
    fresher = state("w/1/a", completed=5)
    assert completed(host_totals(fresher)) == 5
    assert host_totals(fresher).instances == 1


def test_an_ended_process_is_folded_and_its_counters_stay(metrics_dir: Path) -> None:
    gone = dead_pid()
    publish(state("w/1/a", completed=3, active=1))
    publish(state(f"w/{gone}/b", pid=gone, completed=7, active=2, pending=4))
    before = host_totals()
    assert completed(before) == 10
    # Its file is folded into retired.json: what ran there no more, what it finished stays.
    assert files(metrics_dir) == sorted([RETIRED, file_name("w/1/a")])
    assert before.instances == 1
    assert before.state["serving"]["active"] == 1
    assert before.state["archive"]["pending"] == 0
    assert before.lost == {"instances": 1, "pending": 4}
    # A new worker takes its place: the host's counters only go up.
    publish(state("w/3/c", completed=1))
    after = host_totals()
    assert completed(after) == 11
    assert after.state["serving"]["prompt_tokens_total"] == 110
    assert after.state["archive"]["accepted"] == 11


def test_a_stopped_process_is_folded_without_counting_it_lost(metrics_dir: Path) -> None:
    publish(state("w/1/a", completed=2, stopped=True))  # our own pid: the mark decides
    totals = host_totals()
    assert (completed(totals), totals.instances, totals.lost["instances"]) == (2, 0, 0)
    assert files(metrics_dir) == [RETIRED]


def test_folding_accumulates_across_generations(metrics_dir: Path) -> None:
    seen = []
    for generation in range(4):
        pid = dead_pid()
        publish(state(f"w/{pid}/{generation}", pid=pid, completed=generation + 1))
        seen.append(completed(host_totals()))
    assert seen == [1, 3, 6, 10]
    assert files(metrics_dir) == [RETIRED]


def test_a_reused_pid_is_told_apart_by_its_start_time(metrics_dir: Path) -> None:
    parent = os.getppid()  # alive, and started long after 1970
    publish(state("w/p/old", pid=parent, started_ms=1000, completed=5))
    publish(state("w/p/now", pid=parent, completed=1))
    totals = host_totals()
    assert (completed(totals), totals.instances) == (6, 1)
    assert files(metrics_dir) == sorted([RETIRED, file_name("w/p/now")])


def test_a_fold_in_progress_elsewhere_is_never_waited_for_nor_double_counted(
    metrics_dir: Path,
) -> None:
    gone = dead_pid()
    publish(state("w/1/a", completed=1))
    publish(state(f"w/{gone}/b", pid=gone, completed=2, active=5))
    with open(metrics_dir / ".fold.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        held = host_totals()
    assert (completed(held), held.state["serving"]["active"]) == (3, 0)
    assert RETIRED not in files(metrics_dir)
    assert completed(host_totals()) == 3
    assert RETIRED in files(metrics_dir)


def test_a_folder_that_died_before_unlinking_is_finished_without_double_counting(
    metrics_dir: Path,
) -> None:
    gone = dead_pid()
    publish(state(f"w/{gone}/b", pid=gone, completed=2))
    host_totals()
    # As if the folder wrote retired.json and died before deleting the file it folded.
    publish(state(f"w/{gone}/b", pid=gone, completed=2, at_ms=now_ms() + 10))
    assert completed(host_totals()) == 2
    assert files(metrics_dir) == [RETIRED]


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("junk.json", b"{not json"),
        ("old.json", json.dumps({"version": 0, "instance": "x"}).encode()),
        ("list.json", b"[1, 2, 3]"),
        ("negative.json", json.dumps(state("w/n/n", completed=-1)).encode()),
        ("deep.json", b"[" * 100_000),
        ("binary.json", b"\xff\xfe\x00"),
    ],
)
def test_a_file_not_understood_is_skipped_counted_and_logged_once(
    metrics_dir: Path, caplog: pytest.LogCaptureFixture, name: str, content: bytes
) -> None:
    publish(state("w/1/a", completed=3))
    (metrics_dir / name).write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="ferrox_stats.metrics"):
        first, second = host_totals(), host_totals()
    assert (completed(first), first.skipped, second.skipped) == (3, 1, 1)
    assert [r.getMessage() for r in caplog.records if name in r.getMessage()] != []
    assert len(caplog.records) == 1


def test_a_symlink_is_not_followed(metrics_dir: Path, tmp_path: Path) -> None:
    publish(state("w/1/a", completed=3))
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(state("w/2/b", completed=100)))
    (metrics_dir / "link.json").symlink_to(elsewhere)
    totals = host_totals()
    assert (completed(totals), totals.skipped) == (3, 1)


def test_a_leftover_temporary_file_is_swept_once_old(metrics_dir: Path) -> None:
    publish(state("w/1/a"))
    old = metrics_dir / ".w_1_a.json.abc.tmp"
    fresh = metrics_dir / ".w_2_b.json.def.tmp"
    old.write_text("{")
    fresh.write_text("{")
    long_ago = time.time() - host_state.TMP_KEEP_S - 10
    os.utime(old, (long_ago, long_ago))
    host_totals()
    assert not old.exists() and fresh.exists()


def test_the_freshest_gauge_wins_and_an_unmeasured_one_is_none(metrics_dir: Path) -> None:
    at = now_ms()
    publish(
        state(
            "w/1/a",
            at_ms=at,
            gauges={"pool_occupancy": {"value": 0.5, "age_s": 3.0}, "queue_depth": None},
        )
    )
    publish(
        state(
            "w/2/b",
            at_ms=at,
            gauges={"pool_occupancy": {"value": 0.25, "age_s": 1.0}, "queue_depth": None},
        )
    )
    totals = host_totals()
    assert totals.pool_occupancy == 0.25
    assert totals.queue_depth is None


def test_a_gauge_older_than_gauge_max_age_is_none(metrics_dir: Path) -> None:
    publish(state("w/1/a", gauges={"pool_occupancy": {"value": 0.5, "age_s": 61.0}}))
    assert host_totals().pool_occupancy is None


# -- many processes at once ----------------------------------------------------------------


def _publisher(index: int, rounds: int) -> None:
    """Publish ``rounds`` documents, reading the host (and folding) every 20; exit 1 if a
    read ever failed or went backwards."""
    seen = [0]
    try:
        for n in range(1, rounds + 1):
            publish(state(f"w/{os.getpid()}/{index}", completed=n, at_ms=n))
            if n % 20 == 0:
                totals = host_totals()
                seen.append(completed(totals) if totals.skipped == 0 else -1)
    finally:
        os._exit(0 if seen == sorted(seen) and min(seen) >= 0 else 1)


def test_concurrent_publishers_readers_and_folders_count_each_process_exactly_once(
    metrics_dir: Path,
) -> None:
    rounds = [100, 200, 300, 400]  # they end one after another, while the others read
    publish(state("w/reader/0", completed=0))
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=_publisher, args=(i, n)) for i, n in enumerate(rounds)]
    for child in children:
        child.start()
    seen = []
    try:
        # is_alive() reaps a child that exited: its pid is dead, and any reader folds it.
        while any(child.is_alive() for child in children) and len(seen) < 5000:
            totals = host_totals()
            assert totals.skipped == 0
            seen.append(completed(totals))
    finally:
        for child in children:
            child.join(timeout=60)
            if child.is_alive():  # pragma: no cover - a hung child must not outlive the test
                child.kill()
                child.join()
    assert [child.exitcode for child in children] == [0] * len(children)
    final = host_totals()
    seen.append(completed(final))
    assert completed(final) == sum(rounds)
    assert final.instances == 1
    assert seen == sorted(seen)
    assert files(metrics_dir) == sorted([RETIRED, file_name("w/reader/0")])


# -- power-of-two resolution ---------------------------------------------------------------


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), max_size=200))
def test_the_files_keep_every_power_of_two_bound_exact(values: list[float]) -> None:
    from ferrox_stats.core.distribution import Distribution

    full = Distribution()
    for v in values:
        full.add(v)
    cell = {name: full.to_wire() for name in ("duration", "ttft", "tpot", "input", "output")}
    doc = host_state.by_octave({"breakdown": [cell]})
    coarse = Distribution.from_wire(doc["breakdown"][0]["duration"])
    assert (coarse.count, coarse.total, coarse.zeros) == (full.count, full.total, full.zeros)
    for exponent in range(-12, 22):
        assert coarse.count_at_most(2.0**exponent) == full.count_at_most(2.0**exponent)
    assert len(coarse.counts) == len({i // 32 for i in full.counts})  # one per power of two


# -- the octave form (state version 2) -----------------------------------------------------


def octave_cell(**changes: Any) -> dict[str, Any]:
    """A cell in the octave form: one request of 1.5 s, 3 input and 7 output tokens."""
    cell: dict[str, Any] = {
        "model": "m",
        "route": "r",
        "outcome": "ok",
        "requests": 1,
        "input_tokens": 3,
        "output_tokens": 7,
        "duration": {"zeros": 0, "sum": 1.5, "offset": 1, "counts": [1]},
        "ttft": {"zeros": 1, "sum": 0.0, "offset": 0, "counts": []},
        "tpot": {"zeros": 0, "sum": 0.0, "offset": 0, "counts": []},
        "input": {"zeros": 0, "sum": 3.0, "offset": 2, "counts": [1]},
        "output": {"zeros": 0, "sum": 7.0, "offset": 3, "counts": [1]},
    }
    for path, value in changes.items():
        *outer, last = path.split("__")
        into = cell
        for key in outer:
            into = into[key]
        into[last] = value
    return cell


def octave_state(instance: str, *cells: dict[str, Any], **fields: Any) -> dict[str, Any]:
    doc = state(instance, completed=len(cells), **fields)
    return {**doc, "version": octave.VERSION, "resolution": "octave", "breakdown": list(cells)}


def requests_of(totals: host_state.HostTotals) -> int:
    return sum(totals.cells.requests)


def test_version_1_and_2_files_are_read_together(metrics_dir: Path) -> None:
    """A rolling upgrade: workers of the previous release write version 1."""
    publish(octave_state("w/1/new", octave_cell()))
    old = state("w/2/old", completed=1)
    old["breakdown"] = octave.keyed([octave_cell()])
    publish(old)
    totals = host_totals()
    assert (totals.skipped, totals.instances, completed(totals)) == (0, 2, 2)
    key = ("m", "r", "ok")
    assert totals.cells.keys == [key]
    assert totals.cells.requests == [2]
    assert totals.cells.count_at_most("duration", key, 0) == 0
    assert totals.cells.count_at_most("duration", key, 1) == 2
    assert totals.cells.count_at_most("ttft", key, -10) == 2
    assert totals.cells.count_at_most("output", key, 3) == 2
    assert totals.cells.sums["duration"] == [3.0]


@pytest.mark.parametrize(
    "changes",
    [
        {"requests": -1},
        {"requests": True},
        {"input_tokens": 1.0},
        {"model": 7},
        {"route": "r" * 1001},
        {"outcome": "fine"},
        {"duration__zeros": -1},
        {"duration__sum": float("nan")},
        {"duration__sum": float("inf")},
        {"duration__sum": -1.0},
        {"duration__sum": "1.5"},
        {"duration__offset": 1.0},
        {"duration__offset": -5000},
        {"duration__offset": 1023, "duration__counts": [1, 1, 1]},  # past the largest float
        {"duration__counts": [1, -1]},
        {"duration__counts": [1.5]},
        {"duration__counts": [True]},
        {"duration__counts": ["1"]},
        {"duration__counts": {"33": 1}},
        {"duration__counts": [2**63 - 1, 1]},
        {"tpot": []},
    ],
)
def test_an_octave_breakdown_not_understood_is_skipped(
    metrics_dir: Path, changes: dict[str, Any]
) -> None:
    publish(octave_state("w/1/a", octave_cell()))
    bad = octave_state("w/2/bad", octave_cell(**changes))
    (metrics_dir / file_name("w/2/bad")).write_text(json.dumps(bad))  # NaN too
    totals = host_totals()
    assert (totals.skipped, requests_of(totals), completed(totals)) == (1, 1, 1)


def by_column(*cells: dict[str, Any]) -> dict[str, Any]:
    """Cells by column, as ``publish`` writes them (built here field by field, so a
    broken cell stays as broken)."""
    return {
        **{column: [cell[column] for cell in cells] for column in octave.COLUMNS},
        **{
            name: {field: [cell[name][field] for cell in cells] for field in octave.FIELDS}
            for name in DISTRIBUTIONS
        },
    }


def test_publish_writes_the_breakdown_by_column(metrics_dir: Path) -> None:
    cells = [octave_cell(), octave_cell(route="s", requests=2, duration__counts=[0, 2])]
    assert publish(octave_state("w/1/a", *cells))
    written = json.loads((metrics_dir / file_name("w/1/a")).read_text())
    assert written["breakdown"] == by_column(*cells)
    totals = host_totals()
    assert (totals.skipped, totals.cells.keys, totals.cells.requests) == (
        0,
        [("m", "r", "ok"), ("m", "s", "ok")],
        [1, 2],
    )
    assert totals.cells.count_at_most("duration", ("m", "s", "ok"), 2) == 2


def test_an_empty_breakdown_is_written_and_read_by_column(metrics_dir: Path) -> None:
    assert publish(octave_state("w/1/a"))
    written = json.loads((metrics_dir / file_name("w/1/a")).read_text())
    assert written["breakdown"] == by_column()
    totals = host_totals()
    assert (totals.skipped, totals.cells.keys, completed(totals)) == (0, [], 0)


def test_a_version_2_file_of_cells_is_still_read(metrics_dir: Path) -> None:
    """No release wrote one (the columns came first), but it is the document itself."""
    publish(octave_state("w/1/a", octave_cell(requests=2)))
    doc = octave_state("w/2/cells", octave_cell())
    (metrics_dir / file_name("w/2/cells")).write_text(json.dumps(doc))
    totals = host_totals()
    assert (totals.skipped, requests_of(totals), completed(totals)) == (0, 3, 2)


@pytest.mark.parametrize(
    "changes",
    [
        {"requests": -1},
        {"requests": True},
        {"output_tokens": None},
        {"input_tokens": 1.0},
        {"model": 7},
        {"model": ["m"]},
        {"route": "r" * 1001},
        {"outcome": "fine"},
        {"duration__zeros": -1},
        {"duration__zeros": False},
        {"ttft__sum": float("nan")},
        {"duration__sum": float("inf")},
        {"duration__sum": 1e308},  # with the other cell's: past the largest float
        {"duration__sum": -1.0},
        {"duration__sum": True},
        {"input__sum": "3"},
        {"duration__offset": 1.0},
        {"duration__offset": True},
        {"duration__offset": -5000},
        {"output__offset": 1023, "output__counts": [1, 1, 1]},  # past the largest float
        {"duration__offset": 10**400},
        {"duration__counts": [1, -1]},
        {"duration__counts": [1.5]},
        {"duration__counts": [True]},
        {"duration__counts": [None]},
        {"tpot__counts": ["1"]},
        {"duration__counts": {"33": 1}},
        {"duration__counts": 1},
        {"duration__counts": [2**63 - 1, 1]},
        {"duration__counts": [10**400]},
        {"route": "r2", "model": "m2"},  # the other cell's key: one key twice
    ],
)
def test_a_columnar_breakdown_not_understood_is_skipped(
    metrics_dir: Path, changes: dict[str, Any]
) -> None:
    publish(octave_state("w/1/a", octave_cell()))
    good = octave_cell(model="m2", route="r2", duration__sum=1e308)
    bad = octave_state("w/2/bad", good, octave_cell(**changes))
    bad["breakdown"] = by_column(*bad["breakdown"])
    (metrics_dir / file_name("w/2/bad")).write_text(json.dumps(bad))  # NaN too
    totals = host_totals()
    assert (totals.skipped, requests_of(totals), completed(totals)) == (1, 1, 1)


def _without(columns: dict[str, Any], column: str) -> dict[str, Any]:
    return {key: value for key, value in columns.items() if key != column}


def _with(columns: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    columns = json.loads(json.dumps(columns))
    *outer, last = path.split("__")
    into = columns
    for key in outer:
        into = into[key]
    into[last] = value
    return columns


TWO_CELLS = by_column(octave_cell(), octave_cell(route="s"))


@pytest.mark.parametrize(
    "columns",
    [
        None,
        "columns",
        [TWO_CELLS],
        _without(TWO_CELLS, "requests"),
        _without(TWO_CELLS, "tpot"),
        _with(TWO_CELLS, "ttft", [[0, 0.0, 0, []], [0, 0.0, 0, []]]),
        _with(TWO_CELLS, "ttft", {"zeros": [0, 0], "sum": [0.0, 0.0], "offset": [0, 0]}),
        _with(TWO_CELLS, "model", "mm"),  # a string, not a list of two
        _with(TWO_CELLS, "model", {"0": "m", "1": "m"}),
        _with(TWO_CELLS, "requests", [1]),  # columns of different lengths
        _with(TWO_CELLS, "outcome", ["ok", "ok", "ok"]),
        _with(TWO_CELLS, "duration__counts", [[1]]),
        _with(TWO_CELLS, "output__sum", [7.0, 7.0, 7.0]),
        _with(TWO_CELLS, "input__zeros", []),
        _with(TWO_CELLS, "input__offset", (2, 2)),  # a tuple is no column of a file
        {
            **{column: [] for column in octave.COLUMNS},
            **{name: {field: [0] for field in octave.FIELDS} for name in DISTRIBUTIONS},
        },
    ],
)
def test_columns_of_the_wrong_shape_are_refused(metrics_dir: Path, columns: Any) -> None:
    with pytest.raises(ValueError, match="octave form"):
        octave.of_columns(columns)
    if type(columns) is dict and type(columns.get("input", {}).get("offset")) is tuple:
        return  # JSON has no tuples
    publish(octave_state("w/1/a", octave_cell()))
    bad = octave_state("w/2/bad")
    bad["breakdown"] = columns
    (metrics_dir / file_name("w/2/bad")).write_text(json.dumps(bad))
    totals = host_totals()
    assert (totals.skipped, requests_of(totals), completed(totals)) == (1, 1, 1)


def test_columns_in_a_version_1_document_are_refused(metrics_dir: Path) -> None:
    publish(octave_state("w/1/a", octave_cell()))
    bad = state("w/2/bad", completed=1)
    bad["breakdown"] = TWO_CELLS
    (metrics_dir / file_name("w/2/bad")).write_text(json.dumps(bad))
    totals = host_totals()
    assert (totals.skipped, requests_of(totals), completed(totals)) == (1, 1, 1)


@given(st.lists(st.floats(min_value=0, max_value=1e12, allow_nan=False), max_size=60))
def test_columns_read_back_as_the_cells_they_came_from(values: list[float]) -> None:
    recorder = Recorder(replica="r", instance="r/1/abc")
    for i, value in enumerate(values):
        recorder.ingested(
            Record(
                model=f"m{i % 3}",
                route=f"/r{i % 2}",
                status=200 if i % 5 else 500,
                duration_ms=value,
                ttft_ms=value / 3,
                prompt_tokens=int(value) % 10_000,
                completion_tokens=i % 7,
            )
        )
    cells = process_state(recorder)["breakdown"]
    by_cells = octave.checked(cells)
    read = octave.of_columns(json.loads(json.dumps(octave.columns(cells))))
    for attribute in ("keys", "requests", "input_tokens", "output_tokens"):
        assert list(getattr(read, attribute)) == list(getattr(by_cells, attribute))
    for attribute in ("zeros", "sums", "offsets", "counts"):
        mine, theirs = getattr(read, attribute), getattr(by_cells, attribute)
        assert {name: list(mine[name]) for name in DISTRIBUTIONS} == {
            name: list(theirs[name]) for name in DISTRIBUTIONS
        }


@pytest.mark.parametrize(
    "breakdown",
    [
        {"cells": []},
        [[]],
        [octave_cell(), octave_cell()],  # one key twice
        [{k: v for k, v in octave_cell().items() if k != "ttft"}],
        [octave_cell(duration={"zeros": 0, "sum": 0.0, "counts": []})],
    ],
)
def test_a_breakdown_of_the_wrong_shape_is_refused(breakdown: Any) -> None:
    with pytest.raises(ValueError, match="octave form"):
        octave.checked(breakdown)


def test_retired_json_stays_readable_by_the_previous_release(metrics_dir: Path) -> None:
    """A worker of the previous release may fold next (a rolling upgrade): it reads
    only version 1, so retired.json is written in that form, counting the same."""
    from ferrox_stats.core.breakdown import Breakdown

    gone = dead_pid()
    publish(octave_state(f"w/{gone}/b", octave_cell(), pid=gone))
    before = host_totals()
    retired = json.loads((metrics_dir / RETIRED).read_text())
    assert retired["version"] == 1
    [(key, cell)] = Breakdown.merge_wire([retired["breakdown"]]).items()
    assert key == ("m", "r", "ok")
    assert (cell.requests, cell.duration.count_at_most(2.0), cell.duration.total) == (1, 1, 1.5)
    after = host_totals()  # read again (and converted once: see _read_retired)
    for totals in (before, after):
        assert (requests_of(totals), totals.cells.sums["duration"], totals.instances) == (
            1,
            [1.5],
            0,
        )


@given(st.lists(st.floats(min_value=0, max_value=1e9, allow_nan=False), max_size=50))
def test_the_own_document_is_read_into_the_octave_form_as_a_file_would_be(
    values: list[float],
) -> None:
    from ferrox_stats.core.breakdown import Cell

    cell = Cell()
    for name in ("duration", "ttft", "tpot"):
        getattr(cell, name).add_many(values)
    cell.input.add_many([round(v) for v in values])
    wire = [cell.to_wire(("m", "r", "ok"))]
    assert octave.from_keyed(wire, trusted=True) == octave.from_keyed(wire)
