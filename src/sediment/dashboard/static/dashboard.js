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
  let treeRoot = null;  // the partition the tree view is rooted at (null: the table's root)

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
      ["records", num(tables.reduce((a, t) => a + t.records, 0))],
      ["files", num(tables.reduce((a, t) => a + t.files, 0))],
      ["behind on compaction", num(behind), behind ? "bad" : "good"],
    ]);
    fillTable("tables", tables, t => [
      link(tableHref(t.name), t.name), num(t.records), num(t.leaves), num(t.files),
      t.version, t.last_commit, t.online ? "online" : "offline", num(t.max_files_per_leaf),
      num(t.batch_size), el("span", t.keeping_up ? "keeping up" : "behind",
                            t.keeping_up ? "good" : "bad")]);
    const names = tables.map(t => esc(t.name));
    return draw("chart-keeping-up", [
      {type: "bar", name: "max files per leaf", x: names, y: tables.map(t => t.max_files_per_leaf),
       marker: {color: tables.map(t => t.keeping_up ? "#109618" : "#dc3912")}},
      {type: "scatter", mode: "markers", name: "compaction batch size", x: names,
       y: tables.map(t => t.batch_size), marker: {symbol: "line-ew-open", size: 30,
                                                  color: "#333", line: {width: 3}}},
    ], {yaxis: {title: {text: "files"}, rangemode: "tozero"}});
  }

  // ---- table page -------------------------------------------------------------------------
  function renderTree(tree, batch) {
    const nodes = tree.nodes;
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
      labels: nodes.map(n => esc(n.region) + (n.more ? " ⊕" : "")),
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
      texttemplate: "%{label}<br>%{customdata[1]} records · %{customdata[2]} files held",
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

  function renderTable(data) {
    const view = data.view;
    const t = view.table;
    cards("table-cards", [
      ["records", num(t.records)], ["leaves", num(t.leaves)],
      ["partitions", num(t.partitions)], ["files", num(t.files)], ["version", t.version],
      ["last commit", t.last_commit || "-"], ["state", t.online ? "online" : "offline",
                                              t.online ? "good" : "bad"],
      ["max files per leaf / batch", num(t.max_files_per_leaf) + " / " + num(t.batch_size),
       t.keeping_up ? "good" : "bad"],
      ["failed jobs", num(view.jobs.failed), view.jobs.failed ? "bad" : "good"],
    ]);
    const hist = view.histogram;
    const top = Math.max(1, ...hist.map(h => h.leaves));
    const files = draw("chart-files", [
      {type: "bar", name: "leaves", x: hist.map(h => h.files), y: hist.map(h => h.leaves),
       marker: {color: hist.map(h => h.files > t.batch_size ? "#dc3912" : "#3366cc")}},
    ], {showlegend: false, margin: {l: 50, r: 20, t: 30, b: 40},
        xaxis: {title: {text: "files per leaf"}, rangemode: "tozero"},
        yaxis: {title: {text: "leaves"}},
        shapes: [{type: "line", x0: t.batch_size, x1: t.batch_size, y0: 0, y1: top,
                  line: {color: "#dc3912", dash: "dash", width: 2}}],
        annotations: [{x: t.batch_size, y: top, text: "batch size " + t.batch_size,
                       showarrow: false, yanchor: "bottom", font: {color: "#dc3912"}}]});
    const kinds = [...new Set(view.history.map(h => h.kind))];
    const history = draw("chart-history", kinds.map((k, i) => {
      const hs = view.history.filter(h => h.kind === k);
      return {type: "scatter", mode: "markers", name: esc(k), x: hs.map(h => h.time),
              y: hs.map(() => esc(k)), text: hs.map(h => "v" + h.version + " " + esc(h.summary)),
              hovertemplate: "%{x}<br>%{text}<extra></extra>",
              marker: {color: KIND_COLOURS[i % KIND_COLOURS.length], size: 9}};
    }), {showlegend: false, margin: {l: 170, r: 20, t: 10, b: 40}, xaxis: {type: "date"}});
    const jobs = view.jobs.jobs;
    const jobKinds = [...new Set(jobs.map(j => j.kind))];
    const traces = jobKinds.map((k, i) => {
      const js = jobs.filter(j => j.kind === k && j.status !== "failed");
      return {type: "scatter", mode: "markers", name: esc(k), x: js.map(j => j.created),
              y: js.map(j => j.seconds),
              text: js.map(j => esc(j.status) + " · " + num(j.records) + " records · " +
                            num(j.records_per_second) + " records/s"),
              hovertemplate: "%{x}<br>%{y:.3f} s<br>%{text}<extra></extra>",
              marker: {color: KIND_COLOURS[i % KIND_COLOURS.length], size: 8}};
    });
    const failed = jobs.filter(j => j.status === "failed");
    traces.push({type: "scatter", mode: "markers", name: "failed", x: failed.map(j => j.created),
                 y: failed.map(j => j.seconds),
                 text: failed.map(j => esc(j.kind) + ": " + esc(j.reason)),
                 hovertemplate: "%{x}<br>%{text}<extra></extra>",
                 marker: {color: "#dc3912", symbol: "x", size: 12}});
    const jobsChart = draw("chart-jobs", traces, {xaxis: {type: "date"},
                                                  yaxis: {title: {text: "seconds"}, rangemode: "tozero"}});
    fillTable("jobs", jobs.slice(-50).reverse(), j => [
      j.created, j.kind, j.job_id, j.partition_id, el("span", j.status, j.status === "failed" ? "bad" : ""),
      num(j.seconds), num(j.records), num(j.records_per_second), j.reason]);
    fillTable("tags", view.tags, g => [g.name, g.version, g.created]);
    fillTable("gc-kept", view.gc.kept, k => [
      k.class, k.reason, num(k.files), bytes(k.bytes), k.due === null ? "not by time" : k.due]);
    fillTable("history", view.history.slice(-25).reverse(), h => [h.version, h.time, h.kind, h.summary]);
    fillTable("properties", view.properties, p => [
      el("span", p.name, p.set ? "set" : ""), JSON.stringify(p.value), JSON.stringify(p.default), p.meaning]);
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
                 yaxis: {title: {text: "files read"}, rangemode: "tozero"}});
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
      .then(() => status("updated " + new Date().toLocaleTimeString()))
      .catch(e => status("refresh failed: " + e.message, true))
      .finally(() => { timer = setTimeout(refresh, REFRESH); });
  }

  if (VIEW in RENDER) {
    if (VIEW === "table") {
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
