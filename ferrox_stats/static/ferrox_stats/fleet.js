/* The fleet page: polls v1/fleet (and the archive's tail) and updates the first paint in place.
 *
 * Every worker answers v1/fleet from the same heartbeat rows, so a poll that reaches
 * another worker shows the same numbers. What can still arrive is an answer older than
 * one already drawn (a worker whose read lagged): each instance's heartbeat time only
 * moves forward, so an answer that knows an older heartbeat of some instance than the
 * page has drawn is older than the screen, and is not drawn. Counters then never step
 * back from a worker switch; a total that falls because an instance left the live set
 * (stale, lost, stopped: the totals sum live instances only) is drawn, and announced.
 *
 * The recent-requests table follows v1/history?order=committed from the cursor the
 * server's first paint ends at: every archived row once, newest on top, at most
 * table-rows rows. One tick per interval makes at most one poll of each (poller.js's
 * loop, as on the per-process page).
 */
(function () {
  "use strict";

  var f = window.ferroxFormat;
  var rows = window.ferroxRows;

  var root = document.getElementById("fx-dashboard");
  var initial = document.getElementById("fx-initial");
  if (!root || !initial || !root.dataset.fleetUrl) return;

  var cfg = {
    fleetUrl: root.dataset.fleetUrl,
    tailUrl: root.dataset.tailUrl || "",
    dashboardUrl: root.dataset.dashboardUrl,
    detailUrl: root.dataset.detailUrl,
    instance: root.dataset.instance || "",
    intervalMs: Number(root.dataset.intervalMs) || 2000,
    tailLimit: Number(root.dataset.tailLimit) || 500,
    tableRows: Number(root.dataset.tableRows) || 200,
    seriesPoints: Number(root.dataset.seriesPoints) || 300,
  };
  var recent = document.getElementById("fx-recent");
  var recentBody = recent.tBodies[0];
  var recentEmpty = document.getElementById("fx-recent-empty");
  var instancesBody = document.getElementById("fx-instances").tBodies[0];
  var instancesEmpty = document.getElementById("fx-instances-empty");

  // -- what the page reads its paths from: fleet.view in web/fleet.py ------------------------

  var STATES = ["live", "stale", "lost", "stopped"];

  function overview(doc) {
    var counts = { live: 0, stale: 0, lost: 0, stopped: 0, newest_age_s: null };
    (doc && Array.isArray(doc.instances) ? doc.instances : []).forEach(function (i) {
      if (!i || typeof i !== "object") return;
      if (STATES.indexOf(i.state) >= 0) counts[i.state] += 1;
      var age = f.number(i.age_s);
      if (i.state === "live" && age != null && (counts.newest_age_s == null || age < counts.newest_age_s)) {
        counts.newest_age_s = age;
      }
    });
    return counts;
  }

  function view(doc) {
    return Object.assign({}, doc || {}, { derived: { overview: overview(doc) } });
  }

  // -- counters and instances ------------------------------------------------------------

  function renderInstances(doc) {
    var list = Array.isArray(doc.instances) ? doc.instances : [];
    var fresh = document.createDocumentFragment();
    list.forEach(function (i) {
      if (i && typeof i === "object") fresh.appendChild(rows.instance(i, cfg.dashboardUrl, cfg.instance));
    });
    // Not a live region (the counters are): replacing the rows announces nothing.
    instancesBody.textContent = "";
    instancesBody.appendChild(fresh);
    instancesEmpty.hidden = instancesBody.rows.length > 0;
  }

  var loop = window.ferroxPoller.poller({
    root: root,
    status: document.getElementById("fx-poll-status"),
    noticeList: document.getElementById("fx-notice-list"),
    intervalMs: cfg.intervalMs,
    poll: poll,
  });
  var notice = loop.notice;

  // -- applying a fleet document -----------------------------------------------------------------

  var state = {
    seen: {}, // instance id -> the newest last_seen_ms drawn
    completed: null, // the totals' completed last drawn
    live: [], // the live instances last drawn
    ignored: 0, // answers older than the screen, not drawn
    tailCursor: root.dataset.tailCursor || "",
    tailBehind: false,
  };

  function liveIds(doc) {
    return (Array.isArray(doc.instances) ? doc.instances : [])
      .filter(function (i) { return i && i.state === "live"; })
      .map(function (i) { return i.instance; });
  }

  function olderThanDrawn(doc) {
    return (Array.isArray(doc.instances) ? doc.instances : []).some(function (i) {
      var drawn = i && state.seen[i.instance];
      return drawn != null && f.number(i.last_seen_ms) != null && i.last_seen_ms < drawn;
    });
  }

  function remember(doc) {
    (Array.isArray(doc.instances) ? doc.instances : []).forEach(function (i) {
      if (i && f.number(i.last_seen_ms) != null) state.seen[i.instance] = i.last_seen_ms;
    });
    state.completed = f.number(doc.totals && doc.totals.completed);
    state.live = liveIds(doc);
  }

  function applyFleet(doc) {
    if (!doc || typeof doc !== "object") throw new Error("the fleet answer is not a document");
    if (olderThanDrawn(doc)) {
      state.ignored += 1;
      root.dataset.ignored = String(state.ignored);
      return;
    }
    var completed = f.number(doc.totals && doc.totals.completed);
    if (!cfg.instance && state.completed != null && completed != null && completed < state.completed) {
      var now = liveIds(doc);
      var left = state.live.filter(function (id) { return now.indexOf(id) < 0; });
      notice("reset", "Completed went from " + f.count(state.completed) + " to " + f.count(completed) +
        (left.length ? ": " + left.join(", ") + " left the live instances" : "") +
        ". The totals sum live instances only; see the instances table.");
    }
    var shown = view(doc);
    window.ferroxPoller.renderCounters(root, shown);
    renderInstances(doc);
    charts.add(shown);
    remember(doc);
  }

  // -- the archive's tail ---------------------------------------------------------------------

  function applyTail(page) {
    var entries = page && Array.isArray(page.entries) ? page.entries : [];
    // Oldest first in commit order: each goes on top, so the newest ends up first.
    entries.forEach(function (e) {
      recentBody.insertBefore(rows.request(e, cfg.detailUrl), recentBody.firstChild);
    });
    while (recentBody.rows.length > cfg.tableRows) recentBody.deleteRow(-1);
    if (recentEmpty) recentEmpty.hidden = recentBody.rows.length > 0;
    if (page && page.next_cursor) state.tailCursor = page.next_cursor;
    var behind = entries.length >= cfg.tailLimit;
    if (behind && !state.tailBehind) {
      notice("missed", "The fleet archives more than " + f.count(cfg.tailLimit) +
        " requests a poll: the recent-requests table is behind the archive's tail and catches up as traffic allows.");
    }
    state.tailBehind = behind;
    root.dataset.tailBehind = behind ? "true" : "false";
  }

  // -- polling -------------------------------------------------------------------------------

  function get(url) {
    return window.ferroxPoller.getJson(url, function (status) {
      return status === 404 && cfg.instance ? "no instance with this id has a heartbeat (404)" : null;
    });
  }

  function fleetQuery() {
    return cfg.instance ? cfg.fleetUrl + "?" + new URLSearchParams({ instance: cfg.instance }) : cfg.fleetUrl;
  }

  function tailQuery() {
    var query = { order: "committed", limit: cfg.tailLimit };
    if (state.tailCursor) query.cursor = state.tailCursor;
    return cfg.tailUrl + "?" + new URLSearchParams(query);
  }

  function poll() {
    // The fleet first, then the tail: one of each per tick, one after the other.
    return get(fleetQuery()).then(function (doc) {
      applyFleet(doc);
      if (!cfg.tailUrl) return null;
      return get(tailQuery()).then(applyTail);
    });
  }

  var first = JSON.parse(initial.textContent);
  var charts = window.ferroxCharts.start(cfg.seriesPoints);
  if (first && first.totals) {
    charts.add(first);
    remember(first);
  }
  loop.start();
})();
