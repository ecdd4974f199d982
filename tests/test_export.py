"""Streaming export (``ferrox_stats.archive.export``, ``ferrox_stats_export``)."""

from __future__ import annotations

import csv
import io
import json
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ferrox_stats.archive.export import (
    COLUMNS,
    WRITERS,
    lines,
    parse_moment,
    write_csv,
    write_jsonl,
)
from ferrox_stats.archive.rows import datetime_to_at_ms
from ferrox_stats.core.requests import Record, entry
from ferrox_stats.models import FinishedRequest
from tests.factories import archive, make_record

pytestmark = pytest.mark.django_db

SINCE = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
UNTIL = datetime(2026, 1, 1, 13, 0, tzinfo=UTC)
MS = timedelta(milliseconds=1)


def at(moment: datetime) -> int:
    return datetime_to_at_ms(moment)


def export(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("ferrox_stats_export", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def in_window(since: datetime, until: datetime) -> list[dict[str, Any]]:
    return list(
        FinishedRequest.objects.window(since, until).order_by("finished_at", "id").entries()
    )


def read_csv(text: str) -> list[dict[str, Any]]:
    """Parse exported CSV back into wire dicts, by the column types the archive holds."""
    ints = {"seq", "at_ms", "status", "prompt_tokens", "completion_tokens", "cached_tokens", "id"}
    floats = {"ttft_ms", "duration_ms", "queue_ms", "decode_ms", "decode_tps", "itl_ms"}
    reader = csv.reader(io.StringIO(text, newline=""))
    assert tuple(next(reader)) == COLUMNS
    rows = []
    for fields in reader:
        row: dict[str, Any] = {}
        for name, field in zip(COLUMNS, fields, strict=True):
            if field == "":
                row[name] = None
            elif name == "stream":
                row[name] = {"true": True, "false": False}[field]
            elif name in ints:
                row[name] = int(field)
            elif name in floats:
                row[name] = float(field)
            else:
                row[name] = field
        rows.append(row)
    return rows


def read_jsonl(text: str) -> list[dict[str, Any]]:
    assert text == "" or text.endswith("\n")
    rows = [json.loads(line) for line in text.splitlines()]
    assert all(tuple(row) == COLUMNS for row in rows)
    return rows


READERS = {"csv": read_csv, "jsonl": read_jsonl}


# -- the formats --------------------------------------------------------------------------


def test_the_columns_are_the_wire_dict_then_the_row_id() -> None:
    assert COLUMNS == (*entry(Record()), "id")
    assert COLUMNS[:3] == ("seq", "request_id", "at_ms")
    assert COLUMNS[-3:] == ("decode_tps", "itl_ms", "id")


def test_one_row_as_csv_and_jsonl_exactly() -> None:
    wire = {
        **entry(make_record(request_id="r-1", at_ms=1_767_268_800_000, stream=False,
                            client=None, via_api_key=None, ttft_ms=0.1 + 0.2), 7),
        "id": 3,
    }  # fmt: skip
    out = StringIO()
    assert write_csv([wire], out) == 1
    assert out.getvalue() == (
        ",".join(COLUMNS) + "\r\n"
        "7,r-1,1767268800000,/v1/chat/completions,llama-3.1-8b-instruct,200,false,512,11,0,"
        "0.30000000000000004,640.25,3.0,500.0,stop,,,,,test-replica,20.0,50.0,3\r\n"
    )
    out = StringIO()
    assert write_jsonl([wire], out) == 1
    assert out.getvalue() == (
        '{"seq": 7, "request_id": "r-1", "at_ms": 1767268800000, '
        '"route": "/v1/chat/completions", "model": "llama-3.1-8b-instruct", "status": 200, '
        '"stream": false, "prompt_tokens": 512, "completion_tokens": 11, "cached_tokens": 0, '
        '"ttft_ms": 0.30000000000000004, "duration_ms": 640.25, "queue_ms": 3.0, '
        '"decode_ms": 500.0, "finish_reason": "stop", "aborted": null, "error": null, '
        '"client": null, "via_api_key": null, "replica": "test-replica", '
        '"decode_tps": 20.0, "itl_ms": 50.0, "id": 3}\n'
    )


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_lines_stream_what_the_writers_write_one_row_at_a_time(fmt: str) -> None:
    wires = [{**entry(make_record(), n), "id": n} for n in range(3)]
    pulled: list[int] = []

    def source() -> Iterator[dict[str, Any]]:
        for wire in wires:
            pulled.append(wire["id"])
            yield wire

    streamed = lines(source(), fmt)
    header = 1 if fmt == "csv" else 0
    first = [next(streamed) for _ in range(header + 1)]
    assert pulled == [0]  # a line is made as its row arrives
    rest = list(streamed)
    assert len(first) + len(rest) == header + 3
    assert all(line.endswith("\n") and line.count("\n") == 1 for line in first + rest)
    out = StringIO()
    assert WRITERS[fmt](wires, out) == 3
    assert "".join(first + rest) == out.getvalue()


def test_lines_refuses_an_unknown_format() -> None:
    with pytest.raises(ValueError, match=r"^format must be one of csv, jsonl, got 'xml'$"):
        lines([], "xml")


@pytest.mark.parametrize("writer", [write_csv, write_jsonl])
def test_nothing_to_write_is_a_header_or_nothing(writer: Any) -> None:
    out = StringIO()
    assert writer([], out) == 0
    assert out.getvalue() == ("" if writer is write_jsonl else ",".join(COLUMNS) + "\r\n")


# -- the range ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_an_export_is_exactly_the_rows_finished_in_its_range(fmt: str) -> None:
    names = {
        "before": SINCE - MS,
        "at-since": SINCE,
        "inside": SINCE + timedelta(minutes=30),
        "inside-late": UNTIL - MS,
        "at-until": UNTIL,
        "after": UNTIL + timedelta(days=1),
    }
    archive(make_record(request_id=name, at_ms=at(moment)) for name, moment in names.items())
    out, err = export("--since", SINCE.isoformat(), "--until", UNTIL.isoformat(), "--format", fmt)
    rows = READERS[fmt](out)
    # Since is inclusive, until exclusive, oldest first.
    assert [row["request_id"] for row in rows] == ["at-since", "inside", "inside-late"]
    assert rows == in_window(SINCE, UNTIL)
    expected = StringIO()
    {"csv": write_csv, "jsonl": write_jsonl}[fmt](in_window(SINCE, UNTIL), expected)
    assert out == expected.getvalue()
    assert err == "Exported 3 rows.\n"


@pytest.mark.parametrize(
    ("since", "until"),
    [
        ("2026-01-01T12:00:00+00:00", "2026-01-01T13:00:00+00:00"),
        ("2026-01-01T12:00:00Z", "2026-01-01T13:00:00Z"),
        ("2026-01-01T12:00:00", "2026-01-01 13:00"),  # naive means UTC
        ("2026-01-01T14:00:00+02:00", "2026-01-01T08:00:00-05:00"),
        (str(1_767_268_800_000), str(1_767_272_400_000)),  # epoch ms
        (" 1767268800000 ", "2026-01-01T13:00:00.000+00:00"),
    ],
)
def test_since_and_until_accept_iso_8601_and_epoch_ms(since: str, until: str) -> None:
    assert (parse_moment(since), parse_moment(until)) == (SINCE, UNTIL)
    archive(make_record(at_ms=at(m)) for m in (SINCE - MS, SINCE, UNTIL - MS, UNTIL))
    out, _ = export("--since", since, "--until", until, "--format", "jsonl")
    assert [row["at_ms"] for row in read_jsonl(out)] == [at(SINCE), at(UNTIL - MS)]


def test_without_a_range_everything_is_exported_oldest_first() -> None:
    moments = [SINCE + timedelta(days=d) for d in (3, -400, 0, 1)]
    archive(make_record(at_ms=at(m)) for m in moments)
    out, err = export("--format", "jsonl")
    assert [row["at_ms"] for row in read_jsonl(out)] == sorted(at(m) for m in moments)
    assert err == "Exported 4 rows.\n"


def test_rows_finished_in_the_same_millisecond_are_ordered_by_id() -> None:
    archive(make_record(request_id=f"same-{i}", at_ms=at(SINCE)) for i in range(5))
    rows = read_jsonl(export("--format", "jsonl")[0])
    assert [row["id"] for row in rows] == sorted(row["id"] for row in rows)
    assert [row["request_id"] for row in rows] == [f"same-{i}" for i in range(5)]


# -- filters ------------------------------------------------------------------------------


@pytest.fixture
def fleet() -> None:
    archive(
        [
            make_record(request_id="a", model="m1", route="/v1/chat/completions", status=200,
                        client="c1", replica="r1"),
            make_record(request_id="b", model="m2", route="/v1/completions", status=500,
                        error="EngineError", client="c2", replica="r1"),
            make_record(request_id="c", model="m1", route="/v1/completions", status=None,
                        aborted="client_disconnect", client="c1", replica="r2"),
            make_record(request_id="d", model=None, route="/v1/chat/completions", status=404,
                        client=None, replica="r2"),
        ]
    )  # fmt: skip


@pytest.mark.usefixtures("fleet")
@pytest.mark.parametrize(
    ("args", "request_ids"),
    [
        ([], ["a", "b", "c", "d"]),
        (["--model", "m1"], ["a", "c"]),
        (["--model", "m1", "--model", "m2"], ["a", "b", "c"]),
        (["--route", "/v1/completions"], ["b", "c"]),
        (["--status", "500"], ["b"]),
        (["--status", "500", "--status", "404"], ["b", "d"]),
        (["--outcome", "ok"], ["a"]),
        (["--outcome", "error"], ["b", "d"]),
        (["--outcome", "aborted"], ["c"]),
        (["--replica", "r2"], ["c", "d"]),
        (["--client", "c1"], ["a", "c"]),
        (["--model", "m1", "--replica", "r2"], ["c"]),
        (["--model", "nobody"], []),
    ],
)
def test_filters_narrow_the_export(args: list[str], request_ids: list[str]) -> None:
    out, err = export("--format", "csv", *args)
    assert [row["request_id"] for row in read_csv(out)] == request_ids
    n = len(request_ids)
    assert err == f"Exported {n} {'row' if n == 1 else 'rows'}.\n"


# -- values -------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_none_bool_and_float_values_round_trip(fmt: str) -> None:
    records = [
        make_record(stream=True, ttft_ms=0.1 + 0.2, duration_ms=1e-9, queue_ms=0.0,
                    decode_ms=1234.5678901234567, completion_tokens=3),
        make_record(stream=False, ttft_ms=None, decode_ms=None, finish_reason=None, client=None),
        make_record(stream=None, status=None, model=None, aborted="client_disconnect",
                    prompt_tokens=None, completion_tokens=1, duration_ms=2.5e300),
        make_record(route='/v1/"quoted", comma\nnewline', error="Engine, \"bad\"", client="ü"),
        Record(request_id=None, at_ms=at(SINCE), replica="bare"),
    ]  # fmt: skip
    archive(records, instance="inst")
    rows = READERS[fmt](export("--format", fmt)[0])
    assert rows == list(FinishedRequest.objects.order_by("finished_at", "id").entries())
    by_id = {row["request_id"]: row for row in rows}
    for record in records:
        row = by_id[record.request_id]
        assert {k: v for k, v in row.items() if k not in ("seq", "id")} == {
            k: v for k, v in entry(record).items() if k != "seq"
        }


# -- output -------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_output_writes_a_file(tmp_path: Path, fmt: str) -> None:
    archive(make_record(at_ms=at(SINCE + timedelta(seconds=s))) for s in range(3))
    path = tmp_path / f"export.{fmt}"
    out, err = export("--format", fmt, "--output", str(path))
    assert (out, err) == (f"Exported 3 rows to {path}.\n", "")
    written = path.read_bytes().decode("utf-8")
    assert READERS[fmt](written) == list(FinishedRequest.objects.order_by("finished_at").entries())
    assert written == export("--format", fmt)[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--since", "yesterday"],
            "--since: expected an ISO 8601 datetime (like 2026-01-31T12:00:00Z) or epoch "
            "milliseconds, got 'yesterday'.",
        ),
        (
            ["--until", "2026-13-01"],
            "--until: expected an ISO 8601 datetime (like 2026-01-31T12:00:00Z) or epoch "
            "milliseconds, got '2026-13-01'.",
        ),
        (
            ["--since", ""],
            "--since: expected an ISO 8601 datetime (like 2026-01-31T12:00:00Z) or epoch "
            "milliseconds, got ''.",
        ),
        (
            ["--since", "99999999999999999"],
            "--since: epoch milliseconds 99999999999999999 are outside the datetime range.",
        ),
        (
            ["--since", "2026-01-02", "--until", "2026-01-01"],
            "--since must be before --until, got 2026-01-02T00:00:00+00:00 and "
            "2026-01-01T00:00:00+00:00.",
        ),
        (
            ["--since", "2026-01-01", "--until", "1767225600000"],
            "--since must be before --until, got 2026-01-01T00:00:00+00:00 and "
            "2026-01-01T00:00:00+00:00.",
        ),
        (
            ["--output", "/nonexistent-dir/export.csv"],
            "--output: cannot write /nonexistent-dir/export.csv: No such file or directory.",
        ),
        (["--status", "teapot"], "Error: argument --status: invalid int value: 'teapot'"),
    ],
)
def test_bad_input_says_what_was_wrong(args: list[str], message: str) -> None:
    with pytest.raises(CommandError) as excinfo:
        export(*args)
    assert str(excinfo.value) == message


@pytest.mark.parametrize(("flag", "value"), [("--format", "xml"), ("--outcome", "fine")])
def test_unknown_choices_are_refused(flag: str, value: str) -> None:
    # argparse words the message; only the flag and the value are ours to pin.
    with pytest.raises(CommandError, match=rf"^Error: argument {flag}: invalid choice: '{value}'"):
        export(flag, value)


# -- memory -------------------------------------------------------------------------------


class Discard(io.TextIOBase):
    """A text stream that keeps nothing, so only the export itself is measured."""

    def write(self, text: str) -> int:
        return len(text)


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_an_export_streams_in_constant_memory(fmt: str) -> None:
    start = at(SINCE)
    archive(make_record(request_id=f"bulk-{i}", at_ms=start + i) for i in range(16_000))

    def peak_exporting(rows: int) -> int:
        tracemalloc.start()
        try:
            call_command("ferrox_stats_export", "--format", fmt, "--until", str(start + rows),
                         stdout=Discard(), stderr=StringIO())  # fmt: skip
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    # Rows are fetched 2000 at a time: four times the rows must not cost more memory
    # (holding them all would cost about four times as much).
    small, large = peak_exporting(4000), peak_exporting(16_000)
    assert large < 1.5 * small
