// The HTML report's script (html.c builds it into the page). It draws
// everything from the JSON document in <script id="data">: canvases for the
// timeline and the tiles (never one DOM node per run or tile), SVG for the
// per-layer bars, tables for the rest. No network, no library.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const E = D.events, T = D.tiles, M = D.machine, R = D.run;
  const NE = E.start.length;
  // report.html#only=tiles&metric=4&tile=7&iteration=0: that section alone,
  // in that state (docs/report.md's pictures are taken so).
  const HASH = {};
  for (const kv of location.hash.slice(1).split("&")) { const [k, v] = kv.split("="); if (k) HASH[k] = v; }

  // ---- helpers -------------------------------------------------------------
  function el(tag, attrs, kids) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "cls") e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    for (const c of kids || []) if (c !== null && c !== undefined) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    return e;
  }
  function svg(tag, attrs) {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }
  const int = (x) => Math.round(x).toLocaleString("en-US");
  function bytes(b) {
    const a = Math.abs(b);
    if (a >= 1 << 30) return (b / (1 << 30)).toFixed(2) + " GiB";
    if (a >= 1 << 20) return (b / (1 << 20)).toFixed(1) + " MiB";
    if (a >= 1 << 10) return (b / (1 << 10)).toFixed(1) + " KiB";
    return b + " B";
  }
  const pct = (x, of) => (of ? (100 * x / of).toFixed(1) : "0.0") + " %";
  const ms = (c) => (c / M.clock_hz * 1e3).toFixed(3) + " ms";
  const tip = el("div", { id: "tip" });
  function showTip(ev, text) {
    tip.textContent = text;
    tip.style.display = "block";
    tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8) + "px";
    tip.style.top = (ev.clientY + 14) + "px";
  }
  const hideTip = () => { tip.style.display = "none"; };

  // A table whose numeric and text columns sort on a click of their header.
  // cols: [{h, n (numeric), f (format)}]; rows: arrays of raw values.
  function table(cols, rows, opts) {
    const tb = el("tbody");
    const head = el("tr", {}, cols.map((c, i) => {
      const th = el("th", { cls: (c.n ? "n " : "") + "sort", text: c.h });
      th.addEventListener("click", () => sortBy(i));
      return th;
    }));
    let dir = 1, last = -1;
    function fill() {
      tb.textContent = "";
      for (const r of rows)
        tb.appendChild(el("tr", {}, cols.map((c, i) => {
          const v = c.f ? c.f(r[i], r) : r[i];
          return v instanceof Node ? el("td", { cls: c.n ? "n" : "" }, [v]) : el("td", { cls: c.n ? "n" : "", text: v === null || v === undefined ? "" : String(v) });
        })));
    }
    function sortBy(i) {
      dir = last === i ? -dir : (cols[i].n ? -1 : 1);
      last = i;
      rows.sort((a, b) => (a[i] < b[i] ? -1 : a[i] > b[i] ? 1 : 0) * dir);
      fill();
    }
    fill();
    const t = el("table", {}, [el("thead", {}, [head]), tb]);
    return opts && opts.scroll ? el("div", { cls: "scroll" }, [t]) : t;
  }
  function section(id, title, lead) {
    const s = el("section", { id: id }, [el("h2", { text: title }), lead ? el("p", { cls: "lead", text: lead }) : null]);
    main.appendChild(s);
    nav.appendChild(el("a", { href: "#" + id, text: title }));
    return s;
  }
  function card(k, v, cls) { return el("div", { cls: "card" }, [el("div", { cls: "v " + (cls || ""), text: v }), el("div", { cls: "k", text: k })]); }

  // Steps: label = "op+op...:kind"; its kind's colour.
  const kindOf = (l) => { const i = l.lastIndexOf(":"); return i < 0 ? l : l.slice(i + 1); };
  const opsOf = (l) => { const i = l.lastIndexOf(":"); return i < 0 ? l : l.slice(0, i); };
  const PALETTE = ["#3b73b9", "#e08a2c", "#2a9d8f", "#8c6bb1", "#d1495b", "#66a61e", "#e6ab02", "#7f7f7f", "#1b9e77", "#a6761d",
                   "#e7298a", "#386cb0", "#bf5b17", "#17becf"];
  const kindColour = {};
  function colour(kind) {
    if (kind === "exchange") return "#e08a2c";
    if (kind === "gemm") return "#3b73b9";
    if (!(kind in kindColour)) kindColour[kind] = PALETTE[(2 + Object.keys(kindColour).length) % PALETTE.length];
    return kindColour[kind];
  }

  // ---- page frame ----------------------------------------------------------
  const checked = D.check ? D.check.pass : null;
  document.title = "tessel: " + D.title;
  const header = el("header", {}, [
    el("h1", { text: D.title }),
    el("div", { cls: "sub", text: "on " + M.name + " (" + int(M.tiles) + " tiles, " + (M.clock_hz / 1e9).toFixed(2) + " GHz), package " +
      D.package.path + ", tessel " + D.version }),
  ]);
  const cards = el("div", { cls: "cards", id: "summary" }, [
    card("simulated cycles (" + ms(R.cycles) + ")", int(R.cycles)),
    card("compute / exchange", pct(R.compute_cycles, R.cycles) + " / " + pct(R.exchange_cycles, R.cycles)),
    card("of the AMP roofline", R.roofline_cycles ? (100 * R.roofline_cycles / R.cycles).toPrecision(3) + " %" : "no GEMMs"),
    card("tiles used", int(R.tiles_used) + " of " + int(M.tiles)),
    card("most memory on a tile", bytes(Math.max.apply(null, T.end_bytes)) + " of " + bytes(M.tile_memory_end - M.tile_memory_base)),
    checked === null ? null : card("check", checked ? "PASS" : "FAIL", checked ? "pass" : "fail"),
  ]);
  cards.querySelector(".v").setAttribute("data-cycles", String(R.cycles));
  header.appendChild(cards);
  const nav = el("nav");
  const main = el("main");
  document.body.appendChild(header);
  document.body.appendChild(nav);
  document.body.appendChild(main);
  document.body.appendChild(tip);

  // ---- 1. timeline ----------------------------------------------------------
  // Iterations of repeats, grouped: contiguous steps of one iteration form a band.
  const bands = [];
  for (let i = 0; i < NE; i++) {
    if (E.depth[i] === 0) continue;
    const b = bands[bands.length - 1];
    const end = E.start[i] + E.cycles[i];
    if (b && b.iter === E.iteration[i] && b.last === i - 1) { b.end = end; b.last = i; b.steps++; }
    else bands.push({ iter: E.iteration[i], start: E.start[i], end: end, last: i, steps: 1 });
  }
  (function timeline() {
    const s = section("timeline", "Timeline",
      "Compute steps and exchange phases on the simulated cycle axis. Scroll to zoom, drag to pan, double-click for the whole run; " +
      "click an iteration band to open that iteration. Hover a step for its busiest tile.");
    const sel = el("select", { id: "iteration" }, [el("option", { value: "-1", text: "whole run" })].concat(
      bands.map((b, k) => el("option", { value: String(k), text: "iteration " + b.iter + " (" + int(b.end - b.start) + " cycles)" }))));
    s.appendChild(el("div", { cls: "controls" }, [el("label", { text: "show " }), sel]));
    const W = Math.max(600, s.clientWidth - 40), LANE = 34, TOP = 18, H = TOP + 3 * LANE + 22;
    const cv = el("canvas", { width: W, height: H, "data-steps": String(NE), "data-bands": String(bands.length) });
    s.appendChild(cv);
    const legend = el("div", { cls: "legend" });
    s.appendChild(legend);
    const ctx = cv.getContext("2d");
    const total = Math.max(1, R.cycles);
    let v0 = 0, v1 = total;
    const LX = 80, PW = W - LX - 10;
    const lanes = ["iterations", "compute", "exchange"];
    const x = (c) => LX + (c - v0) / (v1 - v0) * PW;
    function draw() {
      ctx.clearRect(0, 0, W, H);
      ctx.font = "12px system-ui, sans-serif";
      ctx.fillStyle = "#5f6b78";
      lanes.forEach((n, k) => ctx.fillText(n, 6, TOP + k * LANE + 20));
      // bands
      bands.forEach((b, k) => {
        const a = Math.max(LX, x(b.start)), e = Math.min(W - 10, x(b.end));
        if (e < LX || a > W - 10) return;
        ctx.fillStyle = k % 2 ? "#cfd8e3" : "#e3e9f0";
        ctx.fillRect(a, TOP + 4, Math.max(1, e - a), LANE - 8);
        if (e - a > 26) { ctx.fillStyle = "#1d232a"; ctx.fillText(String(b.iter), a + 3, TOP + 22); }
      });
      // steps: at most one rectangle per step, merged when narrower than a pixel
      let lastPx = [-1, -1];
      for (let i = 0; i < NE; i++) {
        const a = x(E.start[i]), e = x(E.start[i] + E.cycles[i]);
        if (e < LX || a > W - 10) continue;
        const lane = 1 + E.exchange[i], px = Math.floor(a);
        if (e - a < 1 && px === lastPx[lane - 1]) continue;
        lastPx[lane - 1] = px;
        ctx.fillStyle = colour(kindOf(E.labels[E.label[i]]));
        ctx.fillRect(Math.max(LX, a), TOP + lane * LANE + 4, Math.max(1, Math.min(W - 10, e) - Math.max(LX, a)), LANE - 8);
      }
      // axis
      ctx.fillStyle = "#5f6b78";
      ctx.fillRect(LX, H - 20, PW, 1);
      for (let k = 0; k <= 5; k++) {
        const c = v0 + (v1 - v0) * k / 5;
        ctx.fillText(int(c), Math.min(LX + PW * k / 5, W - 60), H - 6);
      }
    }
    function stepAt(px, lane) {
      const c = v0 + (px - LX) / PW * (v1 - v0);
      let lo = 0, hi = NE - 1, best = -1;
      while (lo <= hi) { const m = (lo + hi) >> 1; if (E.start[m] <= c) { best = m; lo = m + 1; } else hi = m - 1; }
      const tol = (v1 - v0) / PW * 2;
      for (let i = best; i >= 0 && i > best - 64; i--)
        if (E.exchange[i] === lane - 1 && E.start[i] <= c + tol && c - tol <= E.start[i] + E.cycles[i]) return i;
      return -1;
    }
    let drag = null;
    cv.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const r = cv.getBoundingClientRect(), c = v0 + (ev.clientX - r.left - LX) / PW * (v1 - v0);
      const f = ev.deltaY > 0 ? 1.25 : 0.8, w = Math.min(total, Math.max(20, (v1 - v0) * f));
      v0 = Math.max(0, Math.min(total - w, c - (c - v0) * w / (v1 - v0)));
      v1 = v0 + w;
      draw();
    }, { passive: false });
    cv.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, v0: v0, v1: v1 }; });
    window.addEventListener("mouseup", () => { drag = null; });
    cv.addEventListener("dblclick", () => { v0 = 0; v1 = total; sel.value = "-1"; draw(); });
    cv.addEventListener("mousemove", (ev) => {
      const r = cv.getBoundingClientRect(), px = ev.clientX - r.left, py = ev.clientY - r.top;
      if (drag) {
        const d = (ev.clientX - drag.x) / PW * (drag.v1 - drag.v0), w = drag.v1 - drag.v0;
        v0 = Math.max(0, Math.min(total - w, drag.v0 - d));
        v1 = v0 + w;
        draw();
        return;
      }
      const lane = Math.floor((py - TOP) / LANE);
      if (lane === 0) {
        const c = v0 + (px - LX) / PW * (v1 - v0), b = bands.find((q) => q.start <= c && c < q.end);
        if (b) return showTip(ev, "iteration " + b.iter + "\n" + b.steps + " steps, " + int(b.end - b.start) + " cycles\nclick to open");
      } else if (lane === 1 || lane === 2) {
        const i = stepAt(px, lane);
        if (i >= 0) {
          const l = E.labels[E.label[i]];
          return showTip(ev, l + (E.iteration[i] >= 0 ? "  [iteration " + E.iteration[i] + "]" : "") + "\n" + int(E.cycles[i]) +
            " cycles from " + int(E.start[i]) + (E.copy_cycles[i] ? ", of which copies " + int(E.copy_cycles[i]) : "") +
            "\nbusiest tile " + E.busiest_tile[i] + ": " + E.works[E.work[i]].split("; ").join("\n  "));
        }
      }
      hideTip();
    });
    cv.addEventListener("mouseleave", hideTip);
    function open(k) {
      if (k < 0) { v0 = 0; v1 = total; } else { v0 = bands[k].start; v1 = Math.max(bands[k].end, v0 + 20); }
      draw();
    }
    cv.addEventListener("click", (ev) => {
      const r = cv.getBoundingClientRect();
      if (Math.floor((ev.clientY - r.top - TOP) / LANE) !== 0) return;
      const c = v0 + (ev.clientX - r.left - LX) / PW * (v1 - v0), k = bands.findIndex((q) => q.start <= c && c < q.end);
      if (k >= 0) { sel.value = String(k); open(k); }
    });
    sel.addEventListener("change", () => open(+sel.value));
    if (HASH.iteration !== undefined && bands[+HASH.iteration]) { sel.value = HASH.iteration; open(+HASH.iteration); }
    else draw();
    const kinds = {};
    for (let i = 0; i < NE; i++) kinds[kindOf(E.labels[E.label[i]])] = 1;
    for (const k of Object.keys(kinds)) legend.appendChild(el("span", {}, [el("i", { style: "background:" + colour(k) }), k]));
  })();

  // ---- 2. where the cycles go ----------------------------------------------
  // Per step label: its executions and cycles; per layer (iteration): cycles by kind.
  const byLabel = {};
  for (let i = 0; i < NE; i++) {
    const l = E.labels[E.label[i]];
    const r = byLabel[l] || (byLabel[l] = { label: l, n: 0, cycles: 0, copy: 0 });
    r.n++; r.cycles += E.cycles[i]; r.copy += E.copy_cycles[i];
  }
  (function cycles() {
    const s = section("cycles", "Where the cycles go",
      "Per kind of step (the run's own tally, a joined step's copies counted as copies), per layer, and per step of the program, " +
      "every execution counted.");
    const kinds = Object.keys(R.cycles_by_kind).map((k) => [k, R.cycles_by_kind[k], R.cycles_by_kind[k] / R.cycles]);
    kinds.sort((a, b) => b[1] - a[1]);
    const kt = table([{ h: "kind" }, { h: "cycles", n: 1, f: int }, { h: "share", n: 1, f: (v, r) => {
      const bar = el("span", { cls: "bar", style: "width:" + Math.round(v * 160) + "px;background:" + colour(r[0]) });
      return el("span", {}, [bar, " " + (100 * v).toFixed(1) + " %"]);
    } }], kinds);
    kt.id = "kinds";
    // Per layer: the outermost iterations (steps outside a repeat: before and after).
    const groups = [], gidx = {};
    for (let i = 0; i < NE; i++) {
      let g;
      if (E.depth[i] > 0) g = "layer " + E.iteration[i];
      else g = groups.some((q) => q.layer) ? "after" : "before";
      if (!(g in gidx)) { gidx[g] = groups.length; groups.push({ name: g, layer: E.depth[i] > 0, kinds: {}, total: 0 }); }
      const q = groups[gidx[g]], k = kindOf(E.labels[E.label[i]]);
      q.kinds[k] = (q.kinds[k] || 0) + E.cycles[i];
      q.total += E.cycles[i];
    }
    const maxT = Math.max.apply(null, groups.map((q) => q.total).concat([1]));
    const BW = Math.max(8, Math.min(40, Math.floor(1000 / Math.max(1, groups.length)))), SH = 200;
    const sv = svg("svg", { width: 60 + groups.length * (BW + 4), height: SH + 50, id: "layers" });
    groups.forEach((q, k) => {
      let y = SH + 10;
      for (const kd of Object.keys(q.kinds)) {
        const h = q.kinds[kd] / maxT * SH;
        const r = svg("rect", { x: 50 + k * (BW + 4), y: y - h, width: BW, height: Math.max(0, h), fill: colour(kd) });
        const t = svg("title", {});
        t.textContent = q.name + ": " + kd + " " + int(q.kinds[kd]) + " cycles";
        r.appendChild(t);
        sv.appendChild(r);
        y -= h;
      }
      const lab = svg("text", { x: 50 + k * (BW + 4) + BW / 2, y: SH + 24, "font-size": 10, "text-anchor": "middle", fill: "#5f6b78" });
      lab.textContent = q.layer ? q.name.slice(6) : q.name[0];
      sv.appendChild(lab);
    });
    const ax = svg("text", { x: 2, y: 16, "font-size": 10, fill: "#5f6b78" });
    ax.textContent = int(maxT);
    sv.appendChild(ax);
    s.appendChild(el("div", { cls: "row" }, [el("div", {}, [el("h3", { text: "by kind" }), kt]),
      el("div", {}, [el("h3", { text: "per layer (b: before the layers, a: after)" }), sv])]));
    const rows = Object.values(byLabel).map((r) => [opsOf(r.label), kindOf(r.label), r.n, r.cycles, r.cycles / R.cycles, r.cycles / r.n]);
    rows.sort((a, b) => b[3] - a[3]);
    const st = table([{ h: "step (its ops)" }, { h: "kind" }, { h: "executed", n: 1, f: int }, { h: "cycles", n: 1, f: int },
      { h: "share", n: 1, f: (v) => (100 * v).toFixed(2) + " %" }, { h: "per execution", n: 1, f: int }], rows, { scroll: 1 });
    st.id = "steps";
    s.appendChild(el("h3", { text: "per step" }));
    s.appendChild(st);
  })();

  // ---- 3. the tiles -----------------------------------------------------------
  (function tiles() {
    const s = section("tiles", "The tiles",
      "Each square is a tile, numbered row by row (tile ids, not the chip's floor plan). Click a tile for its memory map.");
    const metrics = [["end_bytes", "memory reached", bytes], ["headroom_bytes", "headroom below the loader limit", bytes],
      ["table_bytes", "exchange-table bytes", bytes], ["code_bytes", "code and descriptors", bytes]];
    if (T.compute_cycles) metrics.push(["compute_cycles", "compute cycles over the run", int]);
    if (T.compute_cycles && T.longest_step >= 0) /* a run without compute steps has none */
      metrics.push(["longest_step_cycles", "cycles in the longest compute step (" + E.labels[E.label[T.longest_step]] + ")", int]);
    const sel = el("select", { id: "metric" }, metrics.map((m, k) => el("option", { value: String(k), text: m[1] })));
    const stats = el("span", { cls: "muted" });
    s.appendChild(el("div", { cls: "controls" }, [sel, stats]));
    const n = M.tiles, cols = Math.ceil(Math.sqrt(n * 2.5)), rows = Math.ceil(n / cols);
    const C = Math.max(4, Math.min(16, Math.floor(1100 / cols)));
    const cv = el("canvas", { width: cols * C + 1, height: rows * C + 1, "data-tiles": String(n) });
    const mapBox = el("div", { id: "memory-map" });
    s.appendChild(el("div", { cls: "row" }, [el("div", {}, [cv, el("div", { cls: "legend", id: "scale" })]), mapBox]));
    const ctx = cv.getContext("2d");
    // A perceptual ramp (dark blue to yellow), interpolated in RGB.
    const RAMP = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
    function ramp(t) {
      t = Math.max(0, Math.min(1, t)) * (RAMP.length - 1);
      const i = Math.min(RAMP.length - 2, Math.floor(t)), f = t - i, a = RAMP[i], b = RAMP[i + 1];
      return "rgb(" + a.map((v, k) => Math.round(v + (b[k] - v) * f)).join(",") + ")";
    }
    let cur = 0;
    function draw() {
      const m = metrics[cur], v = T[m[0]];
      let lo = Infinity, hi = -Infinity, sum = 0;
      for (let t = 0; t < n; t++) { lo = Math.min(lo, v[t]); hi = Math.max(hi, v[t]); sum += v[t]; }
      ctx.clearRect(0, 0, cv.width, cv.height);
      for (let t = 0; t < n; t++) {
        ctx.fillStyle = ramp(hi > lo ? (v[t] - lo) / (hi - lo) : 0.5);
        ctx.fillRect((t % cols) * C + 1, Math.floor(t / cols) * C + 1, C - 1, C - 1);
      }
      const sorted = v.slice().sort((a, b) => a - b), mean = sum / n;
      stats.textContent = "  min " + m[2](lo) + ", median " + m[2](sorted[n >> 1]) + ", max " + m[2](hi) +
        (m[0].indexOf("cycles") >= 0 && mean > 0 ? ", max / mean " + (hi / mean).toFixed(2) : "");
      const sc = document.getElementById("scale");
      sc.textContent = "";
      sc.appendChild(el("span", {}, [el("i", { style: "background:" + ramp(0) }), m[2](lo)]));
      sc.appendChild(el("span", {}, [el("i", { style: "background:" + ramp(1) }), m[2](hi)]));
    }
    const tileAt = (ev) => {
      const r = cv.getBoundingClientRect(), c = Math.floor((ev.clientX - r.left - 1) / C), rw = Math.floor((ev.clientY - r.top - 1) / C);
      const t = rw * cols + c;
      return c >= 0 && c < cols && t >= 0 && t < n ? t : -1;
    };
    cv.addEventListener("mousemove", (ev) => {
      const t = tileAt(ev);
      if (t < 0) return hideTip();
      showTip(ev, "tile " + t + "\n" + metrics.map((m) => m[1].split(" (")[0] + ": " + m[2](T[m[0]][t])).join("\n"));
    });
    cv.addEventListener("mouseleave", hideTip);
    function memoryMap(t) {
      const B = T.buffers, ids = T.sets[T.set[t]].slice().sort((a, b) => B.addr[a] - B.addr[b]);
      const rowsM = [[M.tile_memory_base, T.code_bytes[t] + T.table_bytes[t], null, "all", "code, descriptors and exchange tables"]]
        .concat(ids.map((b) => [B.addr[b], B.reserved_bytes[b], B.payload_bytes[b], B.first_step[b] + ".." + B.last_step[b],
          B.name[b] + (B.addr[b] >= M.interleaved_base ? "  (interleaved)" : "")]));
      mapBox.textContent = "";
      mapBox.setAttribute("data-tile", String(t));
      mapBox.appendChild(el("h3", { text: "memory map of tile " + t + ": " + bytes(T.end_bytes[t]) + " reached, " +
        bytes(T.headroom_bytes[t]) + " free" }));
      mapBox.appendChild(table([{ h: "address", n: 1, f: (a) => "0x" + a.toString(16) }, { h: "reserved", n: 1, f: bytes },
        { h: "payload", n: 1, f: (b) => (b === null ? "-" : bytes(b)) }, { h: "live steps" }, { h: "buffer" }], rowsM, { scroll: 1 }));
    }
    cv.addEventListener("click", (ev) => { const t = tileAt(ev); if (t >= 0) memoryMap(t); });
    sel.addEventListener("change", () => { cur = +sel.value; draw(); });
    if (metrics[+HASH.metric]) { cur = +HASH.metric; sel.value = HASH.metric; }
    draw();
    let least = 0;
    for (let t = 1; t < n; t++) if (T.headroom_bytes[t] < T.headroom_bytes[least]) least = t;
    memoryMap(HASH.tile !== undefined && +HASH.tile >= 0 && +HASH.tile < n ? +HASH.tile : least);
  })();

  // ---- 4. the plan and why -----------------------------------------------------
  const P = D.plan, recipe = D.meta && D.meta.recipe;
  function gridText(c) {
    if (!c) return "";
    if (c.grid) return c.grid.join("x") + " grid, " + c.rows + "x" + c.cols + "x" + c.k + " blocks";
    return c.rows + "x" + c.cols + "x" + c.k + " blocks";
  }
  function encText(c) {
    if (!c || c.weights === undefined) return "";
    return "weights " + c.weights + ", partials " + c.partials + ", sums at " + c.sums + ", streams " + c.streams +
      (c.panel_batch ? ", panels batched" : "");
  }
  (function plan() {
    const s = section("plan", "The plan and why", P ? "Per op, what the search chose, its predicted cycles against the runner-up's, and why; " +
      "the search's accepted steps; cast sites, fusions, sibling joins and refused finalists."
      : "Per op, the recipe's choices (the package's own). Give the compile report (tessel report PKG --compile-report R.json) for " +
        "the runner-ups, the search's steps and the reasons.");
    let rows;
    if (P) {
      rows = P.ops.map((o) => [o.op, o.kind, o.kind === "matmul_grid" ? gridText(o.chosen) : o.kind === "row_parts" ?
        o.chosen.parts + " row parts" : "follows " + o.chosen.follows, o.kind === "matmul_grid" ? encText(o.chosen) : "",
        o.predicted_cycles, o.runner_up_predicted_cycles === undefined ? null : o.runner_up_predicted_cycles,
        o.runner_up ? gridText(o.runner_up) + "; " + encText(o.runner_up) : "", o.why || ""]);
      const t = table([{ h: "op" }, { h: "kind" }, { h: "chosen" }, { h: "encodings" }, { h: "predicted cycles", n: 1, f: int },
        { h: "program with runner-up", n: 1, f: (v) => (v === null ? "" : int(v)) }, { h: "runner-up" }, { h: "why" }], rows, { scroll: 1 });
      t.id = "plan-ops";
      s.appendChild(t);
      s.appendChild(el("h3", { text: "search steps accepted (" + P.search_steps.length + ")" }));
      s.appendChild(table([{ h: "#", n: 1 }, { h: "op" }, { h: "by" }, { h: "before", n: 1, f: int }, { h: "after", n: 1, f: int },
        { h: "delta", n: 1, f: int }], P.search_steps.map((q, k) => [k + 1, q.op + (q.cast_site ? " (cast " + q.cast_site.ordinal +
        " " + q.cast_site.moved + ")" : ""), q.by, q.before, q.after, q.delta]), { scroll: 1 }));
      if (P.cast_sites.length) {
        s.appendChild(el("h3", { text: "FP8 cast sites" }));
        s.appendChild(table([{ h: "op" }, { h: "ordinal", n: 1 }, { h: "runs" }, { h: "why not early" }],
          P.cast_sites.map((c) => [c.op, c.ordinal, c.early ? "early, before its copies" : "late", c.reason || ""])));
      }
      if (P.fusions.length) {
        s.appendChild(el("h3", { text: "optimizer steps and the epilogue fusion" }));
        s.appendChild(table([{ h: "step" }, { h: "fused" }, { h: "rule" }, { h: "reason" }],
          P.fusions.map((f) => [f.consumer + " (" + f.consumer_kind + ")", f.fused ? "fused" : "no", f.rule, f.reason])));
      }
      if (P.siblings.groups.length)
        s.appendChild(el("p", { text: "Sibling matmuls " + P.siblings.groups.join("; ") + ": " + (P.siblings.joined.length ?
          "joined (" + P.siblings.joined.join(", ") + ")" : "kept apart") + (P.siblings.predicted_apart ? ", predicted " +
          int(P.siblings.predicted_joined) + " cycles joined against " + int(P.siblings.predicted_apart) + " apart" : "") + "." }));
      s.appendChild(el("h3", { text: "finalists refused by placement (" + P.failed_finalists.length + ")" }));
      if (P.failed_finalists.length)
        s.appendChild(table([{ h: "finalist", n: 1 }, { h: "predicted", n: 1, f: int }, { h: "why" }],
          P.failed_finalists.map((f) => [f.finalist + 1, f.predicted_cycles, f.why])));
      else s.appendChild(el("p", { cls: "muted", text: "none: the first finalist placed." }));
    } else {
      rows = ((recipe && recipe.choices) || []).map((c) => [c.op, c.kind, c.kind === "matmul_grid" ? gridText(c) : c.parts !== undefined ?
        c.parts + " row parts" : JSON.stringify(c), c.kind === "matmul_grid" ? encText(c) : ""]);
      const t = table([{ h: "op" }, { h: "kind" }, { h: "chosen" }, { h: "encodings" }], rows, { scroll: 1 });
      t.id = "plan-ops";
      s.appendChild(t);
    }
    s.setAttribute("data-ops", String(rows.length));
  })();

  // ---- 5. estimate against simulation ----------------------------------------
  (function estimate() {
    const s = section("estimate", "Estimate against simulation",
      P ? "What the search predicted for the plan against what the simulator measured; per op, its prims' predicted cycles " +
        "(one execution) against the simulated cycles, per execution, of the steps that name it (its exchanges too; a joined step " +
        "counts for each op it names)."
        : "Give the compile report (--compile-report) for the search's predictions.");
    const rows = [["cycles", P ? P.predicted_cycles : null, R.cycles], ["compute cycles", P ? P.predicted_compute_cycles : null, R.compute_cycles],
      ["exchange cycles (sync included)", P ? P.predicted_exchange_cycles : null, R.exchange_cycles],
      ["exchange phases", P ? P.predicted_phases : null, R.exchange_phases],
      ["exchange fragments (repeats counted)", P ? P.predicted_fragments : null, R.exchange_fragments],
      ["exchange-table bytes, busiest tile", P ? P.predicted_table_bytes_max : null, Math.max.apply(null, T.table_bytes)]];
    const fmtN = (v) => (v === null || v === undefined ? "-" : int(v));
    const tt = table([{ h: "figure" }, { h: "predicted", n: 1, f: fmtN }, { h: "simulated / placed", n: 1, f: fmtN },
      { h: "simulated / predicted", n: 1, f: (v, r) => (r[1] && r[2] !== null ? (r[2] / r[1]).toFixed(3) : "-") }],
      rows.map((r) => r.concat([0])));
    tt.id = "estimate-totals";
    s.appendChild(tt);
    if (!P) return;
    // Per op: the steps whose label names it, its exchanges included (a joined
    // step counts for each op it names); executions: the fewest of any of them
    // (a repeat body's op runs once an iteration, its operands in one or more phases).
    const sim = {};
    for (const l in byLabel) {
      for (const op of opsOf(l).split("+")) {
        const q = sim[op] || (sim[op] = { cycles: 0, exchange: 0, n: Infinity, steps: [] });
        q.cycles += byLabel[l].cycles;
        if (kindOf(l) === "exchange") q.exchange += byLabel[l].cycles;
        q.n = Math.min(q.n, byLabel[l].n);
        q.steps.push(kindOf(l));
      }
    }
    const rows2 = P.ops.map((o) => {
      const q = sim[o.op];
      const per = q ? q.cycles / q.n : null, perx = q ? q.exchange / q.n : null;
      return [o.op, o.predicted_cycles, o.predicted_exchange_cycles, per, perx,
        per !== null && o.predicted_cycles ? per / o.predicted_cycles : null, q ? q.steps.join(", ") : ""];
    });
    s.appendChild(el("h3", { text: "per op, and its exchange phases" }));
    const t2 = table([{ h: "op" }, { h: "predicted", n: 1, f: int }, { h: "of which exchange", n: 1, f: fmtN },
      { h: "simulated per execution", n: 1, f: fmtN }, { h: "of which exchange", n: 1, f: fmtN },
      { h: "ratio", n: 1, f: (v) => (v === null ? "-" : v.toFixed(3)) }, { h: "steps" }], rows2, { scroll: 1 });
    t2.id = "estimate-ops";
    s.appendChild(t2);
    if (!P.bounds) return;
    // The machine's bound per op (docs/search.md, "The bound"): where the
    // plan's predicted cycles stand furthest above it, all executions counted.
    s.appendChild(el("h3", { text: "against the machine's bound: " + int(P.predicted_cycles) + " predicted, " + int(P.bound_cycles) +
      " at least (" + (P.predicted_over_bound ? P.predicted_over_bound.toFixed(2) + "x" : "-") + ")" }));
    const rows3 = P.bounds.map((b) => [b.op, b.kind, b.executions, b.bound_cycles, b.predicted_cycles,
      b.ratio === undefined ? null : b.ratio, (b.predicted_cycles - b.bound_cycles) * b.executions])
      .sort((x, y) => y[6] - x[6]);
    const t3 = table([{ h: "op" }, { h: "kind" }, { h: "executions", n: 1 }, { h: "bound", n: 1, f: int }, { h: "predicted", n: 1, f: int },
      { h: "predicted / bound", n: 1, f: (v) => (v === null ? "-" : v.toFixed(2)) }, { h: "above the bound, all executions", n: 1, f: int }],
      rows3, { scroll: 1 });
    t3.id = "estimate-bounds";
    s.appendChild(t3);
  })();

  // ---- 6. check ------------------------------------------------------------------
  (function check() {
    const C = D.check;
    const s = section("check", "Check", C ? "Every output against the plan-exact reference (bit for bit) and the pure FP32 model (cosine)."
      : "Made by tessel check MODEL --html FILE.html: this page comes from tessel report, which runs the package without references.");
    if (!C) return;
    s.appendChild(el("p", { cls: C.pass ? "pass" : "fail", text: C.pass ? "PASS" : "FAIL" }));
    const rows = C.outputs.map((o) => [o.name, o.exact ? "bit-exact" : o.differing + " differ" + (o.first_difference ? " (first at " +
      o.first_difference.index + ": " + o.first_difference.got + " against " + o.first_difference.want + ")" : ""),
      o.cosine, o.min_cosine, o.max_abs_err, o.pass ? "ok" : "FAIL"]);
    const t = table([{ h: "output" }, { h: "vs plan-exact reference" }, { h: "cosine vs FP32", n: 1, f: (v) => (v === null ? "nan" : v.toFixed(6)) },
      { h: "bar", n: 1 }, { h: "max abs error", n: 1, f: (v) => (v === null ? "nan" : v.toPrecision(4)) }, { h: "" }], rows);
    t.id = "check-outputs";
    s.appendChild(t);
  })();

  if (HASH.only) {
    header.style.display = nav.style.display = "none";
    for (const sec of main.querySelectorAll("section")) if (sec.id !== HASH.only) sec.style.display = "none";
  }
  document.body.setAttribute("data-ready", "1");
})();
