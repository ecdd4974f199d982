/* Table rows the pages' scripts build: one finished request, a marker, one instance.
 *
 * Each reads like its server-rendered twin (templates _request_row.html and
 * _instance_row.html, built by display.row and fleet.instance_row), so the first
 * paint and the polled rows look alike.
 */
(function () {
  "use strict";

  var f = window.ferroxFormat;
  var EMPTY = f.EMPTY;

  function cell(tag, content, cls) {
    var td = document.createElement(tag);
    if (cls) td.className = cls;
    if (content instanceof Node) td.appendChild(content);
    else td.textContent = content;
    return td;
  }

  function timeOf(atMs) {
    var time = document.createElement("time");
    if (typeof atMs === "number" && isFinite(atMs)) {
      var when = new Date(atMs);
      if (!isNaN(when.getTime())) {
        time.dateTime = when.toISOString();
        time.textContent = f.clockTime(when);
        return time;
      }
    }
    time.textContent = EMPTY;
    return time;
  }

  /** One finished request (a ring entry or an archived row); ``detailUrl`` holds REQUEST_ID. */
  function request(e, detailUrl) {
    var tr = document.createElement("tr");
    var kind = f.outcome(e);
    tr.className = "fx-" + kind + " fx-new";
    if (e.seq != null) tr.dataset.seq = e.seq;

    tr.appendChild(cell("td", timeOf(e.at_ms), "fx-time"));
    var id = cell("th", EMPTY, "fx-id");
    id.scope = "row";
    if (e.request_id) {
      var link = document.createElement("a");
      link.href = detailUrl.replace("REQUEST_ID", encodeURIComponent(e.request_id));
      link.textContent = e.request_id;
      id.textContent = "";
      id.appendChild(link);
    }
    tr.appendChild(id);
    tr.appendChild(cell("td", f.text(e.model)));
    tr.appendChild(cell("td", f.text(e.route)));
    tr.appendChild(cell("td", f.text(e.status), "fx-num"));
    var badge = document.createElement("span");
    badge.className = "fx-badge fx-badge-" + kind;
    badge.textContent = kind === "aborted" ? "aborted: " + e.aborted : kind;
    tr.appendChild(cell("td", badge));
    tr.appendChild(cell("td", f.count(e.prompt_tokens) + " → " + f.count(e.completion_tokens), "fx-num"));
    tr.appendChild(cell("td", f.decimal(e.ttft_ms), "fx-num"));
    tr.appendChild(cell("td", f.decimal(e.duration_ms), "fx-num"));
    tr.appendChild(cell("td", f.decimal(e.decode_tps), "fx-num"));
    tr.appendChild(cell("td", f.text(e.replica)));
    return tr;
  }

  /** A break in a table, across all its columns: rows missing, or the source changed. */
  function marker(table, message) {
    var tr = document.createElement("tr");
    tr.className = "fx-marker";
    var td = document.createElement("td");
    td.colSpan = table.tHead.rows[0].cells.length;
    td.textContent = message;
    tr.appendChild(td);
    return tr;
  }

  var STATES = ["live", "stale", "lost", "stopped"];

  /** fleet.instance_note: what an operator must know about an instance beyond its numbers. */
  function instanceNote(i) {
    var notes = [];
    if (i.state === "lost") {
      notes.push(f.number(i.not_archived) == null
        ? "no heartbeat, no clean shutdown: archive unknown"
        : "up to " + f.count(i.not_archived) + " records not archived");
    } else if (i.state === "stale") {
      notes.push("heartbeats late: not in the totals");
    } else if (i.state === "stopped") {
      notes.push("shut down cleanly");
    }
    if (i.dropped && typeof i.dropped === "object" && Object.keys(i.dropped).length) {
      notes.push("dropped: " + f.format("reasons", i.dropped));
    }
    return notes.join(" · ");
  }

  /** One instance of a v1/fleet document; ``selected`` is the instance the page narrows to. */
  function instance(i, dashboardUrl, selected) {
    var state = STATES.indexOf(i.state) >= 0 ? i.state : "unknown";
    var id = typeof i.instance === "string" ? i.instance : "";
    var tr = document.createElement("tr");
    tr.className = "fx-instance-row fx-row-" + state + (id && id === selected ? " fx-selected" : "");
    tr.dataset.instance = id;
    if (id && id === selected) tr.setAttribute("aria-current", "true");

    var badge = document.createElement("span");
    badge.className = "fx-badge fx-badge-" + state;
    badge.textContent = state;
    tr.appendChild(cell("td", badge));
    var name = cell("th", f.text(i.instance), "fx-id");
    name.scope = "row";
    if (id) {
      var link = document.createElement("a");
      link.href = dashboardUrl + "?instance=" + encodeURIComponent(id);
      link.textContent = id;
      name.textContent = "";
      name.appendChild(link);
    }
    tr.appendChild(name);
    tr.appendChild(cell("td", f.text(i.host)));
    tr.appendChild(cell("td", f.text(i.pid), "fx-num"));
    tr.appendChild(cell("td", f.text(i.replica)));
    tr.appendChild(cell("td", f.format("uptime", i.uptime_s), "fx-num"));
    var seen = cell("td", timeOf(i.last_seen_ms), "fx-time");
    var age = document.createElement("span");
    age.className = "fx-age";
    age.textContent = f.format("age", i.age_s);
    seen.appendChild(document.createTextNode(" "));
    seen.appendChild(age);
    tr.appendChild(seen);
    tr.appendChild(cell("td", f.count(i.active), "fx-num"));
    tr.appendChild(cell("td", f.count(i.completed), "fx-num"));
    tr.appendChild(cell("td", f.decimal(i.decode_tps), "fx-num"));
    tr.appendChild(cell("td", f.decimal(i.prefill_tps), "fx-num"));
    tr.appendChild(cell("td", f.count(i.pending), "fx-num"));
    tr.appendChild(cell("td", instanceNote(i), "fx-note-cell"));
    return tr;
  }

  window.ferroxRows = { request: request, marker: marker, instance: instance, instanceNote: instanceNote };
})();
