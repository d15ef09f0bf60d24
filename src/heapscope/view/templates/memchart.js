// heapscope flamegraph page: the chart of memory over time and its range selection.
// Data: a process's "memory" (heapscope/view/memory.py): series t (µs after the timeline's
// 0 s), u (unreleased bytes, each span's largest), e (... at its end), a (allocated in all);
// samples sn (node),
// sa (malloc µs), sf (free µs, -1: never), sb (bytes they stand for), sw (samples).
// A range [from, to] is answered from the samples: "held" sums those allocated in it and
// not freed by its end, "freed" those allocated and freed within it; the flamegraph then
// draws that state (window.heapscope.showRange).
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const hs = window.heapscope;
  const H = 110, L = 64, R = 70, T = 8, B = 20;
  const sel = { mode: "held", from: null, to: null, upid: null };
  let geom = null;  // the last drawing's scale: x of a time and back
  let drag = null;

  const mem = () => {
    const D = hs.data(), p = D && D.mode !== "diff" ? D.processes[hs.state.proc] : null;
    return p && p.memory && p.parent ? p : null;
  };
  const secs = (us) => (us / 1e6).toFixed(Math.abs(us) < 1e6 ? 3 : 2) + " s";

  function draw() {
    const sec = $("memory"), svg = $("mem"), p = mem();
    sec.hidden = !p;
    if (!p) { geom = null; return; }
    if (sel.upid !== p.upid) { sel.from = sel.to = null; sel.upid = p.upid; }
    const m = p.memory, n = m.t.length;
    const W = svg.clientWidth || 800;
    const t0 = Math.min(0, m.t[0]), t1 = Math.max(m.t[n - 1], t0 + 1);
    const umax = Math.max(1, ...m.u), amax = Math.max(1, m.a[n - 1]);
    const x = (t) => L + (W - L - R) * (t - t0) / (t1 - t0);
    const yu = (v) => T + (H - T - B) * (1 - v / umax), ya = (v) => T + (H - T - B) * (1 - v / amax);
    geom = { x, t: (px) => t0 + (px - L) * (t1 - t0) / (W - L - R), L, W, R };
    // Unreleased as steps: at a span's start its largest value (a spike when it fell within the
    // span), then its value at the span's end until the next; allocated as a line.
    let up = `${x(m.t[0]).toFixed(1)},${yu(0).toFixed(1)}`;
    for (let k = 0; k < n; k++) {
      const xa = x(m.t[k]), xm = Math.min(xa + 2, k + 1 < n ? x(m.t[k + 1]) : xa + 2);
      const xb = k + 1 < n ? x(m.t[k + 1]) : xa + 2;
      up += ` ${xa.toFixed(1)},${yu(m.u[k]).toFixed(1)} ${xm.toFixed(1)},${yu(m.u[k]).toFixed(1)}`;
      up += ` ${xm.toFixed(1)},${yu(m.e[k]).toFixed(1)} ${xb.toFixed(1)},${yu(m.e[k]).toFixed(1)}`;
    }
    up += ` ${(x(m.t[n - 1]) + 2).toFixed(1)},${yu(0).toFixed(1)}`;
    const ap = m.t.map((t, k) => `${x(t).toFixed(1)},${ya(m.a[k]).toFixed(1)}`).join(" ");
    let s = `<line class="axis" x1="${L}" y1="${yu(0)}" x2="${W - R}" y2="${yu(0)}"/>`;
    s += `<polygon class="u" points="${up}"/><polyline class="a" points="${ap}"/>`;
    s += `<text x="${L - 6}" y="${T + 8}" text-anchor="end">${hs.fmtBytes(umax)}</text>`;
    s += `<text x="${L - 6}" y="${yu(0) + 4}" text-anchor="end">0</text>`;
    s += `<text x="${W - R + 6}" y="${T + 8}" text-anchor="start">${hs.fmtBytes(amax)}</text>`;
    s += `<text x="${L}" y="${H - 5}" text-anchor="start">${secs(t0)}</text>`;
    s += `<text x="${W - R}" y="${H - 5}" text-anchor="end">${secs(t1)}</text>`;
    if (sel.from !== null && hs.state.dump < 0) {
      const xa = x(sel.from), xb = x(sel.to);
      s += `<rect class="sel" x="${xa.toFixed(1)}" y="${T}" width="${Math.max(1, xb - xa).toFixed(1)}" height="${H - T - B}"/>`;
    }
    if (drag && drag.x1 !== null) {
      const xa = Math.min(drag.x0, drag.x1), xb = Math.max(drag.x0, drag.x1);
      s += `<rect class="sel" x="${xa.toFixed(1)}" y="${T}" width="${(xb - xa).toFixed(1)}" height="${H - T - B}"/>`;
    }
    svg.innerHTML = s;
    $("mem-range").textContent = sel.from !== null && hs.state.dump < 0 ? rangeLine(p) : "";
  }

  // What a range shows, per node: bytes and samples of each view, as a dump's sparse pairs.
  function rangeDump(p) {
    const m = p.memory, from = sel.from, to = sel.to;
    const space = new Float64Array(p.depth.length), objects = new Float64Array(p.depth.length);
    const allocS = new Float64Array(p.depth.length), allocO = new Float64Array(p.depth.length);
    for (let k = 0; k < m.sn.length; k++) {
      const a = m.sa[k];
      if (a < from || a > to) continue;
      const f = m.sf[k], node = m.sn[k];
      allocS[node] += m.sb[k];
      allocO[node] += m.sw[k];
      const held = f < 0 || f > to;
      if (sel.mode === "held" ? held : !held) { space[node] += m.sb[k]; objects[node] += m.sw[k]; }
    }
    const sparse = (v) => {
      const out = [];
      let last = 0;
      for (let i = 0; i < v.length; i++) if (v[i]) { out.push(i - last, Math.round(v[i])); last = i; }
      return out;
    };
    const sum = (v) => Math.round(v.reduce((x, y) => x + y, 0));
    const what = sel.mode === "held" ? "held at its end" : "freed within it";
    return {
      ts: to, label: `range ${secs(from)}–${secs(to)}, allocated in it and ${what}`,
      totals: { space: sum(space), objects: sum(objects), alloc_space: sum(allocS), alloc_objects: sum(allocO) },
      self: { space: sparse(space), objects: sparse(objects), alloc_space: sparse(allocS), alloc_objects: sparse(allocO) },
    };
  }

  function rangeLine(p) {
    const m = p.memory;
    const thinned = m.kept < m.samples ? ` (${m.kept} of ${m.samples} samples, weighted)` : "";
    return `${secs(sel.from)}–${secs(sel.to)} · ${sel.mode === "held" ? "held at its end" : "freed within it"}${thinned}`;
  }

  function select(from, to, mode) {
    const p = mem();
    if (!p) return false;
    if (mode) sel.mode = mode;
    sel.from = Math.min(from, to);
    sel.to = Math.max(from, to);
    for (const b of document.querySelectorAll("#mem-mode button")) b.classList.toggle("on", b.dataset.mode === sel.mode);
    hs.showRange(rangeDump(p));  // redraws the flamegraph and, through "hs:shown", this chart
    return true;
  }

  function setup() {
    const svg = $("mem");
    const px = (ev) => ev.clientX - svg.getBoundingClientRect().left;
    svg.addEventListener("mousedown", (ev) => {
      if (!geom) return;
      ev.preventDefault();
      drag = { x0: px(ev), x1: null };
    });
    window.addEventListener("mousemove", (ev) => {
      if (!drag) return;
      drag.x1 = Math.max(geom.L, Math.min(geom.W - geom.R, px(ev)));
      draw();
    });
    window.addEventListener("mouseup", () => {
      if (!drag) return;
      const d = drag;
      drag = null;
      if (d.x1 === null || Math.abs(d.x1 - d.x0) < 3) { draw(); return; }  // a click, not a range
      select(geom.t(d.x0), geom.t(d.x1));
    });
    $("mem-mode").addEventListener("click", (ev) => {
      const b = ev.target.closest("button");
      if (!b) return;
      sel.mode = b.dataset.mode;
      if (sel.from !== null && hs.state.dump < 0) select(sel.from, sel.to);
      else for (const x of document.querySelectorAll("#mem-mode button")) x.classList.toggle("on", x.dataset.mode === sel.mode);
    });
    document.addEventListener("hs:shown", draw);
    $("heap").addEventListener("change", draw);  // a heap without this process draws no timeline
  }

  // Hooks for tests: select a range in seconds of the timeline; where the chart is drawn.
  hs.memory = {
    select: (fromS, toS, mode) => select(fromS * 1e6, toS * 1e6, mode),
    range: () => (sel.from === null || hs.state.dump >= 0 ? null : [sel.from / 1e6, sel.to / 1e6, sel.mode]),
    series: () => { const p = mem(); return p ? { t: p.memory.t, u: p.memory.u, e: p.memory.e, a: p.memory.a } : null; },
    xOf: (s) => { const r = $("mem").getBoundingClientRect(); return geom ? r.left + geom.x(s * 1e6) : null; },
    yMid: () => { const r = $("mem").getBoundingClientRect(); return r.top + H / 2; },
  };
  setup();
  draw();
})();
