// The HTML report of a model over several chips (html.c builds it into the
// page): from the JSON document in <script id="data"> (what `tessel check
// --json` prints), the timeline of a pipeline's micro-batches or of a
// training step's phases as SVG, one row per chip, and the tables of stages
// or programs. No network, no library.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const C = D.check, T = C.simulated, HZ = D.machine.clock_hz;
  const train = C.plan === "data-parallel training";

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
  function svg(tag, attrs, text) {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const int = (x) => Math.round(x).toLocaleString("en-US");
  const ms = (c) => (c / HZ * 1e3).toFixed(3) + " ms";
  function bytes(b) {
    if (b >= 1 << 20) return (b / (1 << 20)).toFixed(1) + " MiB";
    if (b >= 1 << 10) return (b / (1 << 10)).toFixed(1) + " KiB";
    return b + " B";
  }
  const card = (v, k, cls) => el("div", { cls: "card" }, [el("div", { cls: "v " + (cls || ""), text: v }), el("div", { cls: "k", text: k })]);
  function table(id, head, rows) {
    return el("div", { cls: "scroll" }, [el("table", { id: id }, [
      el("tr", {}, head.map((h) => el("th", { cls: h.n ? "n" : "", text: h.h }))),
      ...rows.map((r) => el("tr", {}, r.map((v, i) => el("td", { cls: head[i].n ? "n" : "", text: String(v) }))))])]);
  }

  // A timeline: rows (one per chip) of bars [start, end, colour, label] on
  // a cycle axis, end = the last bar's.
  function timeline(rows, names, end) {
    const W = 1100, left = 90, rowH = 26, H = rows.length * rowH + 34, x = (c) => left + (W - left - 10) * c / end;
    const s = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, "data-bars": rows.reduce((n, r) => n + r.length, 0) });
    rows.forEach((bars, i) => {
      s.appendChild(svg("text", { x: 4, y: i * rowH + 17, "font-size": 12 }, names[i]));
      for (const [a, b, colour, label] of bars) {
        const r = svg("rect", { x: x(a), y: i * rowH + 4, width: Math.max(0.5, x(b) - x(a)), height: rowH - 8, fill: colour });
        r.appendChild(svg("title", {}, label + ": cycles " + int(a) + " to " + int(b) + " (" + int(b - a) + ")"));
        s.appendChild(r);
      }
    });
    for (let k = 0; k <= 4; k++) {
      const c = end * k / 4;
      s.appendChild(svg("line", { x1: x(c), x2: x(c), y1: 0, y2: H - 28, stroke: "#d8dde3" }));
      s.appendChild(svg("text", { x: x(c), y: H - 10, "font-size": 11, "text-anchor": k ? (k === 4 ? "end" : "middle") : "start" },
                        int(c) + " (" + ms(c) + ")"));
    }
    return s;
  }
  const hue = (k) => "hsl(" + (210 + 47 * k) % 360 + ", 55%, 52%)";
  const LINK = "#e08a2c", OWNER = "#2a9d8f";

  const body = document.body, main = el("main");
  const ok = C.pass;
  body.appendChild(el("header", {}, [el("h1", { text: "tessel: " + D.title }),
    el("div", { cls: "sub", text: D.machine.name + ", " + D.machine.chips + " chips: " + D.plan_words })]));
  body.appendChild(main);
  main.appendChild(el("section", { id: "summary" }, [el("h2", { text: "Summary" }), el("div", { cls: "cards" }, [
    card(ok ? "PASS" : "FAIL", "check: every program bit-exact, outputs against FP32", ok ? "pass" : "fail"),
    card(C.cosine.toFixed(6), "cosine against the whole model in FP32"),
    card(int(T.cycles), (train ? "the step" : "the batch") + ": cycles, " + ms(T.cycles)),
    card(T.samples_per_second.toFixed(1), train ? "samples/s over every chip" : "samples/s, steady state"),
    train ? card(bytes(T.scatter_bytes_busiest_link), "gradient rows over the busiest link")
          : card((100 * T.bubble).toFixed(1) + " %", "bubble over the batch (" + (100 * T.steady_state_idle).toFixed(1) + " % steady)"),
  ])]));

  if (!train) {
    // Micro-batch k enters stage s after the turns (cycles and link) of the
    // stages before it, one interval after micro-batch k - 1: the figures'
    // model (docs/chips.md, "Timing"), whose last end is the batch's cycles.
    const S = T.stages, M = T.micro_batches, rows = S.map(() => []);
    let at = 0;
    const enter = S.map((st) => { const e = at; at += st.cycles + st.link_cycles; return e; });
    for (let k = 0; k < M; k++)
      S.forEach((st, s) => {
        const a = enter[s] + k * T.interval_cycles;
        rows[s].push([a, a + st.cycles, hue(k), "micro-batch " + k + ", stage " + s]);
        if (st.link_cycles) rows[s].push([a + st.cycles, a + st.cycles + st.link_cycles, LINK, "micro-batch " + k + " to stage " + (s + 1) + ", " + bytes(st.link_bytes)]);
      });
    main.appendChild(el("section", { id: "timeline" }, [el("h2", { text: "The pipeline" }),
      el("p", { cls: "lead", text: M + " micro-batch" + (M > 1 ? "es" : "") + " through " + S.length + " stages" +
        (T.replicas > 1 ? " (each of " + T.replicas + " replicas alike)" : "") + "; a colour per micro-batch, links in orange. Fill and drain leave chips idle: the bubble." }),
      timeline(rows, S.map((st, s) => "chip " + s), T.cycles)]));
    main.appendChild(el("section", { id: "stages" }, [el("h2", { text: "Stages" }),
      table("stage-table", [{ h: "stage" }, { h: "layers" }, { h: "cycles", n: 1 }, { h: "link bytes", n: 1 }, { h: "link cycles", n: 1 },
                            { h: "vs plan-exact reference" }, { h: "cosine vs FP32", n: 1 }],
            C.stages.map((st, s) => [s, st.first_layer + ".." + (st.first_layer + st.layers - 1), int(S[s].cycles), int(S[s].link_bytes),
                                     int(S[s].link_cycles), st.pass ? "bit-exact" : st.differing + " differ", st.cosine_stage_fp32.toFixed(6)]))]));
  } else {
    // Every chip: its replica's micro-batches, the reduce-scatter, its owner, the gather.
    const n = T.replicas, M = T.micro_batches, rows = [], each = T.replica_cycles / M;
    const s0 = T.replica_cycles, s1 = s0 + T.scatter_cycles, o1 = s1 + T.owner_cycles.reduce((a, b) => Math.max(a, b), 0);
    for (let c = 0; c < n; c++) {
      const bars = [];
      for (let k = 0; k < M; k++) bars.push([k * each, (k + 1) * each, hue(k), "replica " + c + ", micro-batch " + k]);
      bars.push([s0, s1, LINK, "gradient rows to their owners (" + bytes(T.scatter_bytes_busiest_link) + " over the busiest link)"]);
      bars.push([s1, s1 + T.owner_cycles[c], OWNER, "owner " + c + ": sums and updates its rows"]);
      bars.push([o1, o1 + T.gather_cycles, LINK, "new weight rows to every chip (" + bytes(T.gather_bytes_busiest_link) + " over the busiest link)"]);
      rows.push(bars);
    }
    main.appendChild(el("section", { id: "timeline" }, [el("h2", { text: "The training step" }),
      el("p", { cls: "lead", text: n + " replicas, one per chip, each on " + (T.batch / n) + " samples" + (M > 1 ? " in " + M + " micro-batches" : "") +
        "; then the reduce-scatter, each owner's sum and update, the gather (links in orange, owners in green)." }),
      timeline(rows, rows.map((r, c) => "chip " + c), T.cycles)]));
    main.appendChild(el("section", { id: "programs" }, [el("h2", { text: "Programs" }),
      table("program-table", [{ h: "program" }, { h: "runs" }, { h: "cycles", n: 1 }, { h: "updates fused" }, { h: "vs plan-exact reference" },
                              { h: "cosine vs FP32", n: 1 }],
            C.programs.map((p) => [p.role === "owner" ? "owner " + (p.program - 1) : "replica", p.what,
                                   int(p.role === "owner" ? T.owner_cycles[p.program - 1] : T.replica_cycles / M),
                                   p.role === "owner" ? (!p.fused ? "none" : p.fused_gradients_stored ? p.fused + ", FAIL: " + p.fused_gradients_stored + " stored"
                                                                                 : p.fused + ", no gradient stored") : "",
                                   p.pass ? "bit-exact" : p.differing + " differ", p.cosine_program_fp32.toFixed(6)]))]));
  }
  body.setAttribute("data-ready", "1");
})();
