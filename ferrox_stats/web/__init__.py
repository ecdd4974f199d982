"""The staff dashboard: live counters, charts, the recent-requests table, history, drill-down.

| module | answers |
|---|---|
| ``display`` | how a value, a window or a request reads on the page ("—" when unmeasured) |
| ``panels`` | which counters the dashboard shows and where each is in the admin-stats document |
| ``forms`` | the history view's filters and keyset cursor, parsed strictly |
| ``views`` | the pages; every number comes from ``documents``, ``live`` or the archive queries |

In ``static/ferrox_stats/``, ``dashboard.js`` polls and updates the page, ``format.js``
formats the polled document with ``display``'s rules (so the server's first paint and
the live updates read alike) and ``charts.js`` draws the time series with the vendored uPlot.
"""
