/* The dashboard's charts: a time series per line, one point per poll, drawn with uPlot.
 *
 * uPlot is vendored under vendor/uplot/ (see package.json); nothing loads from a CDN.
 */
(function () {
  "use strict";

  var f = window.ferroxFormat;

  // Each chart's lines, by where their value is in the document the page polls: the
  // admin-stats document on this process's page, v1/fleet on the fleet page.
  var CHARTS = {
    throughput: [
      { label: "decode", path: "live.throughput.decode_tps", color: "#2563eb" },
      { label: "prefill", path: "live.throughput.prefill_tps", color: "#0d9488" },
    ],
    duration: [
      { label: "p50", path: "summary.duration_ms.p50", color: "#7c3aed" },
      { label: "p95", path: "summary.duration_ms.p95", color: "#7c3aed", dash: [6, 4] },
    ],
    ttft: [
      { label: "p50", path: "summary.ttft_ms.p50", color: "#ea580c" },
      { label: "p95", path: "summary.ttft_ms.p95", color: "#ea580c", dash: [6, 4] },
    ],
    // The fleet page's, from v1/fleet; its percentiles are in seconds, drawn in ms.
    fleet_throughput: [
      { label: "decode", path: "totals.decode_tps", color: "#2563eb" },
      { label: "prefill", path: "totals.prefill_tps", color: "#0d9488" },
    ],
    fleet_duration: [
      { label: "p50", path: "totals.latency.duration_s.p50", scale: 1000, color: "#7c3aed" },
      { label: "p95", path: "totals.latency.duration_s.p95", scale: 1000, color: "#7c3aed", dash: [6, 4] },
      { label: "p99", path: "totals.latency.duration_s.p99", scale: 1000, color: "#7c3aed", dash: [2, 3] },
    ],
    fleet_ttft: [
      { label: "p50", path: "totals.latency.ttft_s.p50", scale: 1000, color: "#ea580c" },
      { label: "p95", path: "totals.latency.ttft_s.p95", scale: 1000, color: "#ea580c", dash: [6, 4] },
      { label: "p99", path: "totals.latency.ttft_s.p99", scale: 1000, color: "#ea580c", dash: [2, 3] },
    ],
  };
  var HEIGHT = 200;

  function valueOf(doc, line) {
    var v = f.lookup(doc, line.path);
    if (f.number(v) == null) return null; // a gap: nothing measured
    return line.scale ? v * line.scale : v;
  }

  function clockTime(seconds) {
    return f.clockTime(new Date(seconds * 1000));
  }

  function tick(v) {
    return v.toLocaleString("en-US", { maximumFractionDigits: 3 });
  }

  function options(width, lines) {
    var axis = { stroke: "#5b6473", grid: { stroke: "#eceef2" }, ticks: { stroke: "#dfe3e8" } };
    return {
      width: width,
      height: HEIGHT,
      scales: {
        x: { time: true },
        y: { range: function (u, min, max) { return [0, max > 0 ? max * 1.1 : 1]; } },
      },
      legend: { live: true },
      // Room on the right for the newest time label.
      padding: [10, 28, 0, 0],
      cursor: { drag: { x: false, y: false } },
      axes: [
        // Times read in UTC, like the table's.
        Object.assign({}, axis, { space: 90, values: function (u, s) { return s.map(clockTime); } }),
        Object.assign({}, axis, { size: 56, values: function (u, s) { return s.map(tick); } }),
      ],
      series: [{ label: f.timeZone, value: function (u, v) { return v == null ? f.EMPTY : clockTime(v); } }].concat(
        lines.map(function (line) {
          return {
            label: line.label,
            stroke: line.color,
            width: 2,
            dash: line.dash,
            points: { show: false },
            value: function (u, v) { return f.decimal(v); },
          };
        })
      ),
    };
  }

  function Chart(el, lines, maxPoints) {
    var self = this;
    this.lines = lines;
    this.maxPoints = maxPoints;
    // uPlot's data: the times, then one array per line (null is a gap: nothing measured).
    this.data = [[]].concat(lines.map(function () { return []; }));
    el.textContent = "";
    this.plot = new window.uPlot(options(Math.max(el.clientWidth, 200), lines), this.data, el);
    this.plot.over.addEventListener("mouseleave", function () { self.showLatest(); });
    if (typeof ResizeObserver === "function") {
      new ResizeObserver(function () {
        self.plot.setSize({ width: Math.max(el.clientWidth, 200), height: HEIGHT });
      }).observe(el);
    }
  }

  Chart.prototype.add = function (seconds, doc) {
    var data = this.data;
    data[0].push(seconds);
    this.lines.forEach(function (line, i) { data[i + 1].push(valueOf(doc, line)); });
    if (data[0].length > this.maxPoints) data.forEach(function (values) { values.shift(); });
    this.plot.setData(data);
    this.showLatest();
  };

  Chart.prototype.showLatest = function () {
    // While the pointer is not over the chart, its legend reads the newest point.
    var cursor = this.plot.cursor;
    if (cursor.left == null || cursor.left < 0) {
      this.plot.setLegend({ idx: Math.max(0, this.data[0].length - 1) });
    }
  };

  /** Draw every chart whose element (id "fx-chart-<name>") is on the page; return an adder. */
  function start(maxPoints) {
    var charts = [];
    if (typeof window.uPlot === "function") {
      Object.keys(CHARTS).forEach(function (name) {
        var el = document.getElementById("fx-chart-" + name);
        if (el) charts.push(new Chart(el, CHARTS[name], maxPoints));
      });
    }
    return {
      add: function (doc) {
        var now = Date.now() / 1000;
        charts.forEach(function (chart) { chart.add(now, doc); });
      },
    };
  }

  window.ferroxCharts = { start: start };
})();
