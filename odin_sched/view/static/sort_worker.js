// Depth sort of the Gaussians for back-to-front blending, off the page's main thread.
// Message {means: Float32Array [3G], importance: Float32Array [G]} sets the model; message
// {view: [r20, r21, r22, t2], limit, version} answers {indices: Uint32Array, count, limit, version, ms}:
// of the `limit` most important Gaussians (all of them when limit >= G), those in front of the near
// plane, farthest first, by a counting sort of 16-bit quantised view depths.
"use strict";
const NEAR = 0.01;
const BINS = 65536;
let means = null;
let order = null;   // Gaussians by decreasing importance
let depth = null;
let keys = null;
const counts = new Uint32Array(BINS);

function countingSort(n, key, out) {  // out[...] = 0..n-1 ordered by key (Uint32 in [0, BINS)), stable
  counts.fill(0);
  for (let i = 0; i < n; i++) counts[key(i)]++;
  let sum = 0;
  for (let k = 0; k < BINS; k++) { const c = counts[k]; counts[k] = sum; sum += c; }
  for (let i = 0; i < n; i++) out[counts[key(i)]++] = i;
}

function setModel(msg) {
  means = msg.means;
  const n = means.length / 3, imp = msg.importance;
  depth = new Float32Array(n);
  keys = new Uint32Array(n);
  let lo = Infinity, hi = -Infinity;
  for (let i = 0; i < n; i++) { const v = Math.log(imp[i] + 1e-30); depth[i] = v; if (v < lo) lo = v; if (v > hi) hi = v; }
  const scale = (BINS - 1) / Math.max(hi - lo, 1e-12);
  for (let i = 0; i < n; i++) keys[i] = (BINS - 1) - Math.floor((depth[i] - lo) * scale);  // most important first
  order = new Uint32Array(n);
  countingSort(n, (i) => keys[i], order);
}

onmessage = (event) => {
  const msg = event.data;
  if (msg.means) { setModel(msg); return; }
  const t0 = performance.now();
  const [a, b, c, d] = msg.view;
  const m = Math.min(msg.limit, order.length);
  let lo = Infinity, hi = -Infinity, visible = 0;
  for (let j = 0; j < m; j++) {  // depth[j]: view depth of the j-th most important Gaussian
    const i = order[j];
    const z = a * means[3 * i] + b * means[3 * i + 1] + c * means[3 * i + 2] + d;
    depth[j] = z;
    if (z > NEAR) { visible++; if (z < lo) lo = z; if (z > hi) hi = z; }
  }
  const indices = new Uint32Array(visible);
  if (visible > 0) {
    const scale = (BINS - 1) / Math.max(hi - lo, 1e-12);
    const front = new Uint32Array(visible);
    let v = 0;
    for (let j = 0; j < m; j++) {
      if (depth[j] > NEAR) { keys[v] = (BINS - 1) - Math.floor((depth[j] - lo) * scale); front[v++] = order[j]; }  // far first
    }
    const sorted = new Uint32Array(visible);
    countingSort(visible, (k) => keys[k], sorted);
    for (let k = 0; k < visible; k++) indices[k] = front[sorted[k]];
  }
  postMessage({indices, count: visible, limit: msg.limit, version: msg.version, ms: performance.now() - t0},
              [indices.buffer]);
};
