"""How the fleet page reads a v1/fleet document: the overview line and the instances table."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferrox_stats.web import fleet
from tests.factories import BASE_AT_MS


def instance(**fields: Any) -> dict[str, Any]:
    """One entry of v1/fleet's ``instances`` (design §5), live unless told."""
    return {
        "instance": "gpu-1/101/a1b2c3d4e5f6",
        "replica": "gpu-1",
        "host": "node-a",
        "pid": 101,
        "started_ms": BASE_AT_MS - 3_600_000,
        "uptime_s": 3600.0,
        "last_seen_ms": BASE_AT_MS,
        "age_s": 0.84,
        "state": "live",
        "active": 3,
        "completed": 1204,
        "decode_tps": 812.25,
        "prefill_tps": 4100.0,
        "pending": 2,
        "dropped": {},
        "not_archived": None,
        **fields,
    }


def test_an_instance_row_reads_like_the_table_header_says() -> None:
    row = fleet.instance_row(instance())
    assert row == {
        "instance": "gpu-1/101/a1b2c3d4e5f6",
        "id": "gpu-1/101/a1b2c3d4e5f6",
        "state": "live",
        "host": "node-a",
        "pid": "101",
        "replica": "gpu-1",
        "uptime": "1 h 0 min",
        "last_seen": "00:00:00",
        "iso": "2026-01-01T00:00:00.000Z",
        "age": "0.8 s ago",
        "active": "3",
        "completed": "1,204",
        "decode_tps": "812.3",
        "prefill_tps": "4,100",
        "pending": "2",
        "note": "",
    }


@pytest.mark.parametrize(
    ("fields", "note"),
    [
        ({"state": "lost", "not_archived": 24}, "up to 24 records not archived"),
        ({"state": "lost", "not_archived": 0}, "up to 0 records not archived"),
        (
            {"state": "lost", "not_archived": None, "pending": None},
            "no heartbeat, no clean shutdown: archive unknown",
        ),
        ({"state": "stale"}, "heartbeats late: not in the totals"),
        (
            {"state": "stopped", "dropped": {"shutdown_deadline": 3, "queue_full": 1}},
            "shut down cleanly · dropped: shutdown_deadline 3 · queue_full 1",
        ),
        ({"state": "live"}, ""),
    ],
)
def test_an_instances_note_says_what_its_numbers_do_not(fields: dict[str, Any], note: str) -> None:
    assert fleet.instance_row(instance(**fields))["note"] == note


def test_an_unknown_state_is_shown_as_unknown_not_trusted() -> None:
    assert fleet.instance_row(instance(state="<b>"))["state"] == "unknown"


def test_the_overview_counts_instances_by_state_and_takes_the_newest_live_heartbeat() -> None:
    document = {
        "instances": [
            instance(state="live", age_s=1.5),
            instance(state="live", age_s=0.25),
            instance(state="stale", age_s=0.1),  # not live: not the fleet's freshest
            instance(state="lost", age_s=90.0),
            instance(state="stopped", age_s=900.0),
            instance(state="stopped", age_s=9000.0),
        ]
    }
    assert fleet.overview(document) == {
        "live": 2,
        "stale": 1,
        "lost": 1,
        "stopped": 2,
        "newest_age_s": 0.25,
    }


def test_without_a_document_nothing_is_measured() -> None:
    shown = fleet.view(None)
    assert shown["derived"]["overview"] == {
        "live": 0,
        "stale": 0,
        "lost": 0,
        "stopped": 0,
        "newest_age_s": None,
    }


ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@given(field=st.sampled_from(sorted(instance())), value=ANY)
def test_any_reported_value_reads_as_some_string(field: str, value: Any) -> None:
    row = fleet.instance_row(instance(**{field: value}))
    assert all(isinstance(shown, str) for shown in row.values())
    assert isinstance(fleet.overview({"instances": [instance(**{field: value})]}), dict)
