/* What both live pages share: the poll loop, its status line and notices, the counters.
 *
 * One poll per interval, never a catch-up burst: the next poll is scheduled only when
 * the last one has finished, so a page makes at most 60 / interval polls a minute
 * whatever the traffic. Polling stops while the tab is hidden and resumes with a poll
 * when it is shown again (unless the last one started less than an interval ago).
 */
(function () {
  "use strict";

  var f = window.ferroxFormat;
  var PAUSED = "Paused while this tab is hidden";

  /** Fill every ``[data-path][data-format]`` under ``root`` from ``doc``. */
  function renderCounters(root, doc) {
    var nodes = root.querySelectorAll("[data-path][data-format]");
    for (var i = 0; i < nodes.length; i++) {
      var node = nodes[i];
      var shown = f.format(node.dataset.format, f.lookup(doc, node.dataset.path));
      // Unchanged values are left alone, so the live region announces only changes.
      if (node.textContent !== shown) node.textContent = shown;
      // A unit beside "—" would suggest a value; the CSS hides it then.
      var holder = node.parentNode;
      if (holder.classList.contains("fx-value")) holder.classList.toggle("fx-unmeasured", shown === f.EMPTY);
    }
  }

  /** GET ``url`` as JSON; a failed answer rejects with a reason a person can act on
   * (``reasonFor(status)`` may name a page's own, else null). */
  function getJson(url, reasonFor) {
    return fetch(url, {
      credentials: "same-origin",
      cache: "no-store",
      headers: { Accept: "application/json" },
    }).then(function (response) {
      if (!response.ok) {
        var own = reasonFor ? reasonFor(response.status) : null;
        var reason = own
          ? own
          : response.status === 401 || response.status === 403
            ? "your staff session may have ended; reload the page to log in again"
            : response.status === 503
              ? "the database is unavailable (503)"
              : "the server answered " + response.status;
        throw new Error(reason);
      }
      return response.json();
    });
  }

  /** The loop of one page: ``options.poll()`` returns a promise that polls and applies.
   * ``notice`` adds a timestamped line to the page's notices; ``start`` begins. */
  function poller(options) {
    var root = options.root;
    var status = options.status;
    var noticeList = options.noticeList;
    var intervalMs = options.intervalMs;
    var state = { timer: null, inFlight: false, failing: false, lastStart: -Infinity };

    function notice(kind, message) {
      var li = document.createElement("li");
      li.className = "fx-notice-" + kind;
      var when = document.createElement("time");
      var now = new Date();
      when.dateTime = now.toISOString();
      when.textContent = f.clockTime(now) + " " + f.timeZone;
      li.appendChild(when);
      li.appendChild(document.createTextNode(" " + message));
      noticeList.insertBefore(li, noticeList.firstChild);
      while (noticeList.children.length > 3) noticeList.removeChild(noticeList.lastChild);
    }

    function setStatus(kind, message) {
      root.dataset.pollState = kind;
      if (status) {
        status.dataset.state = kind;
        status.textContent = message;
      }
    }

    function schedule(delay) {
      clearTimeout(state.timer);
      state.timer = setTimeout(tick, delay);
    }

    function tick() {
      state.timer = null;
      if (state.inFlight) return;
      if (document.hidden) return setStatus("paused", PAUSED);
      state.inFlight = true;
      state.lastStart = Date.now();
      setStatus("polling", status ? status.textContent : "");
      options.poll()
        .then(function () {
          return "Live · updated " + f.clockTime(new Date()) + " " + f.timeZone;
        })
        .catch(function (error) {
          // Whatever failed (the request, the answer, or applying it), the next tick comes.
          return "Poll failed: " + (error && error.message ? error.message : "network error") +
            " · retrying every " + intervalMs / 1000 + " s";
        })
        .then(function (message) {
          state.inFlight = false;
          var failed = message.indexOf("Poll failed") === 0;
          // Announced once when polls start failing, not on every retry.
          if (failed && !state.failing) notice("error", message);
          state.failing = failed;
          if (document.hidden) return setStatus("paused", PAUSED);
          // Scheduled before the state reads idle, so an observer of "idle" sees the next tick queued.
          schedule(intervalMs);
          setStatus(failed ? "error" : "idle", message);
        });
    }

    function start() {
      document.addEventListener("visibilitychange", function () {
        if (document.hidden) {
          clearTimeout(state.timer);
          state.timer = null;
          if (!state.inFlight) setStatus("paused", PAUSED);
        } else if (!state.inFlight) {
          // Poll now, unless one started less than an interval ago: the bound holds
          // however often the tab is shown and hidden.
          var wait = state.lastStart + intervalMs - Date.now();
          if (wait > 0) schedule(wait);
          else tick();
        }
      });
      if (document.hidden) setStatus("paused", PAUSED);
      else schedule(intervalMs);
    }

    return { notice: notice, start: start };
  }

  window.ferroxPoller = { poller: poller, getJson: getJson, renderCounters: renderCounters };
})();
