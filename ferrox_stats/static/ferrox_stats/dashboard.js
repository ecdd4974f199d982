/* This worker process only: polls the admin-stats API and updates the server's first paint in place.
 *
 * The loop (one poll per interval, paused while the tab is hidden) is poller.js's; a
 * full page of rows simply continues from next_cursor at the next tick.
 *
 * Values are formatted by format.js (display.py's rules), rows built by rows.js and
 * charted by charts.js.
 */
(function () {
  "use strict";

  var f = window.ferroxFormat;

  var root = document.getElementById("fx-dashboard");
  var initial = document.getElementById("fx-initial");
  if (!root || !initial) return;

  var cfg = {
    url: root.dataset.pollUrl,
    detailUrl: root.dataset.detailUrl,
    intervalMs: Number(root.dataset.intervalMs) || 2000,
    limit: Number(root.dataset.limit) || 100,
    tableRows: Number(root.dataset.tableRows) || 200,
    seriesPoints: Number(root.dataset.seriesPoints) || 300,
  };
  var tbody = document.querySelector("#fx-recent tbody");
  var emptyNote = document.getElementById("fx-recent-empty");

  var loop = window.ferroxPoller.poller({
    root: root,
    status: document.getElementById("fx-poll-status"),
    noticeList: document.getElementById("fx-notice-list"),
    intervalMs: cfg.intervalMs,
    poll: poll,
  });
  var notice = loop.notice;

  // -- the recent-requests table -------------------------------------------------

  var rows = window.ferroxRows;

  function rowFor(e) {
    return rows.request(e, cfg.detailUrl);
  }

  function markerRow(message) {
    // A break in the table where rows are missing or the ring changed.
    return rows.marker(tbody.closest("table"), message);
  }

  function prepend(rows) {
    // ``rows`` oldest first; each goes on top, so the newest ends up first.
    for (var i = 0; i < rows.length; i++) tbody.insertBefore(rows[i], tbody.firstChild);
    while (tbody.rows.length > cfg.tableRows) tbody.deleteRow(-1);
    if (emptyNote) emptyNote.hidden = tbody.rows.length > 0;
  }

  // -- polling -------------------------------------------------------------------------

  var doc = JSON.parse(initial.textContent);
  var state = {
    cursor: doc.next_cursor,
    instance: doc.instance,
    lastSeq: doc.entries.length ? doc.entries[doc.entries.length - 1].seq : -1,
  };

  function apply(page) {
    var fresh = [];
    if (page.reset) {
      notice("reset", "The server restarted or this poll reached another process; the table continues from now.");
      fresh.push(markerRow("Server restarted or another process answered: the table continues from here."));
      state.lastSeq = -1;
    } else if (page.missed > 0) {
      var n = f.grouped(page.missed, 0);
      notice("missed", n + (page.missed === 1 ? " request was" : " requests were") +
        " missed: the ring evicted them before this poll.");
      fresh.push(markerRow(n + " missed here (evicted from the ring before this poll)"));
    }
    page.entries.forEach(function (e) {
      // The cursor already skips rows we hold; this guards against a repeat all the same.
      if (e.seq > state.lastSeq) {
        fresh.push(rowFor(e));
        state.lastSeq = e.seq;
      }
    });
    state.cursor = page.next_cursor;
    state.instance = page.instance;
    if (fresh.length) prepend(fresh);
    window.ferroxPoller.renderCounters(root, page);
    charts.add(page);
  }

  function poll() {
    var query = new URLSearchParams({ since: state.cursor, limit: cfg.limit, instance: state.instance });
    return window.ferroxPoller.getJson(cfg.url + "?" + query.toString()).then(apply);
  }

  var charts = window.ferroxCharts.start(cfg.seriesPoints);
  charts.add(doc);
  loop.start();
})();
