"""This host's processes, as files: what a ``/metrics`` scrape of any worker reads.

Each process writes its state document (``ferrox_stats.state.process_state``) to
``METRICS_DIR/<instance>.json`` (``publish``: the heartbeat thread every ``HEARTBEAT_S``,
and a scrape just before it reads). ``host_totals`` merges every file of the directory, so
any worker answers for its whole host, with the database down as well as up.

Counters never go backwards when a worker restarts: the file of a process that is gone
(its pid no longer runs, or its last document carries the clean-shutdown mark) is folded
into ``retired.json``, summed with every process folded before, and deleted, so the
directory holds one file per running process plus one. Only wiping the directory (the
default one is under the system's temp dir: a reboot) resets the host's counters.

The files keep each distribution at power-of-two resolution: every ``le`` of the
exposition is a power of two, where that is still exact. A version 2 document
(``state.STATE_VERSION``) comes that way from ``process_state`` and is written with its
breakdown by column (``octave.columns``: one list per field, no key name repeated per
cell, a few ``zip``s; an older document is gathered first, ``by_octave``); a scrape
checks and sums the files by column, in C-level passes (``octave.of_columns``,
``octave.merged``); one of version 1 (a worker of the previous release, during a rolling
upgrade) is read into that form first, and so is a version 2 file of cells.
``retired.json`` stays in version 1's form, which both releases read (see ``_retire``).
The fleet's percentiles come from the heartbeat rows, at full resolution, not from these
files.

Consistent without a reader lock: a folder (one at a time, under an ``fcntl`` lock it never
waits for) writes ``retired.json``, naming the instances it folded, *before* it deletes
their files; a reader reads the process files first and ``retired.json`` last, and skips a
file whose instance ``retired.json`` names. Whatever the interleaving, each process's
counters are counted exactly once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import socket
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import octave
from .conf import conf
from .core.breakdown import DISTRIBUTIONS
from .core.distribution import SUB_BUCKETS
from .octave import Merged, Part
from .state import OCTAVE, READABLE_VERSIONS, merge_states

__all__ = [
    "MAX_FILE_BYTES",
    "RETIRED",
    "HostTotals",
    "by_octave",
    "directory",
    "host_totals",
    "octave_document",
    "publish",
    "usable",
]

logger = logging.getLogger("ferrox_stats.metrics")

RETIRED = "retired.json"
_LOCK = ".fold.lock"
# A state document past this size is not one of ours (a full breakdown is well under it).
MAX_FILE_BYTES = 32 * 1024 * 1024
# Seconds a folded instance stays named in retired.json after its file is gone: far
# longer than any reader takes between reading a process file and reading retired.json.
FOLDED_KEEP_S = 300.0
# Seconds after which a temporary file left by a writer that died mid-write is removed.
TMP_KEEP_S = 300.0
# Seconds of wall-clock slack when a pid's start time says it is another process.
PID_REUSE_SLACK_S = 60.0

LOST_KEYS = ("instances", "pending")
_EMPTY_RATE = {"amount": 0.0, "span_s": 0.0, "samples": 0, "window_s": 0.0}


@dataclass
class HostTotals:
    """What a scrape reads: ``state`` is ``merge_states`` over the running processes and
    everything retired (without its breakdown), ``cells`` that breakdown merged
    (``octave.merged``: cumulative counts at every power of two); ``instances`` counts
    running processes; ``pool_occupancy`` and
    ``queue_depth`` are the freshest measurement among them (None: nothing measured);
    ``lost`` counts processes that ended without the clean-shutdown mark and the records
    their last documents still had pending; ``skipped`` counts files not understood."""

    state: dict[str, Any]
    cells: Merged
    instances: int
    pool_occupancy: float | None = None
    queue_depth: float | None = None
    lost: dict[str, int] = field(default_factory=lambda: {"instances": 0, "pending": 0})
    skipped: int = 0
    host_wide: bool = True


# -- where -----------------------------------------------------------------------------


def default_directory() -> str:
    """Under the system temp dir, named for the settings module (and where it lives) and
    the user, so two projects on one host never share counters."""
    from django.conf import settings

    # override_settings() hides SETTINGS_MODULE (None) but not the environment's.
    module = str(
        getattr(settings, "SETTINGS_MODULE", None)
        or os.environ.get("DJANGO_SETTINGS_MODULE")
        or "settings"
    )
    # settings.configure() has no module: the program's own file tells projects apart.
    where = (
        getattr(sys.modules.get(module), "__file__", None)
        or getattr(sys.modules.get("__main__"), "__file__", None)
        or os.getcwd()
    )
    digest = hashlib.sha256(os.path.abspath(where).encode()).hexdigest()[:10]
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", module)[:60]
    return os.path.join(tempfile.gettempdir(), f"ferrox_stats-{safe}-{digest}-{os.getuid()}")


def directory() -> str:
    """``METRICS_DIR``, or the default."""
    return conf.METRICS_DIR or default_directory()


def file_name(instance: str) -> str:
    """A file name for ``instance``: readable, and distinct for distinct instances."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", instance)[:80]
    return f"{safe}-{hashlib.sha256(instance.encode()).hexdigest()[:12]}.json"


# -- logged once -----------------------------------------------------------------------

_warned: set[str] = set()
_warned_lock = threading.Lock()
failures = 0  # publishes that could not write (the process's own count)


def _warn_once(key: str, message: str, *args: Any) -> None:
    with _warned_lock:
        if key in _warned or len(_warned) > 1000:
            return
        _warned.add(key)
    logger.warning(message, *args)


def reset() -> None:
    """Forget what was logged and published (tests)."""
    global failures
    with _warned_lock:
        _warned.clear()
    with _publish_lock:
        _last_at_ms.clear()
    _retired_seen.clear()
    failures = 0


def usable() -> bool:
    """Whether this host's ``METRICS_DIR`` can be used now (see ``_usable``)."""
    return _usable(directory())


def _usable(path: str) -> bool:
    """Create the directory (0o700) if needed; refuse one another user could write to:
    a planted document would be counted as ours."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.stat(path)
    except OSError as exc:
        _warn_once(f"dir:{path}", "ferrox_stats: METRICS_DIR %s is unusable (%s)", path, exc)
        return False
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        _warn_once(
            f"owner:{path}",
            "ferrox_stats: METRICS_DIR %s is not this user's alone (owner uid %s, mode %o); "
            "/metrics answers for this process only",
            path,
            info.st_uid,
            stat.S_IMODE(info.st_mode),
        )
        return False
    return True


# -- writing ---------------------------------------------------------------------------

_publish_lock = threading.Lock()
_last_at_ms: dict[str, int] = {}


def _write_atomically(path: str, name: str, payload: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=path)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(payload)
        os.replace(tmp, os.path.join(path, name))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _octaves(wire: Mapping[str, Any]) -> dict[str, Any]:
    counts: dict[int, int] = {}
    for key, n in wire["counts"].items():
        # Bucket i lies in the power of two whose last bucket (upper bound 2^e) is top.
        top = int(key) // SUB_BUCKETS * SUB_BUCKETS + SUB_BUCKETS - 1
        counts[top] = counts.get(top, 0) + n
    return {
        "zeros": wire["zeros"],
        "sum": wire["sum"],
        "counts": {str(top): n for top, n in sorted(counts.items())},
    }


def by_octave(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` with each distribution's counts gathered into the last bucket of their
    power of two: ``count_at_most(2**k)``, ``count`` and ``total`` unchanged. Marked
    ``"resolution": "octave"``, and returned as it is when it already was."""
    if doc.get("resolution") == OCTAVE:
        return dict(doc)
    cells = [
        {**cell, **{name: _octaves(cell[name]) for name in DISTRIBUTIONS}}
        for cell in doc["breakdown"]
    ]
    return {**doc, "breakdown": cells, "resolution": OCTAVE}


def publish(doc: Mapping[str, Any], *, wait: bool = True) -> bool:
    """Write this process's state document where the host's scrapes read it, as JSON
    (at power-of-two resolution, as ``process_state`` makes it, its breakdown by column,
    ``octave.columns``; an older document is gathered by ``by_octave`` first); whether
    it was written. Never raises: a failure is logged once and counted (``failures``).

    One write at a time per process, and never an older document over a newer one (a
    counter must not step back). ``wait=False`` (a request thread) skips the write when
    another thread of this process is writing: that document is as fresh.
    """
    global failures
    if not _publish_lock.acquire(blocking=wait):
        return False
    try:
        instance = str(doc["instance"])
        at_ms = int(doc["at_ms"])
        if at_ms < _last_at_ms.get(instance, at_ms):
            return False
        path = directory()
        if not _usable(path):
            failures += 1
            return False
        if doc.get("resolution") != OCTAVE:
            doc = by_octave(doc)
        elif doc.get("version") == octave.VERSION and type(doc["breakdown"]) is list:
            doc = {**doc, "breakdown": octave.columns(doc["breakdown"])}
        # A tree of our own making: no need to look for cycles (a tenth of the encoding).
        payload = json.dumps(
            doc, separators=(",", ":"), allow_nan=False, check_circular=False
        ).encode()
        _write_atomically(path, file_name(instance), payload)
        _last_at_ms[instance] = at_ms
        return True
    except Exception as exc:
        failures += 1
        _warn_once("publish", "ferrox_stats: could not publish this process's state (%r)", exc)
        return False
    finally:
        _publish_lock.release()


def octave_document(doc: Mapping[str, Any], *, trusted: bool = False) -> dict[str, Any]:
    """``doc`` as a state document of ``octave.VERSION``: one of version 1 with its
    breakdown read into the octave form (``ValueError`` if it cannot be; ``trusted``,
    this process's own, is not checked), one of that version as it is."""
    if doc.get("version") == octave.VERSION:
        return dict(doc)
    return {
        **doc,
        "version": octave.VERSION,
        "resolution": OCTAVE,
        "breakdown": octave.from_keyed(doc["breakdown"], trusted=trusted),
    }


# -- reading ---------------------------------------------------------------------------

FileId = tuple[int, int, int, int]


def _read_bytes(path: str, unless: FileId | None = None) -> tuple[FileId, bytes | None] | None:
    """The file's identity (device, inode, size, mtime) and bytes, None for the bytes
    when its identity is ``unless`` (unchanged); None if it vanished. ValueError if it
    is not a file of ours."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError("a symbolic link") from None
        raise ValueError(str(exc)) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise ValueError("not a regular file of this user")
        if info.st_size > MAX_FILE_BYTES:
            raise ValueError(f"larger than {MAX_FILE_BYTES} bytes")
        identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        if identity == unless:
            return identity, None
        return identity, handle.read(MAX_FILE_BYTES + 1)


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, RecursionError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON ({exc})") from None


def _read(path: str) -> Any:
    """The JSON in ``path``; None if it vanished. ValueError if it is not a file of ours."""
    got = _read_bytes(path)
    return None if got is None else _loads(got[1] or b"")


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check(doc: Any) -> dict[str, Any]:
    """``doc`` if it has a state document's shape (the fields this module reads), of a
    version this release reads (1, or the octave form's)."""
    if not isinstance(doc, dict) or doc.get("version") not in READABLE_VERSIONS:
        raise ValueError("not a state document of a version this release reads")
    if not isinstance(doc.get("instance"), str) or not isinstance(doc.get("host"), str):
        raise ValueError("no instance or host")
    for key in ("pid", "started_ms", "at_ms"):
        if not _int(doc.get(key)):
            raise ValueError(f"{key} is not a count")
    if not isinstance(doc.get("stopped"), bool):
        raise ValueError("stopped is not a boolean")
    serving = doc.get("serving")
    if not isinstance(serving, dict) or not all(
        _int(serving.get(k))
        for k in ("active", "completed", "prompt_tokens_total", "completion_tokens_total")
    ):
        raise ValueError("serving is not a set of counts")
    # A list of cells; of this version, in a file, its columns (``octave.columns``).
    breakdown = doc.get("breakdown")
    if not (
        isinstance(breakdown, list)
        or (isinstance(breakdown, dict) and doc["version"] == octave.VERSION)
    ) or not isinstance(doc.get("rates"), dict):
        raise ValueError("no breakdown or rates")
    archive = doc.get("archive")
    if archive is not None and not (isinstance(archive, dict) and _int(archive.get("pending"))):
        raise ValueError("archive is not an accounting")
    return doc


def _process_started_s(pid: int) -> float | None:
    """When ``pid`` started (epoch seconds), where ``/proc`` says; None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as handle:
            boot = next(int(line.split()[1]) for line in handle if line.startswith(b"btime"))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _gone(doc: Mapping[str, Any], host: str) -> bool:
    """Whether the process behind ``doc`` has ended: the clean-shutdown mark, or (on this
    host) its pid runs no more, or runs another program started after this one's recorder
    (a reused pid)."""
    if doc["stopped"]:
        return True
    if doc["host"] != host:
        return False  # a directory shared across hosts: only its own host may tell
    pid = int(doc["pid"])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return True  # another user's process holds the pid now: ours ended
    except OSError:
        return False
    started = _process_started_s(pid)
    return started is not None and started > doc["started_ms"] / 1000 + PID_REUSE_SLACK_S


@dataclass
class _Scan:
    docs: dict[str, dict[str, Any]]  # file name -> document
    parts: dict[str, Part]  # file name -> its breakdown, checked
    skipped: int
    tmp: list[str]


def _scan(path: str, skip: str | None = None) -> _Scan:
    """Every process file of the directory but ``skip``, read and checked."""
    docs: dict[str, dict[str, Any]] = {}
    parts: dict[str, Part] = {}
    skipped = 0
    tmp: list[str] = []
    with os.scandir(path) as entries:
        names = [entry.name for entry in entries]
    for name in names:
        if name.startswith("."):
            if name.endswith(".tmp"):
                tmp.append(name)
            continue
        if not name.endswith(".json") or name in (RETIRED, skip):
            continue
        try:
            doc = _read(os.path.join(path, name))
            if doc is not None:
                doc = _check(doc)
                parts[name] = octave.of_document(doc)
                docs[name] = doc
        except ValueError as exc:
            skipped += 1
            _warn_once(f"file:{name}", "ferrox_stats: skipping %s in METRICS_DIR: %s", name, exc)
    return _Scan(docs, parts, skipped, tmp)


# The last retired.json read, by directory: it changes only when a process ends, and a
# version 1 one costs a conversion to read.
_retired_seen: dict[str, tuple[FileId, dict[str, Any], Part]] = {}


def _read_retired(path: str) -> tuple[dict[str, Any], Part] | None:
    try:
        seen = _retired_seen.get(path)
        got = _read_bytes(os.path.join(path, RETIRED), None if seen is None else seen[0])
        if got is None:
            return None
        identity, raw = got
        if raw is None and seen is not None:
            return seen[1], seen[2]
        doc = _loads(raw or b"")
        if not isinstance(doc, dict):
            raise ValueError("not an object")
        folded, lost = doc.get("folded"), doc.get("lost")
        if not isinstance(folded, dict) or not all(_int(at) for at in folded.values()):
            raise ValueError("folded is not a map of instances to times")
        if not isinstance(lost, dict) or not all(_int(lost.get(k)) for k in LOST_KEYS):
            raise ValueError("lost is not a set of counts")
        doc = _check(doc)
        part = octave.of_document(doc)
    except ValueError as exc:
        # Never silently restart the host's counters from zero: say so, loudly, once.
        _warn_once("retired", "ferrox_stats: %s is unreadable (%s); ignoring it", RETIRED, exc)
        return None
    _retired_seen.clear()  # one directory's, at most
    _retired_seen[path] = (identity, doc, part)
    return doc, part


# -- folding ---------------------------------------------------------------------------


def _as_gone(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A gone process's document as a part of the retired sum: its counters, no gauges
    (nothing runs there any more, nothing is pending there any more)."""
    gone = dict(doc)
    gone["serving"] = {**doc["serving"], "active": 0}
    gone["rates"] = {"decode": dict(_EMPTY_RATE), "prefill": dict(_EMPTY_RATE)}
    gone["gauges"] = {"pool_occupancy": None, "queue_depth": None, "refused": 0}
    if isinstance(doc.get("archive"), dict):
        gone["archive"] = {**doc["archive"], "pending": 0}
    gone.pop("folded", None)
    gone.pop("lost", None)
    return gone


def _retire(
    parts: list[dict[str, Any]],
    folded: dict[str, int],
    lost: dict[str, int],
    now_ms: int,
) -> dict[str, Any]:
    """One state document summing ``parts`` (the previous retired document and the
    documents of processes now gone), shaped like a process's so ``merge_states`` takes it.

    Written in version 1's form (its breakdown keyed, each power of two's values in its
    last bucket), which this release and the one before both read: in a rolling upgrade
    a worker of the previous release may fold next, and one that could not read
    retired.json would start the host's retired counters over. Readers of this release
    convert it once per change (``_read_retired``).
    """
    # Without their latency: retired.json does not carry it (nor would one of version 1).
    merged = merge_states({**part, "latency": None} for part in parts)
    cells = merged["breakdown"]
    if merged["version"] != octave.VERSION:
        cells = octave.from_keyed(cells)
    return {
        "version": 1,
        "instance": "retired",
        "replica": "",
        "host": socket.gethostname(),
        "pid": 0,
        "started_ms": 0,
        "at_ms": now_ms,
        "uptime_s": 0.0,
        "stopped": True,
        "serving": {**merged["serving"], "active": 0},
        "rates": {"decode": dict(_EMPTY_RATE), "prefill": dict(_EMPTY_RATE)},
        "breakdown": octave.keyed(cells),
        "gauges": {"pool_occupancy": None, "queue_depth": None, "refused": 0},
        "recorded_total": merged["recorded_total"],
        "sink_errors": merged["sink_errors"],
        "archive": None if merged["archive"] is None else {**merged["archive"], "pending": 0},
        "folded": folded,
        "lost": lost,
        "resolution": OCTAVE,
    }


def _fold(path: str, gone: Iterable[str], host: str) -> None:
    """Fold the files named ``gone`` into retired.json; skipped when another process is
    folding (it will, or the next scrape will)."""
    try:
        lock = os.open(os.path.join(path, _LOCK), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        _warn_once("lock", "ferrox_stats: cannot open the fold lock in %s (%s)", path, exc)
        return
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        _fold_locked(path, gone, host)
    except Exception as exc:
        _warn_once("fold", "ferrox_stats: could not fold ended processes (%r)", exc)
    finally:
        os.close(lock)  # releases the lock


def _fold_locked(path: str, gone: Iterable[str], host: str) -> None:
    now_ms = int(time.time() * 1000)
    read = _read_retired(path)
    retired = read[0] if read else None
    folded: dict[str, int] = dict(retired.get("folded") or {}) if retired else {}
    lost = dict(retired.get("lost") or {}) if retired else {}
    lost = {"instances": int(lost.get("instances", 0)), "pending": int(lost.get("pending", 0))}
    parts = [_as_gone(retired)] if retired else []
    names: list[str] = []
    for name in gone:
        try:
            doc = _read(os.path.join(path, name))
        except ValueError:
            continue
        if doc is None:
            continue  # folded meanwhile by a folder that finished before this one
        doc = _check(doc)
        if doc["instance"] in folded:
            names.append(name)  # its folder died between writing retired.json and unlinking
            continue
        if not _gone(doc, host):
            continue
        if not doc["stopped"]:
            lost["instances"] += 1
            lost["pending"] += int((doc.get("archive") or {}).get("pending") or 0)
        parts.append(_as_gone(doc))
        folded[doc["instance"]] = now_ms
        names.append(name)
    if not names:
        return
    with os.scandir(path) as entries:
        present = {entry.name for entry in entries}
    folded = {
        instance: at
        for instance, at in folded.items()
        if file_name(instance) in present or now_ms - int(at) < FOLDED_KEEP_S * 1000
    }
    if len(parts) > (1 if retired else 0):
        doc = _retire(parts, folded, lost, now_ms)
    else:
        assert retired is not None
        doc = {**retired, "folded": folded}
    _write_atomically(path, RETIRED, json.dumps(doc, separators=(",", ":")).encode())
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(path, name))


def _sweep_tmp(path: str, names: list[str]) -> None:
    """Remove temporary files a writer that died mid-write left behind."""
    cutoff = time.time() - TMP_KEEP_S
    for name in names:
        with contextlib.suppress(OSError):
            full = os.path.join(path, name)
            if os.lstat(full).st_mtime < cutoff:
                os.unlink(full)


# -- the host --------------------------------------------------------------------------


def _freshest(docs: Iterable[Mapping[str, Any]], name: str, now_ms: int) -> float | None:
    """The freshest measurement of gauge ``name`` among ``docs`` still within
    ``GAUGE_MAX_AGE_S`` now; None when none is (absent, never 0)."""
    max_age = conf.GAUGE_MAX_AGE_S
    best: tuple[float, float] | None = None
    for doc in docs:
        gauge = (doc.get("gauges") or {}).get(name)
        if not isinstance(gauge, dict):
            continue
        value, age = gauge.get("value"), gauge.get("age_s")
        if not isinstance(value, int | float) or not isinstance(age, int | float):
            continue
        age_now = float(age) + max(0, now_ms - int(doc["at_ms"])) / 1000
        if max_age is not None and age_now > max_age:
            continue
        if best is None or age_now < best[0]:
            best = (age_now, float(value))
    return None if best is None else best[1]


def _merged(docs: list[dict[str, Any]], parts: list[Part]) -> tuple[dict[str, Any], Merged]:
    # The counters of every document; the breakdowns, checked already, by column. The
    # full-resolution latency is the fleet's, not the exposition's: not merged here.
    state = merge_states({**doc, "breakdown": [], "latency": None} for doc in docs)
    del state["breakdown"]
    return state, octave.merged(parts)


def _merge(docs: list[dict[str, Any]], parts: list[Part]) -> tuple[dict[str, Any], Merged, int]:
    """The documents (and their breakdowns, ``parts``) merged, leaving out (and
    counting) any that cannot be: one bad file never fails a scrape."""
    try:
        return (*_merged(docs, parts), 0)
    except Exception:
        good: list[tuple[dict[str, Any], Part]] = []
        for doc, part in zip(docs, parts, strict=True):
            try:
                _merged([doc], [part])
            except Exception as exc:
                _warn_once(
                    f"merge:{doc.get('instance')}",
                    "ferrox_stats: skipping the state of %r in METRICS_DIR: %r",
                    doc.get("instance"),
                    exc,
                )
            else:
                good.append((doc, part))
        state, cells = _merged([doc for doc, _ in good], [part for _, part in good])
        return state, cells, len(docs) - len(good)


def host_totals(
    current: Mapping[str, Any] | None = None, *, now_ms: int | None = None
) -> HostTotals:
    """Every process of this host merged, with whatever has retired.

    ``current`` is the caller's own fresh document (already published): it stands in for
    the caller's file. When the directory cannot be used, the totals are ``current``'s
    alone (``host_wide`` False). ``now_ms`` (epoch ms; default ``current``'s ``at_ms``,
    else the system clock) ages the gauges.
    """
    if now_ms is None:
        now_ms = int(current["at_ms"]) if current is not None else int(time.time() * 1000)
    path = directory()
    own = octave_document(current, trusted=True) if current is not None else None
    # This process's own document, built in memory: not checked like a file.
    own_part = octave.of_document(own, trusted=True) if own is not None else None
    if not _usable(path):
        state, cells, _ = _merge([own] if own else [], [own_part] if own_part else [])
        return HostTotals(
            state=state,
            cells=cells,
            instances=1 if own else 0,
            pool_occupancy=_freshest([own], "pool_occupancy", now_ms) if own else None,
            queue_depth=_freshest([own], "queue_depth", now_ms) if own else None,
            host_wide=False,
        )
    host = socket.gethostname()
    own_name = file_name(str(own["instance"])) if own else None
    scan = _scan(path, skip=own_name)  # the own file: ``own`` stands in for it
    ended = {name for name, doc in scan.docs.items() if _gone(doc, host)}
    if ended:
        _fold(path, ended, host)
        scan = _scan(
            path, skip=own_name
        )  # files first, retired.json last: see the module docstring
        ended = {name for name, doc in scan.docs.items() if _gone(doc, host)}
    if scan.tmp:
        _sweep_tmp(path, scan.tmp)
    read = _read_retired(path)
    retired = read[0] if read else None
    folded = (retired or {}).get("folded") or {}
    running: list[dict[str, Any]] = []
    running_parts: list[Part] = []
    docs: list[dict[str, Any]] = [_as_gone(retired)] if retired else []
    parts: list[Part] = [read[1]] if read else []
    for name, doc in scan.docs.items():
        if doc["instance"] in folded:
            continue
        if name in ended:
            docs.append(_as_gone(doc))  # a folder is at it: counted once, either way
            parts.append(scan.parts[name])
        else:
            running.append(doc)
            running_parts.append(scan.parts[name])
    if own is not None and own_part is not None:
        running.append(own)
        running_parts.append(own_part)
    docs.extend(running)
    parts.extend(running_parts)
    lost = (retired or {}).get("lost") or {}
    state, cells, refused = _merge(docs, parts)
    return HostTotals(
        state=state,
        cells=cells,
        instances=len(running),
        pool_occupancy=_freshest(running, "pool_occupancy", now_ms),
        queue_depth=_freshest(running, "queue_depth", now_ms),
        lost={"instances": int(lost.get("instances", 0)), "pending": int(lost.get("pending", 0))},
        skipped=scan.skipped + refused,
    )
