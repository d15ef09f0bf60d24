// heapscope flamegraph page. Hand-written, no libraries, no network.
// Data layout: see heapscope/view/flamegraph.py. Nodes are in preorder; a
// node's parent is recovered from the depths. Totals per node are summed
// here once per (process, dump, view) and cached; only frames at least
// MIN_W pixels wide are drawn, so a profile of any size draws in about the
// time of the frames that are visible.
"use strict";
(function () {
  const ROW = 18, MIN_W = 0.5, LABEL_MIN_W = 24;
  const VIEW_LABEL = {
    space: ["Unreleased", "bytes not yet freed at the dump"],
    alloc_space: ["Allocated", "bytes allocated up to the dump, freed or not"],
    objects: ["Live objects", "allocations not yet freed at the dump"],
    alloc_objects: ["Allocations", "allocations made up to the dump"],
    temporary: ["Temporary", "bytes freed within 1 ms of their allocation, over the whole run (report --view temporary)"],
  };
  const BYTE_VIEWS = new Set(["space", "alloc_space", "temporary"]);
  const $ = (id) => document.getElementById(id);
  const canvas = $("fg"), ctx = canvas.getContext("2d"), tip = $("tip");
  const FONT = '11.5px "DejaVu Sans Mono", ui-monospace, Menlo, Consolas, monospace';

  let D = null;  // the payload
  const state = { heap: 0, proc: 0, view: "space", dump: 0, layout: "flame", zoom: 0, re: null };
  let drawn = null;  // hit-test arrays of the last render
  let charW = 7;

  // ---------- formatting ----------
  function fmtBytes(n) {
    const sign = n < 0 ? "-" : "";
    let v = Math.abs(n);
    if (v < 1024) return sign + Math.round(v) + " B";
    for (const u of ["KiB", "MiB", "GiB", "TiB", "PiB"]) {
      v /= 1024;
      if (Math.round(v * 10) / 10 < 1024 || u === "PiB") return sign + v.toFixed(1) + " " + u;
    }
  }
  const fmtCount = (n) => Math.round(n).toLocaleString("en-US");
  const fmt = (n, view) => (BYTE_VIEWS.has(view || state.view) ? fmtBytes(n) : fmtCount(n));
  const pct = (part, whole) => (whole > 0 ? (100 * part / whole).toFixed(1) + "%" : "-");
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);

  // ---------- data ----------
  async function inflate(b64) {
    const bin = atob(b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return JSON.parse(await new Response(stream).text());
  }

  function prepare(p) {
    const n = p.depth.length;
    const parent = new Int32Array(n), first = new Int32Array(n).fill(-1);
    const next = new Int32Array(n).fill(-1), last = new Int32Array(n).fill(-1);
    const atDepth = [];
    let maxDepth = 0;
    for (let i = 0; i < n; i++) {
      const d = p.depth[i];
      atDepth[d] = i;
      const par = d === 0 ? -1 : atDepth[d - 1];
      parent[i] = par;
      if (par >= 0) {
        if (last[par] < 0) first[par] = i; else next[last[par]] = i;
        last[par] = i;
      }
      if (d > maxDepth) maxDepth = d;
    }
    Object.assign(p, { n, parent, first, next, maxDepth, cache: new Map() });
  }

  // A process whose tree another heap's entry carries ("tree": [heap, position]), and "all
  // processes" made of its members' trees ("parts", each under a node of its label): filled in
  // when first shown, so the payload carries each tree once (view/flamegraph.py encode_process).
  function materialize(p, list) {
    if (p.depth) return;
    if (p.tree) {
      const from = D.heaps[p.tree[0]].processes, q = from[p.tree[1]];
      materialize(q, from);
      Object.assign(p, { depth: q.depth, name: q.name, lib: q.lib, src: q.src });
      return;
    }
    if (p.sum) {
      // A sum of heaps ("sum": [[heap, position], ...]): the graphs named share a tree and their
      // snapshots, and their values add up (view/flamegraph_heaps.py); only its memory series travels.
      const qs = p.sum.map(([h, k]) => {
        const from = D.heaps[h].processes, q = from[k];
        materialize(q, from);
        return q;
      });
      const f = qs[0], n = f.depth.length;
      const dumps = f.dumps.map((d, k) => {
        const totals = {}, self = {};
        for (const v of Object.keys(d.totals)) {
          totals[v] = qs.reduce((sum, q) => sum + (q.dumps[k].totals[v] || 0), 0);
          self[v] = addSparse(qs.map((q) => q.dumps[k].self[v] || []), n);
        }
        return { ts: d.ts, label: d.label, totals, self };
      });
      Object.assign(p, { depth: f.depth, name: f.name, lib: f.lib, src: f.src, dumps, start: f.start, t0: f.t0 });
      if (qs.some((q) => q.sizes)) p.sizes = [].concat(...qs.map((q) => q.sizes || []));
      if (p.memory) {
        const ms = qs.filter((q) => q.memory).map((q) => q.memory);
        for (const key of ["sn", "sa", "sf", "sb", "sw"]) p.memory[key] = [].concat(...ms.map((m) => m[key]));
        p.memory.kept = ms.reduce((sum, m) => sum + m.kept, 0);
        p.memory.samples = ms.reduce((sum, m) => sum + m.samples, 0);
      }
      return;
    }
    const parts = p.parts.map((k) => list[k]);
    for (const q of parts) materialize(q, list);
    const depth = [0], name = [parts[0].name[0]], lib = [parts[0].lib[0]], src = [-1];
    const views = Object.keys(p.dumps[0].totals), self = {};
    for (const v of views) self[v] = [];
    const last = {};
    for (const v of views) last[v] = 0;
    for (const q of parts) {
      const base = depth.length;
      depth.push(1); name.push(D.strings.push(q.label) - 1); lib.push(p.partLib); src.push(-1);
      for (let i = 1; i < q.depth.length; i++) {
        depth.push(q.depth[i] + 1); name.push(q.name[i]); lib.push(q.lib[i]); src.push(q.src[i]);
      }
      const at = q.dumps[q.start !== undefined && q.start >= 0 && q.start < q.dumps.length ? q.start : q.dumps.length - 1];
      for (const v of views) {
        const sp = at.self[v] || [], out = self[v];
        for (let k = 0, i = 0; k < sp.length; k += 2) {
          i += sp[k];
          out.push(base + i - last[v], sp[k + 1]);
          last[v] = base + i;
        }
      }
    }
    Object.assign(p, { depth, name, lib, src });
    p.dumps[0].self = self;
  }

  // (gap, value) pairs of several lists of one tree's n nodes, added node by node.
  function addSparse(lists, n) {
    if (lists.length === 1) return lists[0];
    const v = new Float64Array(n);
    for (const sp of lists) for (let k = 0, i = 0; k < sp.length; k += 2) { i += sp[k]; v[i] += sp[k + 1]; }
    const out = [];
    for (let i = 0, last = 0; i < n; i++) if (v[i]) { out.push(i - last, v[i]); last = i; }
    return out;
  }

  function values(p, dump, view) {
    const key = dump + "|" + view;
    let v = p.cache.get(key);
    if (v) return v;
    // dump -1: a range of the memory chart (memchart.js, showRange); a view a graph lacks: none
    const self = new Float64Array(p.n), sp = (dump < 0 ? p.range : p.dumps[dump]).self[view] || [];
    for (let k = 0, i = 0; k < sp.length; k += 2) { i += sp[k]; self[i] = sp[k + 1]; }
    const total = Float64Array.from(self);
    for (let i = p.n - 1; i > 0; i--) total[p.parent[i]] += total[i];
    v = { self, total };
    p.cache.set(key, v);
    return v;
  }

  const P = () => D.processes[state.proc];
  const str = (i) => (i >= 0 ? D.strings[i] : "");

  // ---------- colours ----------
  function hash(s) {
    let h = 2166136261;
    for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
    return (h >>> 0) / 4294967296;
  }
  const SYSTEM_LIB = /^(libc\.|libm\.|libstdc\+\+|libgcc|ld-linux|libpthread|libdl|libunwind|\[)/;
  // Python frames: their "library" is the source file (bookkeeping/frames.py, python_mapping).
  const PYTHON_FILE = /(\.py[w]?$|^<frozen )/;
  const colourCache = new Map();
  function frameColour(p, i) {
    const name = str(p.name[i]), lib = str(p.lib[i]);
    const key = name + "\u0000" + lib;
    let c = colourCache.get(key);
    if (c) return c;
    const h = hash(name);
    if (i === 0) c = "hsl(30, 8%, 78%)";
    else if (PYTHON_FILE.test(lib)) c = `hsl(${95 + 45 * h}, ${40 + 15 * h}%, ${58 + 10 * h}%)`;
    else if (SYSTEM_LIB.test(lib)) c = `hsl(${195 + 25 * h}, ${38 + 12 * h}%, ${68 + 8 * h}%)`;
    else if (name === "FILTERED" || /\+0x[0-9a-f]+$/.test(name)) c = `hsl(40, 6%, ${72 + 8 * h}%)`;
    else c = `hsl(${8 + 38 * h}, ${72 + 15 * h}%, ${58 + 10 * h}%)`;
    colourCache.set(key, c);
    return c;
  }
  function diffColour(delta, scale) {
    if (!delta || !scale) return "hsl(220, 6%, 86%)";
    const t = Math.min(1, Math.sqrt(Math.abs(delta) / scale));
    return delta > 0 ? `hsl(6, ${55 + 30 * t}%, ${90 - 38 * t}%)` : `hsl(212, ${50 + 30 * t}%, ${90 - 36 * t}%)`;
  }

  // ---------- search ----------
  function matcher(text) {
    if (!text) return null;
    try { return new RegExp(text, "i"); } catch (e) { return new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "i"); }
  }
  function matches(p) {
    if (!state.re) return null;
    const byString = new Map(), m = new Uint8Array(p.n);
    for (let i = 1; i < p.n; i++) {
      const s = p.name[i];
      let hit = byString.get(s);
      if (hit === undefined) { hit = state.re.test(D.strings[s]); byString.set(s, hit); }
      if (hit) m[i] = 1;
    }
    return m;
  }

  // ---------- drawing ----------
  function resizeCanvas(rows) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || canvas.parentElement.clientWidth - 28;
    const h = Math.max(rows, 1) * ROW + 2;
    canvas.style.height = h + "px";
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return w;
  }

  function render() {
    if (!D.processes.length) return;  // a heap without dumps (selectHeap)
    const t0 = performance.now();
    const p = P(), { total } = values(p, state.dump, state.view);
    const diff = D.mode === "diff" ? diffValues(p) : null;
    const match = matches(p);
    // Ancestors of the zoomed node, drawn full width above it.
    const chain = [];
    for (let a = state.zoom; a >= 0; a = p.parent[a]) chain.unshift(a);
    // Collect visible frames first, so the canvas height fits the deepest one.
    const xs = [], ws = [], ds = [], ns = [];
    const W0 = canvas.parentElement.clientWidth - 28;
    const zt = total[state.zoom];
    for (let k = 0; k < chain.length; k++) { xs.push(0); ws.push(W0); ds.push(k); ns.push(chain[k]); }
    let deepest = chain.length - 1;
    if (zt > 0) {
      const scale = W0 / zt, base = chain.length - 1 - p.depth[state.zoom];
      const stack = [[state.zoom, 0]];
      while (stack.length) {
        const [node, x] = stack.pop();
        let cx = x;
        for (let c = p.first[node]; c >= 0; c = p.next[c]) {
          const w = Math.max(0, total[c]) * scale;
          if (w >= MIN_W) {
            const d = p.depth[c] + base;
            xs.push(cx); ws.push(w); ds.push(d); ns.push(c);
            if (d > deepest) deepest = d;
            stack.push([c, cx]);
          }
          cx += w;
        }
      }
    }
    // A flame graph stands on the bottom of the chart area, however shallow.
    const fill = Math.floor(($("chart").clientHeight - 4) / ROW);
    if (state.layout === "flame" && deepest + 1 < fill) deepest = fill - 1;
    const W = resizeCanvas(deepest + 1);
    ctx.clearRect(0, 0, W, canvas.height);
    ctx.font = FONT;
    ctx.textBaseline = "middle";
    charW = ctx.measureText("MMMMMMMMMM").width / 10;
    const rowY = (d) => (state.layout === "flame" ? (deepest - d) * ROW : d * ROW) + 1;
    const dscale = diff ? diff.scale : 0;
    for (let k = 0; k < ns.length; k++) {
      const i = ns[k], x = xs[k], w = ws[k], y = rowY(ds[k]);
      let fill;
      if (diff) fill = diffColour(diff.delta[i], dscale);
      else fill = frameColour(p, i);
      if (match) fill = match[i] ? "hsl(292, 70%, 62%)" : (diff ? fill : "hsl(30, 6%, 88%)");
      ctx.fillStyle = fill;
      ctx.globalAlpha = k < chain.length - 1 ? 0.55 : 1;
      ctx.fillRect(x, y, Math.max(w - (w > 3 ? 1 : 0), 0.5), ROW - 1);
      if (w >= LABEL_MIN_W) {
        const label = str(p.name[i]);
        const room = Math.floor((w - 8) / charW);
        if (room >= 2) {
          ctx.fillStyle = "#1b1f24";
          ctx.fillText(label.length > room ? label.slice(0, room - 1) + "\u2026" : label, x + 4, y + ROW / 2);
        }
      }
    }
    ctx.globalAlpha = 1;
    drawn = { xs, ws, ds, ns, rowY, deepest };
    crumbs(p);
    searchSummary(p, match, total);
    const d = state.dump < 0 ? p.range : p.dumps[state.dump];
    $("status").textContent =
      `${p.n.toLocaleString("en-US")} nodes, ${ns.length.toLocaleString("en-US")} drawn in ` +
      `${(performance.now() - t0).toFixed(0)} ms · ${d.label} · ${VIEW_LABEL[state.view][0].toLowerCase()} ` +
      `${fmt(total[0])} · click a frame to zoom, Esc to reset, / to search`;
    if (state.layout === "flame" && !render.scrolled) {
      const chart = $("chart");
      chart.scrollTop = chart.scrollHeight;
      render.scrolled = true;
    }
  }

  function diffValues(p) {
    // Growth of each node's total between the first and the last snapshot.
    const key = "diff|" + state.view;
    let v = p.cache.get(key);
    if (v) return v;
    const a = values(p, 0, state.view).total, b = values(p, p.dumps.length - 1, state.view).total;
    const delta = new Float64Array(p.n);
    let scale = 0;
    for (let i = 0; i < p.n; i++) {
      delta[i] = b[i] - a[i];
      if (i > 0 && Math.abs(delta[i]) > scale) scale = Math.abs(delta[i]);
    }
    v = { delta, scale, before: a, after: b };
    p.cache.set(key, v);
    return v;
  }

  function crumbs(p) {
    const nav = $("crumbs");
    const chain = [];
    for (let a = state.zoom; a >= 0; a = p.parent[a]) chain.unshift(a);
    nav.innerHTML = chain.map((i, k) =>
      k === chain.length - 1 ? `<b>${esc(str(p.name[i]))}</b>` : `<a data-node="${i}">${esc(str(p.name[i]))}</a>`,
    ).join('<span class="sep">›</span>');
  }

  function searchSummary(p, match, total) {
    const out = $("match");
    if (!match) { out.textContent = ""; return; }
    // Sum each matched subtree once: skip matches below another match.
    let frames = 0, sum = 0;
    const covered = new Uint8Array(p.n);
    for (let i = 1; i < p.n; i++) {
      const up = covered[p.parent[i]];
      if (match[i]) { frames++; if (!up) sum += total[i]; }
      covered[i] = up || match[i];
    }
    out.textContent = frames
      ? `${frames.toLocaleString("en-US")} frames match · ${fmt(sum)} (${pct(sum, total[0])} of all)`
      : "no match";
  }

  // ---------- hit testing, tooltip, zoom ----------
  function hit(ev) {
    if (!drawn) return -1;
    const r = canvas.getBoundingClientRect();
    const x = ev.clientX - r.left, y = ev.clientY - r.top;
    for (let k = drawn.ns.length - 1; k >= 0; k--) {
      const ry = drawn.rowY(drawn.ds[k]);
      if (y >= ry && y < ry + ROW && x >= drawn.xs[k] && x < drawn.xs[k] + drawn.ws[k]) return drawn.ns[k];
    }
    return -1;
  }

  // The size histogram of node i's subtree (view/flamegraph_lifetimes.py: node, bucket,
  // allocations, bytes per entry); "" without sizes.
  function sizesHtml(p, i) {
    const sz = p.sizes;
    if (!sz || !sz.length) return "";
    let end = i + 1;
    while (end < p.n && p.depth[end] > p.depth[i]) end++;
    const by = new Map();
    for (let k = 0; k < sz.length; k += 4) {
      if (sz[k] < i || sz[k] >= end) continue;
      const b = by.get(sz[k + 1]) || [0, 0];
      b[0] += sz[k + 2]; b[1] += sz[k + 3];
      by.set(sz[k + 1], b);
    }
    if (!by.size) return "";
    const buckets = [...by.keys()].sort((a, b) => a - b);
    const most = Math.max(...buckets.map((b) => by.get(b)[0]));
    return '<div class="sizes"><div class="muted">sizes asked for (allocations)</div><table>' + buckets.map((b) => {
      const [n, bytes] = by.get(b), bar = "█".repeat(Math.max(1, Math.round(12 * n / most)));
      return `<tr><td>${fmtBytes(b ? 2 ** b : 0)}–${fmtBytes(2 ** (b + 1))}</td><td>${fmtCount(n)}</td>` +
        `<td class="bar">${bar}</td><td class="muted">${fmtBytes(bytes)}</td></tr>`;
    }).join("") + "</table></div>";
  }

  function showTip(ev, i) {
    const p = P(), { self, total } = values(p, state.dump, state.view), all = total[0];
    const src = str(p.src[i]);
    const rows = [];
    if (src) rows.push(["source", esc(src)]);
    if (i > 0) rows.push(["library", esc(str(p.lib[i]) || "?")]);
    rows.push(["total", `${fmt(total[i])} (${pct(total[i], all)} of all)`]);
    rows.push(["self", `${fmt(self[i])} (${pct(self[i], all)} of all)`]);
    if (state.zoom !== 0) rows.push(["of zoom", pct(total[i], total[state.zoom])]);
    if (D.mode === "diff") {
      const dv = diffValues(p), dl = dv.delta[i];
      rows.push(["before", fmt(dv.before[i])], ["after", fmt(dv.after[i])]);
      rows.push(["growth", `<span class="${dl > 0 ? "up" : dl < 0 ? "down" : ""}">${dl > 0 ? "+" : ""}${fmt(dl)}</span>`]);
    }
    tip.innerHTML = `<div class="fn">${esc(str(p.name[i]))}</div><table>` +
      rows.map(([k, v]) => `<tr><td>${k}</td><td>${v}</td></tr>`).join("") + "</table>" + sizesHtml(p, i);
    tip.hidden = false;
    const tw = tip.offsetWidth, th = tip.offsetHeight;
    let x = ev.clientX + 14, y = ev.clientY + 16;
    if (x + tw > window.innerWidth - 8) x = Math.max(8, ev.clientX - tw - 14);
    if (y + th > window.innerHeight - 8) y = Math.max(8, ev.clientY - th - 12);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }

  function zoomTo(i) {
    state.zoom = i;
    render();
  }

  // ---------- timeline ----------
  function timeline() {
    if (!D.processes.length) return;
    const svg = $("tl"), p = P(), dumps = p.dumps;
    const W = svg.clientWidth || 800, H = 86, L = 64, R = 16, T = 10, B = 22;
    const ys = dumps.map((d) => d.totals.space);
    const ymax = Math.max(1, ...ys);
    // 0 s is the process's start (p.t0) when known: a peak at 5.02 s of a 7.6 s run is drawn
    // two thirds along, not at the axis's origin.
    const t0 = p.t0 != null ? p.t0 : dumps[0].ts, t1 = dumps[dumps.length - 1].ts;
    const span = t1 - t0;
    const px = (k) => (span > 0 ? L + (W - L - R) * (dumps[k].ts - t0) / span
      : dumps.length === 1 ? (L + W - R) / 2 : L + (W - L - R) * k / (dumps.length - 1));
    const py = (v) => T + (H - T - B) * (1 - Math.max(0, v) / ymax);
    const pts = dumps.map((d, k) => [px(k), py(ys[k])]);
    const line = pts.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
    const area = `${pts[0][0].toFixed(1)},${py(0)} ${line} ${pts[pts.length - 1][0].toFixed(1)},${py(0)}`;
    const secs = (ts) => ((ts - t0) / 1e9).toFixed(ts - t0 < 1e9 ? 3 : 1) + " s";
    let s = `<line class="axis" x1="${L}" y1="${py(0)}" x2="${W - R}" y2="${py(0)}"/>`;
    s += `<text x="${L - 6}" y="${py(ymax) + 4}" text-anchor="end">${esc(fmtBytes(ymax))}</text>`;
    s += `<text x="${L - 6}" y="${py(0) + 4}" text-anchor="end">0</text>`;
    s += `<text x="4" y="${T + 26}">unreleased</text>`;
    if (dumps.length > 1) s += `<polygon class="area" points="${area}"/><polyline class="curve" points="${line}"/>`;
    if (p.t0 != null && D.mode !== "diff" && pts[0][0] > L + 30) {
      s += `<text x="${L}" y="${H - 6}" text-anchor="start">0 s</text>`;
    }
    const labelEvery = Math.max(1, Math.ceil(dumps.length / Math.max(1, Math.floor((W - L - R) / 90))));
    dumps.forEach((d, k) => {
      const [x, y] = pts[k];
      s += `<circle class="pt${k === state.dump ? " on" : ""}" data-dump="${k}" cx="${x.toFixed(1)}" cy="${y.toFixed(1)}" r="${dumps.length > 200 ? 3 : 5}">` +
        `<title>${esc(d.label)} · ${esc(fmtBytes(ys[k]))} unreleased · ${secs(d.ts)}</title></circle>`;
      if (k % labelEvery === 0 || k === dumps.length - 1) {
        const lab = D.mode === "diff" ? d.label : (dumps.length === 1 ? d.label : secs(d.ts));
        s += `<text x="${x.toFixed(1)}" y="${H - 6}" text-anchor="middle">${esc(lab)}</text>`;
      }
    });
    svg.innerHTML = s;
    document.dispatchEvent(new Event("hs:shown"));  // the memory chart (memchart.js) redraws too
  }

  // ---------- controls ----------
  function setup() {
    $("subtitle").textContent = D.subtitle || "";
    const sel = $("proc");
    fillProcesses();
    sel.addEventListener("change", () => { selectProcess(+sel.value); });
    if (D.heaps) {
      // Custom heaps (view/flamegraph.py): one entry per heap, the last with all of them merged.
      const hs = $("heap");
      hs.innerHTML = D.heaps.map((h, k) => `<option value="${k}">${
        esc(h.name === "all" ? "all heaps merged (pools counted twice)" : h.name)}</option>`).join("");
      hs.value = String(D.heap);
      state.heap = D.heap;
      $("heap-field").hidden = false;
      hs.addEventListener("change", () => { selectHeap(+hs.value); });
    }
    $("views").innerHTML = D.views.map((v) =>
      `<button data-view="${v}" title="${esc(v + ": " + VIEW_LABEL[v][1])}">${esc(VIEW_LABEL[v][0])}</button>`).join("");
    $("views").addEventListener("click", (ev) => {
      const b = ev.target.closest("button");
      if (b) { state.view = b.dataset.view; markButtons(); render(); }
    });
    $("layout").addEventListener("click", (ev) => {
      const b = ev.target.closest("button");
      if (b) { state.layout = b.dataset.layout; render.scrolled = false; markButtons(); render(); }
    });
    let pending = 0;
    $("search").addEventListener("input", (ev) => {
      clearTimeout(pending);
      pending = setTimeout(() => { state.re = matcher(ev.target.value.trim()); render(); }, 120);
    });
    $("reset").addEventListener("click", () => zoomTo(0));
    $("crumbs").addEventListener("click", (ev) => {
      const a = ev.target.closest("a");
      if (a) zoomTo(+a.dataset.node);
    });
    $("tl").addEventListener("click", (ev) => {
      const c = ev.target.closest("circle");
      if (c) selectDump(+c.dataset.dump);
    });
    canvas.addEventListener("mousemove", (ev) => {
      const i = hit(ev);
      if (i < 0) tip.hidden = true; else showTip(ev, i);
    });
    canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
    canvas.addEventListener("click", (ev) => {
      const i = hit(ev);
      if (i >= 0) zoomTo(i);
    });
    document.addEventListener("keydown", (ev) => {
      if (ev.key === "Escape") { zoomTo(0); tip.hidden = true; }
      else if (ev.key === "/" && document.activeElement !== $("search")) { ev.preventDefault(); $("search").focus(); }
    });
    let resizing = 0;
    window.addEventListener("resize", () => {
      clearTimeout(resizing);
      resizing = setTimeout(() => { timeline(); render(); }, 100);
    });
  }

  function markButtons() {
    for (const b of document.querySelectorAll("#views button")) b.classList.toggle("on", b.dataset.view === state.view);
    for (const b of document.querySelectorAll("#layout button")) b.classList.toggle("on", b.dataset.layout === state.layout);
  }

  function fillProcesses() {
    const sel = $("proc");
    sel.innerHTML = D.processes.map((p, k) => `<option value="${k}">${esc(p.label)}</option>`).join("");
    sel.disabled = D.processes.length < 2;
  }

  // Switch heap, staying on the same process when the heap has it.
  function selectHeap(k) {
    const upid = D.processes.length ? P().upid : null;
    state.heap = k;
    D.processes = D.heaps[k].processes;
    fillProcesses();
    if (!D.processes.length) {
      drawn = null;
      ctx.clearRect(0, 0, canvas.width, canvas.height);
      $("tl").innerHTML = "";
      $("crumbs").innerHTML = "";
      $("status").textContent = "no process has a dump of heap " + D.heaps[k].name;
      return;
    }
    const same = D.processes.findIndex((p) => p.upid === upid);
    $("proc").value = String(same >= 0 ? same : 0);
    selectProcess(same >= 0 ? same : 0);
  }

  function selectProcess(k) {
    state.proc = k;
    const p = P();
    materialize(p, D.processes);
    if (!p.parent) prepare(p);
    state.dump = p.start !== undefined && p.start >= 0 && p.start < p.dumps.length ? p.start : p.dumps.length - 1;
    state.zoom = 0;
    render.scrolled = false;
    timeline();
    render();
  }

  function selectDump(k) {
    state.dump = k;
    timeline();
    render();
  }

  // Hooks for tests and for people poking at the page from the console.
  window.heapscope = {
    state,
    data: () => D,
    rootTotal: (view) => values(P(), state.dump, view || state.view).total[0],
    heapName: () => (D.heaps ? D.heaps[state.heap].name : null),
    processLabels: () => D.processes.map((p) => p.label),
    zoomName: () => str(P().name[state.zoom]),
    matchText: () => $("match").textContent,
    dumpCount: () => P().dumps.length,
    fmtBytes,
    showRange(range) {
      // The flamegraph at a range of the memory chart (memchart.js): a dump of its own, -1.
      const p = P();
      p.range = range;
      for (const k of [...p.cache.keys()]) if (k.startsWith("-1|")) p.cache.delete(k);
      state.dump = -1;
      timeline();
      render();
    },
    frameCentre(name) {
      // Client coordinates of the widest drawn frame called `name`, or null.
      if (!drawn) return null;
      const p = P(), r = canvas.getBoundingClientRect();
      let best = -1;
      for (let k = 0; k < drawn.ns.length; k++) {
        if (str(p.name[drawn.ns[k]]) === name && (best < 0 || drawn.ws[k] > drawn.ws[best])) best = k;
      }
      if (best < 0) return null;
      return { x: r.left + drawn.xs[best] + drawn.ws[best] / 2, y: r.top + drawn.rowY(drawn.ds[best]) + ROW / 2 };
    },
  };

  async function main() {
    const t0 = performance.now();
    try {
      D = await inflate($("hs-data").textContent.trim());
    } catch (e) {
      $("status").textContent = "cannot read the embedded profile data: " + e;
      throw e;
    }
    if (D.heaps) {
      D.heaps[D.heap].processes = D.processes;  // the opened heap's are not repeated
      // nor those of a heap that has another's graphs ("all" when the sum is every heap)
      for (const h of D.heaps) if (h.same !== undefined) h.processes = D.heaps[h.same].processes;
    }
    if (!D.processes.length && !D.heaps) {
      $("status").textContent = "no process of this profile has a dump";
      document.body.dataset.ready = "1";
      return;
    }
    setup();
    markButtons();
    if (D.processes.length) selectProcess(0); else selectHeap(state.heap);
    window.heapscope.loadMs = performance.now() - t0;
    document.body.dataset.ready = "1";
  }
  main();
})();
