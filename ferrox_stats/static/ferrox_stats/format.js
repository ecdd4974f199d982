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

  function count(v) {
    return v == null ? EMPTY : grouped(v, 0);
  }

  function decimal(v) {
    if (v == null || !isFinite(v)) return EMPTY;
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
    percent: function (v) { return v == null ? EMPTY : decimal(v * 100); },
    total: function (v) {
      if (v == null) return EMPTY;
      return count(Object.keys(v).reduce(function (sum, k) { return sum + v[k]; }, 0));
    },
    reasons: function (v) {
      if (!v) return "";
      return ranked(v).map(function (p) { return p[0] + " " + grouped(p[1], 0); }).join(" · ");
    },
    rate_window: function (v) {
      if (!v) return "";
      var out = String(v.window_s) + " s window";
      return v.decode_samples == null ? out : out + " · " + grouped(v.decode_samples, 0) + " samples";
    },
    latency_window: function (v) {
      if (!v || !v.requests) return "no finished requests in the ring";
      var out = "last " + grouped(v.requests, 0) + " requests";
      return v.seconds == null ? out : out + " · " + decimal(v.seconds) + " s";
    },
    archive_state: function (v) {
      if (v == null) return "no archive sink in this process";
      return v.last_error ? "last error: " + v.last_error : "";
    },
    uptime: function (v) {
      if (v == null) return EMPTY;
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

  function outcome(e) {
    if (e.aborted != null) return "aborted";
    if (e.error != null || (e.status != null && e.status >= 400)) return "error";
    return "ok";
  }

  window.ferroxFormat = {
    EMPTY: EMPTY,
    FORMATS: FORMATS,
    count: count,
    decimal: decimal,
    grouped: grouped,
    lookup: lookup,
    outcome: outcome,
    text: text,
    format: function (name, value) { return FORMATS[name](value); },
  };
})();
