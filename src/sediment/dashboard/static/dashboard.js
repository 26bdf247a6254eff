// Sediment dashboard: draws a view's data (embedded in the page as JSON) and fetches it again
// from the JSON API every few seconds. Every text from the store is written with textContent
// (tables, cards) or escaped for Plotly's labels: nothing from the data becomes HTML.
"use strict";

(function () {
  const body = document.body;
  const VIEW = body.dataset.view;
  const API = body.dataset.api;
  const REFRESH = Number(body.dataset.refresh) || 5000;
  const KIND_COLOURS = ["#3366cc", "#dc3912", "#ff9900", "#109618", "#990099", "#0099c6",
                        "#dd4477", "#66aa00", "#b82e2e", "#316395"];
  const PLOT_CONFIG = {displaylogo: false, responsive: true};
  // Times: the server sends ISO 8601 UTC with milliseconds (sediment.core.units.iso_time);
  // the script's own clock and Plotly's date axes write the same format.
  // Tick labels: the time above its date, in ISO 8601's order (hover texts give it whole).
  const ISO_TICKS = [
    {dtickrange: [null, 1000], value: "%H:%M:%S.%L\n%Y-%m-%d"},
    {dtickrange: [1000, 60000], value: "%H:%M:%S\n%Y-%m-%d"},
    {dtickrange: [60000, 86400000], value: "%H:%M\n%Y-%m-%d"},
    {dtickrange: [86400000, null], value: "%Y-%m-%d"},
  ];
  const DATE_AXIS = {type: "date", tickformatstops: ISO_TICKS, hoverformat: "%Y-%m-%dT%H:%M:%S.%LZ"};
  // Charts over time: the legend below their two-line tick labels (Plotly's top-right
  // buttons stay clear).
  const TIME_LAYOUT = {legend: {orientation: "h", x: 0, y: -0.2, yanchor: "top"},
                       margin: {l: 50, r: 20, t: 10, b: 40}};
  const kindColours = new Map();  // one colour per kind of commit or job, on every chart
  let treeRoot = null;  // the partition the tree view is rooted at (null: the table's root)
  let lastView = null;  // the table view drawn last (the commit window selector redraws it)

  function isoTime(date) { return date.toISOString(); }

  function kindColour(kind) {
    if (!kindColours.has(kind)) kindColours.set(kind, KIND_COLOURS[kindColours.size % KIND_COLOURS.length]);
    return kindColours.get(kind);
  }

  // An axis of counts: whole numbers only (no 2.5 files), one tick per unit when few.
  function countAxis(title, max) {
    const axis = {title: {text: title}, rangemode: "tozero", tickformat: "d"};
    if (max <= 10) Object.assign(axis, {tick0: 0, dtick: 1});
    return axis;
  }

  function readData() {
    return JSON.parse(document.getElementById("view-data").textContent);
  }

  // Plotly reads a subset of HTML in its labels and hover texts: escape the data's text (no
  // tag can start without a '<'; Plotly decodes these three entities back for display).
  function esc(value) {
    return String(value === null || value === undefined ? "" : value)
      .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function num(n) {
    if (n === null || n === undefined) return "";
    if (typeof n !== "number") return String(n);
    return Number.isInteger(n) ? n.toLocaleString("en") :
      n.toLocaleString("en", {maximumSignificantDigits: 3});
  }

  function bytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let v = n, i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
    return i === 0 ? v + " B" : v.toFixed(1) + " " + units[i];
  }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function fillTable(id, rows, cells) {
    const tbody = document.querySelector("#" + id + " tbody");
    if (!tbody) return;
    const out = document.createDocumentFragment();
    for (const row of rows) {
      const tr = document.createElement("tr");
      for (const c of cells(row)) {
        const td = document.createElement("td");
        if (c instanceof Node) td.appendChild(c); else td.textContent = c === null || c === undefined ? "" : String(c);
        tr.appendChild(td);
      }
      out.appendChild(tr);
    }
    tbody.replaceChildren(out);
  }

  function cards(id, items) {
    const box = document.getElementById(id);
    if (!box) return;
    box.replaceChildren(...items.map(([label, value, cls]) => {
      const card = el("div", null, "card" + (cls ? " " + cls : ""));
      card.appendChild(el("div", value, "value"));
      card.appendChild(el("div", label, "label"));
      return card;
    }));
  }

  function ago(seconds) {
    return seconds === null || seconds === undefined ? "" : seconds.toFixed(1) + " s ago";
  }

  function link(href, text) {
    const a = el("a", text);
    a.href = href;
    return a;
  }

  function tableHref(name) { return "/tables/" + encodeURIComponent(name); }

  function draw(id, traces, layout) {
    // uirevision: a refresh keeps what the user did to the chart (zoom, drill-down level)
    const base = {margin: {l: 50, r: 20, t: 10, b: 40}, height: 300, showlegend: true,
                  legend: {orientation: "h"}, font: {size: 11}, uirevision: id};
    return Plotly.react(id, traces, Object.assign(base, layout || {}), PLOT_CONFIG);
  }

  function status(text, isError) {
    const s = document.getElementById("status");
    s.textContent = text;
    s.className = "status" + (isError ? " error" : "");
  }

  // ---- store page -------------------------------------------------------------------------
  function renderStore(data) {
    const tables = data.tables;
    const behind = tables.filter(t => !t.keeping_up).length;
    cards("store-cards", [
      ["tables", num(tables.length)],
      // stored, as `sediment describe` says: deleted and replaced records count until
      // compaction drops them
      ["records stored", num(tables.reduce((a, t) => a + t.records, 0))],
      ["files", num(tables.reduce((a, t) => a + t.files, 0))],
      ["behind on compaction", num(behind), behind ? "bad" : "good"],
      ["cannot be read", num(data.unreadable.length), data.unreadable.length ? "bad" : "good"],
    ]);
    fillTable("unreadable", data.unreadable, t => [
      link(tableHref(t.name), t.name), el("span", t.error, "bad")]);
    fillTable("tables", tables, t => [
      link(tableHref(t.name), t.name), num(t.records), num(t.leaves), num(t.files),
      t.version, el("span", t.last_commit, "time"), t.online ? "online" : "offline", num(t.max_files_per_leaf),
      num(t.batch_size), el("span", t.keeping_up ? "keeping up" : "behind",
                            t.keeping_up ? "good" : "bad"),
      num(t.batcher.queue_depth), ago(t.batcher.oldest_age_seconds)]);
    const m = data.maintainers;
    fillTable("maintainers", m.members, r => [
      r.member, r.host, r.pid, ago(r.heartbeat_age_seconds),
      el("span", r.live ? "live" : "silent", r.live ? "good" : "bad"),
      r.leases.join(", ") || "(none)"]);
    fillTable("leases", m.leases, r => [
      r.lease, r.member, r.epoch, ago(r.heartbeat_age_seconds),
      el("span", r.state, r.state === "expired" ? "bad" : r.state === "held" ? "good" : "")]);
    const names = tables.map(t => esc(t.name));
    return draw("chart-keeping-up", [
      {type: "bar", name: "max files per leaf", x: names, y: tables.map(t => t.max_files_per_leaf),
       marker: {color: tables.map(t => t.keeping_up ? "#109618" : "#dc3912")}},
      {type: "scatter", mode: "markers", name: "compaction batch size", x: names,
       y: tables.map(t => t.batch_size), marker: {symbol: "line-ew-open", size: 30,
                                                  color: "#333", line: {width: 3}}},
    ], {yaxis: countAxis("files", Math.max(0, ...tables.map(t => Math.max(t.max_files_per_leaf, t.batch_size))))});
  }

  // ---- table page -------------------------------------------------------------------------
  function renderLeaves(list) {
    const rows = list.rows;
    document.getElementById("leaf-note").textContent = list.total > rows.length ?
      "(the first " + num(rows.length) + " of " + num(list.total) + ", in key order)" :
      "(" + num(list.total) + ", in key order)";
    fillTable("leaves", rows, r => [
      "#" + r.n, el("code", r.id), el("code", r.region), num(r.files),
      el("span", num(r.files_read), r.files_read > lastBatch ? "bad" : ""), num(r.records),
      bytes(r.bytes)]);
  }

  let lastBatch = Infinity;
  function renderTree(tree, batch) {
    lastBatch = batch;
    renderLeaves(tree.leaf_list);
    const nodes = tree.nodes;
    // Leaves carry their number in the list beside the chart; when many share the width, the
    // number is all their tile shows (the list and the hover text give the rest).
    const number = new Map(tree.leaf_list.rows.map(r => [r.id, r.n]));
    const crowded = nodes.filter(n => n.leaf).length > 16;
    const total = nodes.reduce((a, n) => a + (n.parent === null ? n.records : 0), 0);
    const byLeaves = total === 0;  // an empty table: widths by leaves instead of records
    const path = document.getElementById("tree-path");
    const crumbs = [link("#", "root")];
    crumbs[0].dataset.partition = "";
    for (const p of tree.path.slice(1)) {
      const a = link("#", p.region);
      a.dataset.partition = p.id;
      crumbs.push(a);
    }
    path.replaceChildren(...crumbs.flatMap((c, i) => i ? [el("span", " › "), c] : [c]));
    const trace = {
      type: "icicle", branchvalues: "total", sort: false,
      ids: nodes.map(n => n.id),
      parents: nodes.map(n => n.parent === null ? "" : n.parent),
      labels: nodes.map(n => (number.has(n.id) ? "#" + number.get(n.id) + " " : "") +
                             esc(n.region) + (n.more ? " ⊕" : "")),
      text: nodes.map(n => number.has(n.id) && crowded ? "#" + number.get(n.id) : esc(n.region)),
      values: nodes.map(n => byLeaves ? n.leaves : n.records),
      customdata: nodes.map(n => [esc(n.id), num(n.records), num(n.files),
                                  n.leaf ? num(n.files_read) : "-", num(n.leaves),
                                  n.split_key === null ? "-" : esc(n.split_key)]),
      hovertemplate: "<b>%{label}</b><br>partition %{customdata[0]}<br>records %{customdata[1]}" +
        "<br>files held %{customdata[2]}<br>files read (leaf) %{customdata[3]}" +
        "<br>leaves %{customdata[4]}<br>split at %{customdata[5]}<extra></extra>",
      marker: {colors: nodes.map(n => !n.leaf ? "#dfe6ee" :
                                  n.files_read > batch ? "#f4a6a6" : "#b7d7f7"),
               line: {color: "#fff", width: 1}},
      texttemplate: nodes.map(n => number.has(n.id) && crowded ? "%{text}" :
        "%{label}<br>%{customdata[1]} records · %{customdata[2]} files held"),
      tiling: {orientation: "v"}, root: {color: "#eee"},
    };
    const more = new Map(nodes.map(n => [n.id, n.more]));
    return draw("chart-tree", [trace], {height: 380, margin: {l: 5, r: 5, t: 5, b: 5},
                                        uirevision: tree.root})
      .then(gd => {
        gd.removeAllListeners && gd.removeAllListeners("plotly_click");
        gd.on("plotly_click", ev => {
          const id = ev.points && ev.points[0] && ev.points[0].id;
          if (id && more.get(id)) { treeRoot = id; refresh(); return false; }
          return undefined;
        });
        return gd;
      });
  }

  // The commits of the chosen window (hour, day, week), stacked by kind per bucket.
  function renderCommits(timeline) {
    const select = document.getElementById("commit-window");
    if (!select.dataset.chosen) select.value = timeline.default;
    const w = timeline.windows.find(x => x.name === select.value) || timeline.windows[0];
    const kinds = Object.keys(w.counts);
    const spans = w.buckets.map((b, i) => b + " to " + (w.buckets[i + 1] || w.end));
    const traces = kinds.map(k => ({
      type: "bar", name: esc(k), x: w.buckets, y: w.counts[k], customdata: spans,
      xperiod: w.bucket_seconds * 1000, xperiodalignment: "middle",
      hovertemplate: "%{customdata}<br>" + esc(k) + ": %{y}<extra></extra>",
      marker: {color: kindColour(k)}}));
    const top = Math.max(0, ...w.buckets.map((_, i) => kinds.reduce((a, k) => a + w.counts[k][i], 0)));
    const note = [num(w.commits) + " commits in the " + w.label + ", per " + w.bucket];
    if (timeline.unread) note.push(num(timeline.unread) + " not read yet (counted as such; their kinds " +
                                   "come in over the next refreshes)");
    if (timeline.oldest) note.push("commits held since " + timeline.oldest);
    document.getElementById("commit-note").textContent = note.join(" · ");
    return draw("chart-history", traces, Object.assign({}, TIME_LAYOUT, {
      barmode: "stack", bargap: 0.1, uirevision: "chart-history:" + w.name,
      xaxis: Object.assign({}, DATE_AXIS, {range: [w.start, w.end]}),
      yaxis: countAxis("commits per " + w.bucket, top)}));
  }

  // Every property by group, then name: monospace names and values, the default, and
  // whether the table sets it; the meaning wraps beside them.
  function renderProperties(props) {
    const only = document.getElementById("only-set").checked;
    const tbody = document.querySelector("#properties tbody");
    const out = document.createDocumentFragment();
    let group = null;
    for (const p of props) {
      if (only && !p.set) continue;
      if (p.group !== group) {
        group = p.group;
        const head = el("tr", null, "group");
        const th = el("th", group);
        th.colSpan = 5;
        head.appendChild(th);
        out.appendChild(head);
      }
      const tr = el("tr", null, p.set ? "is-set" : "");
      const value = el("code", JSON.stringify(p.value));
      if (/_bytes$/.test(p.name) && typeof p.value === "number" && p.value >= 1024) {
        value.title = bytes(p.value);
        value.textContent += " (" + bytes(p.value) + ")";
      }
      for (const c of [el("code", p.name), value,
                       el("code", JSON.stringify(p.default)),
                       el("span", p.set ? "set" : "default", p.set ? "badge set" : "badge"),
                       el("span", p.meaning, "meaning")]) {
        const td = document.createElement("td");
        td.appendChild(c);
        tr.appendChild(td);
      }
      out.appendChild(tr);
    }
    tbody.replaceChildren(out);
  }

  // The merge rule as the properties say it: "last", "aggregate (clicks: sum; others: last)".
  function mergeText(merge) {
    if (!merge) return "";
    const fns = Object.entries(merge.functions || {}).map(([f, fn]) => f + ": " + fn);
    if (merge.rule !== "aggregate") return merge.rule + (merge.rule === "none" ? " (every record kept)" : "");
    return merge.rule + " (" + fns.concat(["others: last"]).join("; ") + ")";
  }

  function renderTable(data) {
    const view = data.view;
    lastView = data;
    const t = view.table;
    cards("table-cards", [
      ["records stored", num(t.records)], ["leaves", num(t.leaves)],
      ["partitions", num(t.partitions)], ["files", num(t.files)], ["version", t.version],
      ["last commit", t.last_commit || "-"], ["state", t.online ? "online" : "offline",
                                              t.online ? "good" : "bad"],
      ["max files per leaf / batch", num(t.max_files_per_leaf) + " / " + num(t.batch_size),
       t.keeping_up ? "good" : "bad"],
      ["failed jobs", num(view.jobs.failed), view.jobs.failed ? "bad" : "good"],
      ["merge rule", view.merge ? view.merge.rule : "-"],
      ["deletes not settled", num((view.deletes || []).length)],
    ]);
    const hist = view.histogram;
    const top = Math.max(1, ...hist.map(h => h.leaves));
    const files = draw("chart-files", [
      {type: "bar", name: "leaves", x: hist.map(h => h.files), y: hist.map(h => h.leaves),
       marker: {color: hist.map(h => h.files > t.batch_size ? "#dc3912" : "#3366cc")}},
    ], {showlegend: false, margin: {l: 50, r: 20, t: 30, b: 40},
        xaxis: countAxis("files per leaf", Math.max(t.batch_size, ...hist.map(h => h.files))),
        yaxis: countAxis("leaves", top),
        shapes: [{type: "line", x0: t.batch_size, x1: t.batch_size, y0: 0, y1: top,
                  line: {color: "#dc3912", dash: "dash", width: 2}}],
        annotations: [{x: t.batch_size, y: top, text: "batch size " + t.batch_size,
                       showarrow: false, yanchor: "bottom", font: {color: "#dc3912"}}]});
    const history = renderCommits(view.timeline);
    const jobs = view.jobs.jobs;
    const jobKinds = [...new Set(jobs.map(j => j.kind))];
    const traces = jobKinds.map((k, i) => {
      const js = jobs.filter(j => j.kind === k && j.status !== "failed");
      return {type: "scatter", mode: "markers", name: esc(k), x: js.map(j => j.created),
              y: js.map(j => j.seconds),
              text: js.map(j => esc(j.status) + " · " + num(j.records) + " records · " +
                            num(j.records_per_second) + " records/s"),
              hovertemplate: "%{x}<br>%{y:.3f} s<br>%{text}<extra></extra>",
              marker: {color: kindColour(k), size: 8}};
    });
    const failed = jobs.filter(j => j.status === "failed");
    traces.push({type: "scatter", mode: "markers", name: "failed", x: failed.map(j => j.created),
                 y: failed.map(j => j.seconds),
                 text: failed.map(j => esc(j.kind) + ": " + esc(j.reason)),
                 hovertemplate: "%{x}<br>%{text}<extra></extra>",
                 marker: {color: "#dc3912", symbol: "x", size: 12}});
    const jobsChart = draw("chart-jobs", traces, Object.assign({}, TIME_LAYOUT, {
      xaxis: DATE_AXIS, yaxis: {title: {text: "seconds"}, rangemode: "tozero"}}));
    fillTable("jobs", jobs.slice(-50).reverse(), j => [
      el("span", j.created, "time"), j.kind, j.job_id, j.partition_id, el("span", j.status, j.status === "failed" ? "bad" : ""),
      num(j.seconds), num(j.records), num(j.records_per_second), j.reason]);
    fillTable("tags", view.tags, g => [g.name, g.version, el("span", g.created, "time")]);
    fillTable("gc-kept", view.gc.kept, k => [
      k.class, k.reason, num(k.files), bytes(k.bytes),
      k.due === null ? "not by time" : el("span", k.due, "time")]);
    const u = view.gc.usage;
    fillTable("usage", [["live data", u.live], ["sidecars (samples, filters)", u.sidecars],
      ...Object.entries(u.unreferenced).map(([r, b]) => ["unreferenced: " + r, b]),
      ...Object.entries(u.orphaned).map(([r, b]) => ["orphaned: " + r, b]),
      ["metadata", u.metadata], ["job events", u.status], ["total", u.total]],
      r => [r[0], bytes(r[1])]);
    fillTable("history", view.history, h => [h.version, el("span", h.time, "time"), h.kind,
                                             h.detail ? h.summary + ": " + h.detail : h.summary]);
    fillTable("deletes", view.deletes, d => [d.version, d.deletes, num(d.leaves)]);
    fillTable("schema-history", view.schema_history || [], s => [s.version, s.change, s.columns]);
    document.getElementById("merge-rule").textContent = mergeText(view.merge);
    renderProperties(view.properties);
    return Promise.all([renderTree(data.tree, t.batch_size), files, history, jobsChart]);
  }

  // ---- query page -------------------------------------------------------------------------
  function renderQuery(data) {
    document.getElementById("query-error").textContent = data.error || "";
    if (data.error) return Promise.resolve();
    const plan = data.plan;
    cards("plan-cards", [["version", plan.version], ["leaves read", num(plan.leaves)],
                         ["files read", num(plan.files)], ["records shown", num(data.rows.length)]]);
    fillTable("plan", plan.subqueries, s => [s.leaf_id, s.region, num(s.files), num(s.records)]);
    document.getElementById("request").textContent = data.request || "";
    const head = document.querySelector("#rows thead");
    const tr = document.createElement("tr");
    for (const c of data.columns) tr.appendChild(el("th", c));
    head.replaceChildren(tr);
    fillTable("rows", data.rows, r => r.map(v => v !== null && typeof v === "object" ? JSON.stringify(v) : v));
    document.getElementById("rows-note").textContent = data.more ?
      "(the first " + data.limit + "; more follow)" : "(" + data.rows.length + ")";
    const subs = plan.subqueries;
    return draw("chart-plan", [{type: "bar", name: "files", x: subs.map(s => esc(s.region)),
                                y: subs.map(s => s.files), marker: {color: "#3366cc"}}],
                {showlegend: false, xaxis: {type: "category", automargin: true},
                 yaxis: countAxis("files read", Math.max(0, ...subs.map(s => s.files)))});
  }

  // ---- refresh loop -----------------------------------------------------------------------
  const RENDER = {store: renderStore, table: renderTable, query: renderQuery};

  function render(data) {
    const out = RENDER[VIEW](data);
    return Promise.resolve(out).then(() => { body.dataset.rendered = String(Date.now()); });
  }

  function getJson(url) {
    return fetch(url, {credentials: "same-origin", headers: {Accept: "application/json"}})
      .then(r => r.json().then(d => ({ok: r.ok || (VIEW === "query" && r.status === 400), status: r.status, data: d})));
  }

  function load() {
    if (VIEW === "table") {
      const tree = API + "/partitions" + (treeRoot ? "?root=" + encodeURIComponent(treeRoot) : "");
      return Promise.all([getJson(API), getJson(tree)]).then(([v, t]) => {
        if (!v.ok) throw new Error(v.data.error || ("HTTP " + v.status));
        if (!t.ok) { treeRoot = null; throw new Error(t.data.error || ("HTTP " + t.status)); }
        return {view: v.data, tree: t.data};
      });
    }
    return getJson(API + window.location.search).then(r => {
      if (!r.ok) throw new Error(r.data.error || ("HTTP " + r.status));
      return r.data;
    });
  }

  let timer = null;
  function refresh() {
    clearTimeout(timer);
    return load().then(render)
      .then(() => status("updated " + isoTime(new Date())))
      .catch(e => status("refresh failed: " + e.message, true))
      .finally(() => { timer = setTimeout(refresh, REFRESH); });
  }

  if (VIEW in RENDER) {
    if (VIEW === "table") {
      const select = document.getElementById("commit-window");
      select.addEventListener("change", () => {
        select.dataset.chosen = "1";
        if (lastView) renderCommits(lastView.view.timeline);
      });
      document.getElementById("only-set").addEventListener("change", () => {
        if (lastView) renderProperties(lastView.view.properties);
      });
      document.getElementById("tree-path").addEventListener("click", ev => {
        const a = ev.target.closest("a");
        if (!a) return;
        ev.preventDefault();
        treeRoot = a.dataset.partition || null;
        refresh();
      });
    }
    render(readData()).catch(e => status("drawing failed: " + e.message, true));
    timer = setTimeout(refresh, REFRESH);
  }
})();
