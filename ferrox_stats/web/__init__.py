"""The staff dashboard: the fleet, this worker process, history, usage, drill-down.

| module | answers |
|---|---|
| ``display`` | how a value, a window or a request reads on the page ("—" when unmeasured) |
| ``fleet`` | what the fleet page shows from a ``v1/fleet`` document: counters, charts, instances |
| ``panels`` | which counters the per-process page shows and where each is in admin-stats |
| ``forms`` | the history and usage views' filters (and history's keyset cursor), parsed strictly |
| ``usage_page`` | what the usage page shows, from four ``archive.usage.usage`` answers |
| ``usage_charts`` | the usage page's bar and line charts, drawn as inline SVG |
| ``views`` | the pages; numbers from ``documents``, ``fleet``, ``live`` or the archive queries |

In ``static/ferrox_stats/``, ``fleet.js`` polls the fleet page (``v1/fleet`` and the
archive's tail), ``dashboard.js`` the per-process page (``admin/stats``), both with
``poller.js``'s loop (one poll per interval, paused while hidden); ``format.js``
formats values with ``display``'s rules (so the server's first paint and the live
updates read alike), ``rows.js`` builds table rows like the templates' and ``charts.js``
draws the time series with the vendored uPlot.
"""
