/* How values read on the dashboard: the script's copy of ferrox_stats/web/display.py.
 *
 * Each format has the name it has there, so the server's first paint and the polled
 * updates read alike (a browser test holds the two to the same cases). A value nothing
 * measured (null) reads "—", never 0.
 */
(function () {
  "use strict";

  var EMPTY = "—";

  function grouped(value, digits) {
    // en-US and "half away from zero", as display.py's Decimal ROUND_HALF_UP.
    return value.toLocaleString("en-US", {
      minimumFractionDigits: digits,
      maximumFractionDigits: digits,
    });
  }

  function number(v) {
    // display._number: a finite number, else null (NaN, Infinity, a string, a bool).
    return typeof v === "number" && isFinite(v) ? v : null;
  }

  function exponent(v) {
    // display._exponent: four significant digits, half away from zero.
    return v.toExponential(3);
  }

  function count(v) {
    v = number(v);
    if (v == null) return EMPTY;
    return Math.abs(v) >= 1e15 ? exponent(v) : grouped(v, 0); // display.EXPONENT_FROM
  }

  function decimal(v) {
    v = number(v);
    if (v == null) return EMPTY;
    if (Math.abs(v) >= 1e15) return exponent(v); // display.EXPONENT_FROM
    return grouped(v, Math.abs(v) >= 999.95 ? 0 : 1); // display.WHOLE_FROM
  }

  function text(v) {
    return v == null || v === "" ? EMPTY : String(v);
  }

  function ranked(counts) {
    return Object.keys(counts)
      .map(function (k) { return [k, counts[k]]; })
      .sort(function (a, b) { return b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0); });
  }

  var FORMATS = {
    count: count,
    decimal: decimal,
    text: text,
    percent: function (v) { return number(v) == null ? EMPTY : decimal(v * 100); },
    total: function (v) {
      if (v == null || typeof v !== "object") return EMPTY;
      return count(Object.keys(v).reduce(function (sum, k) {
        return number(v[k]) == null ? sum : sum + v[k];
      }, 0));
    },
    reasons: function (v) {
      if (!v) return "";
      return ranked(v).map(function (p) { return p[0] + " " + count(p[1]); }).join(" · ");
    },
    rate_window: function (v) {
      if (!v) return "";
      var out = String(v.window_s) + " s window";
      return v.decode_samples == null ? out : out + " · " + count(v.decode_samples) + " samples";
    },
    latency_window: function (v) {
      if (!v || !v.requests) return "no finished requests in the ring";
      var out = "last " + count(v.requests) + " requests";
      return v.seconds == null ? out : out + " · " + decimal(v.seconds) + " s";
    },
    archive_state: function (v) {
      if (v == null) return "no archive sink in this process";
      return v.last_error ? "last error: " + v.last_error : "";
    },
    milliseconds: function (v) {
      // display.milliseconds: the fleet reports seconds; the page reads milliseconds.
      return number(v) == null ? EMPTY : decimal(v * 1000);
    },
    requests_over: function (v) {
      if (v == null || typeof v !== "object" || !number(v.count)) return "no finished requests";
      return "over " + count(v.count) + " requests";
    },
    fleet_archive_state: function (v) {
      return v != null && typeof v === "object" && !Array.isArray(v) ? "" : "no archive reported";
    },
    unreadable_rows: function (v) {
      return number(v) ? count(v) + " heartbeat rows unreadable, skipped" : "";
    },
    age: function (v) {
      if (number(v) == null) return EMPTY;
      if (Math.abs(v) < 10) return decimal(v) + " s ago"; // display.TENTHS_BELOW
      return FORMATS.uptime(v) + " ago";
    },
    uptime: function (v) {
      if (number(v) == null) return EMPTY;
      if (Math.abs(v) >= 1e15) return exponent(v) + " s"; // display.EXPONENT_FROM
      var s = Math.floor(v);
      if (s < 60) return s + " s";
      if (s < 3600) return Math.floor(s / 60) + " min";
      if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
      return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
    },
  };

  function lookup(doc, path) {
    var value = doc;
    var parts = path.split(".");
    for (var i = 0; i < parts.length; i++) {
      if (value == null || typeof value !== "object") return null;
      value = value[parts[i]];
    }
    return value === undefined ? null : value;
  }

  // Times read in the zone the server renders them in (<body data-time-zone>: the
  // project's TIME_ZONE or the active one), "HH:MM:SS" as display.local_time writes
  // them. A zone this browser does not know falls back to UTC, named as such.
  var clockOptions = { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" };
  var timeZone = (document.body && document.body.dataset.timeZone) || "UTC";
  var clock;
  try {
    clock = new Intl.DateTimeFormat("en-GB", Object.assign({ timeZone: timeZone }, clockOptions));
  } catch (e) {
    timeZone = "UTC";
    clock = new Intl.DateTimeFormat("en-GB", Object.assign({ timeZone: "UTC" }, clockOptions));
  }

  function clockTime(date) {
    return clock.format(date);
  }

  function outcome(e) {
    if (e.aborted != null) return "aborted";
    if (e.error != null || (e.status != null && e.status >= 400)) return "error";
    return "ok";
  }

  window.ferroxFormat = {
    EMPTY: EMPTY,
    FORMATS: FORMATS,
    clockTime: clockTime,
    timeZone: timeZone,
    count: count,
    decimal: decimal,
    grouped: grouped,
    lookup: lookup,
    number: number,
    outcome: outcome,
    text: text,
    format: function (name, value) { return FORMATS[name](value); },
  };
})();
