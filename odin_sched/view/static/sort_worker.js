// Depth sort of the Gaussians for back-to-front blending, off the page's main thread.
// Message {means: Float32Array [3G], importance: Float32Array [G], degree, dc: Float32Array [3G],
// rest: Float32Array [G (K-1) 3]} sets the model (dc and rest only with SH of degree >= 1); message
// {view: [r20, r21, r22, t2], eye: [x, y, z], limit, version} answers
// {indices: Uint32Array, colors: Float32Array [4 count] or null, count, limit, version, ms}:
// of the `limit` most important Gaussians (all of them when limit >= G), those in front of the near
// plane, farthest first, by a counting sort of 16-bit quantised view depths; with SH, the colour of each
// (in the same order) seen from the camera centre `eye`, as the project's rasterizer evaluates it
// (kernels/splat/sh.py, the reference 3DGS constants): the unit direction d from the camera centre to
// the mean, sum_k basis_k(d) sh_k + 0.5 (dc holds sh_0 C0 + 0.5), clamped at 0.
"use strict";
const NEAR = 0.01;
const BINS = 65536;
let means = null;
let order = null;   // Gaussians by decreasing importance
let depth = null;
let keys = null;
let degree = 0, dc = null, rest = null;
const counts = new Uint32Array(BINS);

function countingSort(n, key, out) {  // out[...] = 0..n-1 ordered by key (Uint32 in [0, BINS)), stable
  counts.fill(0);
  for (let i = 0; i < n; i++) counts[key(i)]++;
  let sum = 0;
  for (let k = 0; k < BINS; k++) { const c = counts[k]; counts[k] = sum; sum += c; }
  for (let i = 0; i < n; i++) out[counts[key(i)]++] = i;
}

const C1 = 0.4886025119029199;
const C2 = [1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396];
const C3 = [-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154,
            -0.4570457994644658, 1.445305721320277, -0.5900435899266435];
const basis = new Float64Array(16);

function shBasis(x, y, z) {  // basis[1..(degree+1)^2 - 1] at the unit direction (x, y, z)
  basis[1] = -C1 * y; basis[2] = C1 * z; basis[3] = -C1 * x;
  if (degree < 2) return;
  const xx = x * x, yy = y * y, zz = z * z;
  basis[4] = C2[0] * x * y; basis[5] = C2[1] * y * z; basis[6] = C2[2] * (2 * zz - xx - yy);
  basis[7] = C2[3] * x * z; basis[8] = C2[4] * (xx - yy);
  if (degree < 3) return;
  basis[9] = C3[0] * y * (3 * xx - yy); basis[10] = C3[1] * x * y * z; basis[11] = C3[2] * y * (4 * zz - xx - yy);
  basis[12] = C3[3] * z * (2 * zz - 3 * xx - 3 * yy); basis[13] = C3[4] * x * (4 * zz - xx - yy);
  basis[14] = C3[5] * z * (xx - yy); basis[15] = C3[6] * x * (xx - 3 * yy);
}

function shColors(indices, n, eye) {  // RGBA [4 n] of the Gaussians indices[0..n) seen from eye
  const colors = new Float32Array(4 * n), k1 = (degree + 1) * (degree + 1) - 1, stride = 3 * k1;
  for (let s = 0; s < n; s++) {
    const i = indices[s];
    const rx = means[3 * i] - eye[0], ry = means[3 * i + 1] - eye[1], rz = means[3 * i + 2] - eye[2];
    const inv = 1 / Math.max(Math.sqrt(rx * rx + ry * ry + rz * rz), 1e-12);
    shBasis(rx * inv, ry * inv, rz * inv);
    let r = dc[3 * i], g = dc[3 * i + 1], b = dc[3 * i + 2];
    for (let k = 1, o = stride * i; k <= k1; k++, o += 3) {
      const w = basis[k];
      r += w * rest[o]; g += w * rest[o + 1]; b += w * rest[o + 2];
    }
    colors[4 * s] = Math.max(r, 0); colors[4 * s + 1] = Math.max(g, 0); colors[4 * s + 2] = Math.max(b, 0);
  }
  return colors;
}

function setModel(msg) {
  means = msg.means;
  degree = msg.degree; dc = msg.dc; rest = msg.rest;
  const n = means.length / 3, imp = msg.importance;
  depth = new Float32Array(n);
  keys = new Uint32Array(n);
  let lo = Infinity, hi = -Infinity;
  for (let i = 0; i < n; i++) {  // bounds of the stored float32 values, so that every key is in [0, BINS)
    depth[i] = Math.log(imp[i] + 1e-30);
    const v = depth[i];
    if (v < lo) lo = v; if (v > hi) hi = v;
  }
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
    depth[j] = a * means[3 * i] + b * means[3 * i + 1] + c * means[3 * i + 2] + d;
    const z = depth[j];  // as stored (float32): the bounds below hold every key in [0, BINS)
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
  const colors = degree > 0 ? shColors(indices, visible, msg.eye) : null;
  postMessage({indices, colors, count: visible, limit: msg.limit, version: msg.version, ms: performance.now() - t0},
              colors ? [indices.buffer, colors.buffer] : [indices.buffer]);
};
