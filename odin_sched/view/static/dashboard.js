// pregel view --watch / pregel train --dashboard: polls status.json (odin_sched/training/status.py) and draws
// it. Every number shown keeps its exact value in data-value (the JSON number as JavaScript prints it).
"use strict";

const POLL_MS = 500;
const KIND_COLOURS = {compute: "#4caf50", send: "#2196f3", recv: "#03a9f4", wait: "#e0a030", barrier: "#e05030"};

function show(id, value, digits) {
  const el = document.getElementById(id);
  el.dataset.value = String(value);
  el.textContent = typeof value === "number" && digits !== undefined ? value.toFixed(digits) : String(value);
}

function plot(canvas, xs, ys, colour, logY) {
  const g = canvas.getContext("2d"), w = canvas.width, h = canvas.height, pad = 40;
  g.fillStyle = "#1a1a1a"; g.fillRect(0, 0, w, h);
  if (!xs.length) return;
  const f = logY ? (v) => Math.log10(Math.max(v, 1e-12)) : (v) => v;
  const vs = ys.map(f);
  const x0 = 0, x1 = Math.max(...xs, 1);
  let y0 = Math.min(...vs), y1 = Math.max(...vs);
  if (y1 - y0 < 1e-9) { y0 -= 0.5; y1 += 0.5; }
  const px = (x) => pad + (w - pad - 8) * (x - x0) / (x1 - x0);
  const py = (y) => h - 20 - (h - 30) * (y - y0) / (y1 - y0);
  g.fillStyle = "#999"; g.font = "11px sans-serif";
  const label = (y) => (logY ? Math.pow(10, y).toPrecision(2) : y.toFixed(2));
  g.fillText(label(y1), 2, 14); g.fillText(label(y0), 2, h - 20); g.fillText(String(x1), w - 40, h - 4);
  g.strokeStyle = colour; g.lineWidth = 1.5; g.beginPath();
  xs.forEach((x, i) => (i ? g.lineTo(px(x), py(vs[i])) : g.moveTo(px(x), py(vs[i]))));
  g.stroke();
  if (xs.length < 40) { g.fillStyle = colour; xs.forEach((x, i) => g.fillRect(px(x) - 2, py(vs[i]) - 2, 4, 4)); }
}

function rankTable(ranks) {
  const cols = ["compute_seconds", "comm_seconds", "wait_seconds", "images", "messages_sent", "bytes_sent"];
  const idx = cols.map((c) => ranks.fields.indexOf(c));
  const head = "<tr><th>rank</th>" + cols.map((c) => `<th>${c.replace("_seconds", " (s)").replace("_", " ")}</th>`).join("") + "</tr>";
  const rows = ranks.rows.map((r, i) => `<tr><td>${i}</td>` + idx.map((j, k) => {
    const v = r[j], text = cols[k].endsWith("seconds") ? v.toFixed(3) : Math.round(v).toLocaleString();
    return `<td id="rank-${i}-${cols[k]}" data-value="${v}">${text}</td>`;
  }).join("") + "</tr>");
  document.getElementById("ranks").innerHTML = head + rows.join("");
}

function timeline(canvas, tl, numRanks) {
  const g = canvas.getContext("2d"), w = canvas.width, h = canvas.height;
  g.fillStyle = "#1a1a1a"; g.fillRect(0, 0, w, h);
  const spans = tl.spans || [];
  if (!spans.length) return;
  const t0 = Math.min(...spans.map((s) => s[2])), t1 = Math.max(...spans.map((s) => s[3]));
  const lane = (h - 16) / numRanks, px = (t) => 50 + (w - 56) * (t - t0) / Math.max(t1 - t0, 1e-9);
  g.fillStyle = "#999"; g.font = "11px sans-serif";
  for (let r = 0; r < numRanks; r++) g.fillText(`rank ${r}`, 2, r * lane + lane / 2 + 4);
  g.fillText(`${((t1 - t0) * 1000).toFixed(1)} ms`, w - 60, h - 3);
  for (const [r, k, a, b] of spans) {
    g.fillStyle = KIND_COLOURS[tl.kinds[k]] || "#888";
    g.fillRect(px(a), r * lane + 2, Math.max(px(b) - px(a), 0.5), lane - 4);
  }
}

let lastView = null;

function render(s) {
  const run = s.run;
  document.getElementById("title").firstChild.textContent =
    `${run.out}: ${run.mode}, ${run.ranks} rank(s), batch ${run.batch_size}, scene ${run.scene} `;
  show("state", s.done ? "finished" : "running");
  show("step", s.step); show("steps", run.steps);
  show("loss", s.loss, 5);
  const ps = s.psnr.values;
  show("psnr", ps.length ? ps[ps.length - 1] : "–", 3);
  show("gaussians", s.num_gaussians);
  show("ips", s.images_per_s, 2);
  show("wall", s.wall_s, 1);
  plot(document.getElementById("loss-plot"), s.loss_curve.steps, s.loss_curve.values, "#e0a030", true);
  plot(document.getElementById("psnr-plot"), s.psnr.steps, ps, "#4caf9f", false);
  document.getElementById("psnr-table").innerHTML = "<tr><th>step</th><th>PSNR (dB)</th></tr>" + s.psnr.steps.map(
    (st, i) => `<tr><td>${st}</td><td class="psnr-value" data-step="${st}" data-value="${ps[i]}">${ps[i].toFixed(3)}</td></tr>`).join("");
  if (s.ranks) {
    document.getElementById("ranks-row").hidden = false;
    rankTable(s.ranks);
    timeline(document.getElementById("timeline"), s.ranks.timeline, s.ranks.rows.length);
  }
  const viewKey = `${s.psnr.steps.length}-${s.done}`;  // a new PNG comes with each evaluation
  if (s.has_view && viewKey !== lastView) {
    const img = document.getElementById("heldout");
    img.src = `heldout.png?v=${viewKey}`;
    img.height = 220;
    lastView = viewKey;
  }
}

let lastText = null;  // the status last drawn: the file changes at most every 2 s, the page polls every 0.5 s

async function poll() {
  try {
    const text = await (await fetch("status.json", {cache: "no-store"})).text();
    if (text !== lastText) {  // drawn only when it changed (drawing is most of the browser's work)
      const s = JSON.parse(text);
      if (s.run) render(s);
      lastText = text;
    }
  } catch (err) {
    lastText = null;  // drawn again (its state too) once the server answers
    show("state", "server not reachable: showing the last state");
  }
  setTimeout(poll, POLL_MS);
}

poll();
