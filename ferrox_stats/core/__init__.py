"""The telemetry core: stdlib only, every time a parameter, thread-safe.

| module     | answers                                                                 |
|------------|-------------------------------------------------------------------------|
| ``ring``     | which finished requests a poller has not seen yet, and how many it missed |
| ``rate``     | what the recent throughput is; how to report a value nothing measured    |
| ``serving``  | what is in flight right now, and what completed or aborted              |
| ``requests`` | what ``/admin/stats`` and ``/v1/requests`` report about finished requests |
| ``summary``  | nearest-rank percentiles and means of present values                    |
| ``distribution`` | how values are distributed, in buckets that merge exactly across processes |
| ``breakdown``    | per (model, route, outcome) counts and distributions, labels bounded       |
"""

from __future__ import annotations

from .breakdown import Breakdown, Cell
from .distribution import RELATIVE_ERROR, Distribution
from .rate import LastKnown, RateReading, RateWindow, pool_occupancy
from .requests import MAX_PAGE, Record, Stats, Summary, entry, page_entries
from .ring import Page, RequestRing
from .serving import ServingSnapshot, ServingStats

__all__ = [
    "MAX_PAGE",
    "RELATIVE_ERROR",
    "Breakdown",
    "Cell",
    "Distribution",
    "LastKnown",
    "Page",
    "RateReading",
    "RateWindow",
    "Record",
    "RequestRing",
    "ServingSnapshot",
    "ServingStats",
    "Stats",
    "Summary",
    "entry",
    "page_entries",
    "pool_occupancy",
]
