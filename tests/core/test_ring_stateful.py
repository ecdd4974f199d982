"""RequestRing under arbitrary push/poll interleavings: a poller that passes back
``next_cursor`` receives + misses every row pushed since its first cursor, once, in order,
whether the ring keeps its rows as they are or packs the older ones in blocks."""

from __future__ import annotations

import marshal
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from ferrox_stats.core.ring import Packing, RequestRing

INSTANCE = "ring-under-test"


def pack(rows: list[str]) -> bytes | None:
    # A block holding "refused" stays unpacked, as a block pack cannot hold exactly does.
    return None if "refused" in rows else marshal.dumps(rows)


packings = st.one_of(
    st.none(),
    st.builds(
        Packing,
        pack=st.just(pack),
        unpack=st.just(marshal.loads),
        hot=st.integers(min_value=1, max_value=3),
        block=st.integers(min_value=1, max_value=3),
    ),
)


class RingPolling(RuleBasedStateMachine):
    """Model: ``self.model`` is every row ever pushed, indexed by seq."""

    @initialize(capacity=st.integers(min_value=1, max_value=8), packing=packings)
    def make_ring(self, capacity: int, packing: Packing[str] | None) -> None:
        self.capacity = capacity
        self.ring: RequestRing[str] = RequestRing(capacity, INSTANCE, packing)
        self.model: list[str] = []
        self.pollers: list[dict[str, Any]] = [self.new_state(0)]

    @staticmethod
    def new_state(cursor: int) -> dict[str, Any]:
        return {"first": cursor, "cursor": cursor, "received": [], "missed": 0}

    @rule(n=st.integers(min_value=1, max_value=12))
    def push(self, n: int) -> None:
        for _ in range(n):
            row = f"row{len(self.model)}"
            assert self.ring.push(row) == len(self.model)
            self.model.append(row)

    @rule(n=st.integers(min_value=0, max_value=12), refused=st.booleans())
    def push_many(self, n: int, refused: bool) -> None:
        rows = [f"row{len(self.model) + i}" for i in range(n)]
        if refused and rows:
            rows[-1] = "refused"
        assert self.ring.push_many(rows) == len(self.model)
        self.model += rows

    @rule(data=st.data())
    def start_fresh_poller(self, data: st.DataObject) -> None:
        cursor = data.draw(st.integers(min_value=0, max_value=len(self.model)), label="cursor")
        self.pollers.append(self.new_state(cursor))

    @rule(data=st.data(), limit=st.integers(min_value=1, max_value=10))
    def poll(self, data: st.DataObject, limit: int) -> None:
        index = data.draw(st.integers(min_value=0, max_value=len(self.pollers) - 1), label="poller")
        poller = self.pollers[index]
        cursor = poller["cursor"]
        page = self.ring.since(cursor, limit)

        assert not page.reset
        assert page.instance == INSTANCE
        assert page.recorded_total == len(self.model)
        got = [seq for seq, _ in page.rows]
        # Oldest retained matching rows first, as many as the limit allows.
        start = max(cursor, len(self.model) - self.capacity)
        assert got == list(range(start, min(start + limit, len(self.model))))
        for seq, row in page.rows:
            assert row == self.model[seq]
        previous = poller["received"]
        assert not previous or not got or got[0] > previous[-1]

        poller["received"] = previous + got
        poller["missed"] += page.missed
        poller["cursor"] = page.next_cursor
        received, missed = poller["received"], poller["missed"]
        assert len(set(received)) == len(received)
        assert len(received) + missed == page.next_cursor - poller["first"]
        if page.next_cursor == page.recorded_total:
            assert len(received) + missed == len(self.model) - poller["first"]

    @rule(beyond=st.integers(min_value=1, max_value=50), limit=st.integers(1, 10))
    def poll_beyond_recorded_total(self, beyond: int, limit: int) -> None:
        page = self.ring.since(len(self.model) + beyond, limit)
        assert page.reset
        assert page.rows == ()
        assert page.next_cursor == page.recorded_total == len(self.model)
        assert page.instance == INSTANCE

    @invariant()
    def ring_holds_the_newest_rows(self) -> None:
        assert self.ring.recorded_total == len(self.model)
        assert len(self.ring) == min(len(self.model), self.capacity)
        assert self.ring.rows() == self.model[len(self.model) - len(self.ring) :]


RingPolling.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, database=None
)
TestRingPolling = RingPolling.TestCase
