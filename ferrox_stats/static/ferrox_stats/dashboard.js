/* This worker process only: polls the admin-stats API and updates the server's first paint in place.
 *
 * One poll per interval, never a catch-up burst: the next poll is scheduled only when
 * the last one has finished, so the page makes at most 60 / interval polls a minute
 * whatever the traffic. A full page of rows simply continues from next_cursor at the
 * next tick. Polling stops while the tab is hidden and resumes with a poll when it
 * is shown again (unless the last one started less than an interval ago).
 *
 * Values are formatted by format.js (display.py's rules), rows built by rows.js and
 * charted by charts.js.
 */
(function () {
  "use strict";

  var f = window.ferroxFormat;
  var EMPTY = f.EMPTY;

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
  var clockTime = f.clockTime;
  var tbody = document.querySelector("#fx-recent tbody");
  var emptyNote = document.getElementById("fx-recent-empty");
  var status = document.getElementById("fx-poll-status");
  var noticeList = document.getElementById("fx-notice-list");

  // -- counters ----------------------------------------------------------------------

  function renderCounters(doc) {
    var nodes = root.querySelectorAll("[data-path][data-format]");
    for (var i = 0; i < nodes.length; i++) {
      var node = nodes[i];
      var shown = f.format(node.dataset.format, f.lookup(doc, node.dataset.path));
      // Unchanged values are left alone, so the live region announces only changes.
      if (node.textContent !== shown) node.textContent = shown;
      // A unit beside "—" would suggest a value; the CSS hides it then.
      var holder = node.parentNode;
      if (holder.classList.contains("fx-value")) holder.classList.toggle("fx-unmeasured", shown === EMPTY);
    }
  }

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

  // -- notices --------------------------------------------------------------------

  function notice(kind, message) {
    var li = document.createElement("li");
    li.className = "fx-notice-" + kind;
    var when = document.createElement("time");
    var now = new Date();
    when.dateTime = now.toISOString();
    when.textContent = clockTime(now) + " " + f.timeZone;
    li.appendChild(when);
    li.appendChild(document.createTextNode(" " + message));
    noticeList.insertBefore(li, noticeList.firstChild);
    while (noticeList.children.length > 3) noticeList.removeChild(noticeList.lastChild);
  }

  function setStatus(state, message) {
    root.dataset.pollState = state;
    if (status) {
      status.dataset.state = state;
      status.textContent = message;
    }
  }

  // -- polling -------------------------------------------------------------------------

  var doc = JSON.parse(initial.textContent);
  var state = {
    cursor: doc.next_cursor,
    instance: doc.instance,
    lastSeq: doc.entries.length ? doc.entries[doc.entries.length - 1].seq : -1,
    timer: null,
    inFlight: false,
    failing: false,
    lastStart: -Infinity,
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
    renderCounters(page);
    charts.add(page);
  }

  function poll() {
    var query = new URLSearchParams({ since: state.cursor, limit: cfg.limit, instance: state.instance });
    return fetch(cfg.url + "?" + query.toString(), {
      credentials: "same-origin",
      cache: "no-store",
      headers: { Accept: "application/json" },
    }).then(function (response) {
      if (!response.ok) {
        var reason = response.status === 401 || response.status === 403
          ? "your staff session may have ended; reload the page to log in again"
          : "the server answered " + response.status;
        throw new Error(reason);
      }
      return response.json();
    });
  }

  function schedule(delay) {
    clearTimeout(state.timer);
    state.timer = setTimeout(tick, delay);
  }

  function tick() {
    state.timer = null;
    if (state.inFlight) return;
    if (document.hidden) {
      setStatus("paused", "Paused while this tab is hidden");
      return;
    }
    state.inFlight = true;
    state.lastStart = Date.now();
    setStatus("polling", status ? status.textContent : "");
    poll()
      .then(function (page) {
        apply(page);
        return "Live · updated " + clockTime(new Date()) + " " + f.timeZone;
      })
      .catch(function (error) {
        // Whatever failed (the request, the answer, or applying it), the next tick comes.
        return "Poll failed: " + (error && error.message ? error.message : "network error") +
          " · retrying every " + cfg.intervalMs / 1000 + " s";
      })
      .then(function (message) {
        state.inFlight = false;
        var failed = message.indexOf("Poll failed") === 0;
        // Announced once when polls start failing, not on every retry.
        if (failed && !state.failing) notice("error", message);
        state.failing = failed;
        if (document.hidden) {
          setStatus("paused", "Paused while this tab is hidden");
          return;
        }
        // Scheduled before the state reads idle, so an observer of "idle" sees the next tick queued.
        schedule(cfg.intervalMs);
        setStatus(failed ? "error" : "idle", message);
      });
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      clearTimeout(state.timer);
      state.timer = null;
      if (!state.inFlight) setStatus("paused", "Paused while this tab is hidden");
    } else if (!state.inFlight) {
      // Poll now, unless one started less than an interval ago: the bound holds
      // however often the tab is shown and hidden.
      var wait = state.lastStart + cfg.intervalMs - Date.now();
      if (wait > 0) schedule(wait);
      else tick();
    }
  });

  var charts = window.ferroxCharts.start(cfg.seriesPoints);
  charts.add(doc);
  if (document.hidden) setStatus("paused", "Paused while this tab is hidden");
  else schedule(cfg.intervalMs);
})();
