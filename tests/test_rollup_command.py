"""``manage.py ferrox_stats_rollup``: input checked, output exact, rollups rebuilt."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ferrox_stats.archive.rows import Pending
from ferrox_stats.models import Rollup
from tests.factories import BASE_AT_MS, make_record

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("rollups_on")]


def run(*args: str) -> str:
    out = StringIO()
    call_command("ferrox_stats_rollup", *args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--since", "yesterday", "--until", "2026-01-02"],
            "--since: not an ISO 8601 date and time (like 2026-01-31T00:00:00Z): 'yesterday'.",
        ),
        (
            ["--since", "2026-01-01T00:00:00Z", "--until", "2026-13-01T00:00"],
            "--until: not an ISO 8601 date and time (like 2026-01-31T00:00:00Z): "
            "'2026-13-01T00:00'.",
        ),
        (
            ["--since", "2026-01-02T00:00:00Z", "--until", "2026-01-01T00:00:00Z"],
            "--since must be before --until.",
        ),
    ],
)
def test_bad_input_is_a_clear_error(args: list[str], message: str) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("ferrox_stats_rollup", *args)
    assert str(raised.value) == message


def test_an_empty_archive_rebuilds_nothing() -> None:
    assert run("--since", "2026-01-01T00:00:00Z", "--until", "2026-01-02T00:00:00Z") == (
        "No archived rows before 2026-01-02T00:00:00+00:00: nothing rebuilt.\n"
    )


def test_it_replaces_the_rollups_of_the_range_with_the_archive_s_sums() -> None:
    from ferrox_stats.archive.batch import write_batch

    # BASE_AT_MS is 2026-01-01T00:00:00Z.
    write_batch([Pending(i, make_record(at_ms=BASE_AT_MS + i * 600_000), "i") for i in range(9)])
    Rollup.objects.filter(span_s=3600).update(requests=999)  # damaged
    out = run("--since", "2026-01-01T00:30", "--until", "2026-01-01T01:10:00+00:00")
    assert out == (
        "Rebuilt the rollups of 2 hours from 2026-01-01T00:00:00+00:00 (9 archived rows) in "
        "[2026-01-01T00:00:00+00:00, 2026-01-01T02:00:00+00:00).\n"
    )
    # Each hour's group, and its merged rows (per model, in total, per key, replica,
    # route and outcome, and per each of these four and the model: one each here),
    # summed again.
    rebuilt = Rollup.objects.filter(span_s=3600).values_list("requests", flat=True)
    assert sorted(rebuilt) == [3] * 11 + [6] * 11
    assert run("--since", "2026-01-01T00:30", "--until", "2026-01-01T01:10:00+00:00") == out
