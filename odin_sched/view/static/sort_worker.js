// Depth sort of the Gaussians for back-to-front blending, off the page's main thread.
// Message {means: Float32Array [3G]} sets the model; message {view: [r20, r21, r22, t2], version}
// answers {indices: Uint32Array, count, version, ms}: the Gaussians in front of the near plane,
// farthest first, by a counting sort of 16-bit quantised view depths (one pass over the model).
"use strict";
const NEAR = 0.01;
const BINS = 65536;
let means = null;
let depth = null;
let keys = null;
const counts = new Uint32Array(BINS);

onmessage = (event) => {
  const msg = event.data;
  if (msg.means) {
    means = msg.means;
    depth = new Float32Array(means.length / 3);
    keys = new Uint32Array(means.length / 3);
    return;
  }
  const t0 = performance.now();
  const [a, b, c, d] = msg.view;
  const n = depth.length;
  let lo = Infinity, hi = -Infinity, visible = 0;
  for (let i = 0; i < n; i++) {
    const z = a * means[3 * i] + b * means[3 * i + 1] + c * means[3 * i + 2] + d;
    depth[i] = z;
    if (z > NEAR) {
      visible++;
      if (z < lo) lo = z;
      if (z > hi) hi = z;
    }
  }
  const indices = new Uint32Array(visible);
  if (visible > 0) {
    const scale = (BINS - 1) / Math.max(hi - lo, 1e-12);
    counts.fill(0);
    for (let i = 0; i < n; i++) {
      if (depth[i] > NEAR) {
        const k = (BINS - 1) - Math.floor((depth[i] - lo) * scale);  // far first
        keys[i] = k;
        counts[k]++;
      }
    }
    let sum = 0;
    for (let k = 0; k < BINS; k++) { const c0 = counts[k]; counts[k] = sum; sum += c0; }
    for (let i = 0; i < n; i++) {
      if (depth[i] > NEAR) indices[counts[keys[i]]++] = i;
    }
  }
  postMessage({indices, count: visible, version: msg.version, ms: performance.now() - t0}, [indices.buffer]);
};
