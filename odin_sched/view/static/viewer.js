// pregel view: Gaussians drawn in WebGL2 with the conventions of the project's rasterizer
// (docs/rasterizer.md): EWA projection with the pinhole Jacobian and its field-of-view clamp, 0.3 added
// to the 2D covariance, a square of radius ceil(3 sqrt(lambda_max)) pixels per Gaussian,
// alpha = min(0.99, opacity exp(-d^T conic d / 2)) skipped below 1/255, composited over black in depth
// order (from sort_worker.js). Cameras are world-to-camera matrices with
// OpenCV axes (x right, y down, z forward) and pinhole intrinsics, as in the scene files. A model with
// SH (degree >= 1) gets its view-dependent colours from the worker with each depth order.
"use strict";

// While the view moves, frames are drawn at a lower quality q in (0, 1] chosen so that a frame takes
// about MOTION_FRAME_MS: sqrt(q) of the resolution (scaled up to the canvas) and the q G most important
// Gaussians (opacity x squared size; at least MIN_MOTION_GAUSSIANS); SETTLE_MS (or three moving frames,
// if longer) after the last change the full frame follows.
const MOTION_FRAME_MS = 60;
const SETTLE_MS = 250;
const MIN_QUALITY = 1 / 256;
const MIN_MOTION_GAUSSIANS = 20000;
const TEX_WIDTH = 4096;          // texels per row of the data texture; 4 texels per Gaussian
const PER_ROW = TEX_WIDTH / 4;
// Occlusion culling. A frame is drawn front to back (the "under" operator, into an RGBA target whose
// alpha is the opacity so far) in chunks of Gaussians, FIRST_CHUNK and then each twice the one before
// (the nearest Gaussians are the largest on screen and soon cover it); after each chunk a pyramid of
// "every pixel here is opaque" (alpha >= 254/255 in 8 bits: what is left behind it can add at most
// about 1.5/255 to a pixel, where the rasterizer stops at a transmittance of 1e-4; 255/255 is seldom
// reached, as an 8-bit alpha of 254 gains nothing from a fragment of alpha < 0.5) over squares of 2, 4,
// ... 2^OPAQUE_LEVELS pixels is built, and the next chunks' vertex shader drops a Gaussian whose box
// lies wholly on opaque squares before it is rasterized. In SwiftShader a frame's time is mostly the
// fragments rasterized (one that is discarded at once costs about as much as a splat's), so this is
// what makes deep models cheaper.
const FIRST_CHUNK = 1024;
const OPAQUE_LEVELS = 8;
const OPAQUE_ALPHA = "(253.5 / 255.0)";  // GLSL: an 8-bit alpha of 254 or 255

const VERTEX = `#version 300 es
precision highp float;
precision highp int;
uniform highp sampler2D u_data;    // 4 texels per Gaussian
uniform highp usampler2D u_order;  // the sorted Gaussian of each draw slot
uniform highp sampler2D u_colors;  // with SH: the colour of each draw slot
uniform bool u_sh;
uniform int u_count;               // slots drawn; draw position p is slot u_count - 1 - p (front to back)
uniform highp sampler2D u_opaque;  // level l, texel (i, j): 1 when the 2^(l+1) pixel square at it is opaque
uniform bool u_cull;

uniform mat4 u_view;
uniform vec4 u_intr;   // fx, fy, cx, cy in canvas pixels
uniform vec2 u_size;   // canvas width, height
out vec4 v_color;
out vec2 v_d;
out vec3 v_conic;
flat out float v_radius;

bool opaque(vec2 lo, vec2 hi) {  // whether the pixels of the box [lo, hi] (image pixels, y down) are all opaque
  vec2 wlo = max(vec2(lo.x, u_size.y - hi.y), 0.0), whi = min(vec2(hi.x, u_size.y - lo.y), u_size - 1.0);
  float size = max(whi.x - wlo.x, whi.y - wlo.y) + 1.0;
  int level = max(int(ceil(log2(size))) - 2, 0);  // squares of 2^(level+1) >= size / 2: at most 3 x 3 of them
  if (level >= ${OPAQUE_LEVELS}) return false;
  ivec2 a = ivec2(wlo) >> (level + 1), b = ivec2(whi) >> (level + 1);
  if (any(greaterThanEqual(b, textureSize(u_opaque, level))) || any(greaterThan(b - a, ivec2(2)))) return false;
  for (int j = a.y; j <= b.y; j++) {
    for (int i = a.x; i <= b.x; i++) {
      if (texelFetch(u_opaque, ivec2(i, j), level).r < ${OPAQUE_ALPHA}) return false;
    }
  }
  return true;
}

void main() {
  // no instancing (ANGLE on SwiftShader pays ~15 us per instance): vertex 4 p + c is corner c of position p
  int slot = u_count - 1 - gl_VertexID / 4, corner = gl_VertexID % 4;
  vec2 square = vec2(float(corner & 1) * 2.0 - 1.0, float(corner >> 1) * 2.0 - 1.0);
  uint index = texelFetch(u_order, ivec2(slot % ${TEX_WIDTH}, slot / ${TEX_WIDTH}), 0).r;
  ivec2 base = ivec2(int(index % ${PER_ROW}u) * 4, int(index / ${PER_ROW}u));
  vec4 t0 = texelFetch(u_data, base, 0);
  vec4 t1 = texelFetch(u_data, base + ivec2(1, 0), 0);
  vec4 t2 = texelFetch(u_data, base + ivec2(2, 0), 0);
  vec4 t3 = texelFetch(u_data, base + ivec2(3, 0), 0);
  vec4 t = u_view * vec4(t0.xyz, 1.0);
  gl_Position = vec4(0.0, 0.0, 2.0, 1.0);  // culled unless set below
  if (t.z <= 0.01) return;
  float fx = u_intr.x, fy = u_intr.y, cx = u_intr.z, cy = u_intr.w;
  float tanx = 0.5 * u_size.x / fx, tany = 0.5 * u_size.y / fy;
  float u = clamp(t.x / t.z, -cx / fx - 0.3 * tanx, (u_size.x - cx) / fx + 0.3 * tanx);
  float v = clamp(t.y / t.z, -cy / fy - 0.3 * tany, (u_size.y - cy) / fy + 0.3 * tany);
  mat3 J = mat3(fx / t.z, 0.0, 0.0, 0.0, fy / t.z, 0.0, -fx * u / t.z, -fy * v / t.z, 0.0);
  mat3 S = mat3(t1.x, t1.y, t1.z, t1.y, t1.w, t2.x, t1.z, t2.x, t2.y);
  mat3 T = J * mat3(u_view);
  mat3 cov = T * S * transpose(T);
  float a = cov[0][0] + 0.3, b = cov[0][1], c = cov[1][1] + 0.3;
  float det = a * c - b * b;
  if (det <= 0.0) return;
  float mid = 0.5 * (a + c), root = sqrt(max(mid * mid - det, 0.0));
  float r = ceil(3.0 * sqrt(mid + root));
  vec2 mean = vec2(fx * t.x / t.z + cx, fy * t.y / t.z + cy);
  if (mean.x + r <= 0.0 || mean.x - r >= u_size.x || mean.y + r <= 0.0 || mean.y - r >= u_size.y) return;
  // Only pixels with alpha >= 1/255 count: the ellipse opacity exp(-k^2 / 2) = 1/255. Its bounding box,
  // along the eigenvectors of the 2D covariance, covers them with fewer pixels than the square.
  if (t0.w * 255.0 < 1.0) return;
  float k = sqrt(2.0 * log(255.0 * t0.w));
  vec2 major = abs(b) > 1e-9 ? normalize(vec2(b, mid + root - a)) : (a >= c ? vec2(1.0, 0.0) : vec2(0.0, 1.0));
  vec2 minor = vec2(-major.y, major.x);
  vec2 extent = abs(major) * k * sqrt(mid + root) + abs(minor) * k * sqrt(max(mid - root, 0.0));
  if (u_cull && opaque(mean - min(extent, r), mean + min(extent, r))) return;
  v_d = square.x * k * sqrt(mid + root) * major + square.y * k * sqrt(max(mid - root, 0.0)) * minor;
  v_radius = r;
  vec2 p = mean + v_d;
  gl_Position = vec4(2.0 * p.x / u_size.x - 1.0, 1.0 - 2.0 * p.y / u_size.y, 0.0, 1.0);
  v_conic = vec3(c, -b, a) / det;
  vec3 rgb = u_sh ? texelFetch(u_colors, ivec2(slot % ${TEX_WIDTH}, slot / ${TEX_WIDTH}), 0).rgb : vec3(t2.z, t2.w, t3.x);
  v_color = vec4(rgb, t0.w);
}`;

// one triangle over the viewport; a fragment is texel (i, j) of a level of the opaque pyramid: the minimum
// of texels (2i..2i+1, 2j..2j+1) of the level below (lod 0 of u_src: its base level), alpha of the frame
// itself for level 0; texels outside the source count as not opaque
const REDUCE_VERTEX = `#version 300 es
void main() { gl_Position = vec4(gl_VertexID == 1 ? 3.0 : -1.0, gl_VertexID == 2 ? 3.0 : -1.0, 0.0, 1.0); }`;
const REDUCE_FRAGMENT = `#version 300 es
precision highp float;
precision highp int;
uniform highp sampler2D u_src;
uniform bool u_alpha;
out vec4 color;
void main() {
  ivec2 p = 2 * ivec2(gl_FragCoord.xy), n = textureSize(u_src, 0);
  float m = 1.0;
  for (int k = 0; k < 4; k++) {
    ivec2 q = p + ivec2(k & 1, k >> 1);
    vec4 t = q.x < n.x && q.y < n.y ? texelFetch(u_src, q, 0) : vec4(0.0);
    m = min(m, u_alpha ? t.a : t.r);
  }
  color = vec4(m);
}`;

const FRAGMENT = `#version 300 es
precision highp float;
in vec4 v_color;
in vec2 v_d;
in vec3 v_conic;
flat in float v_radius;
out vec4 color;
void main() {
  if (abs(v_d.x) > v_radius || abs(v_d.y) > v_radius) discard;  // the rasterizer's square footprint
  float power = -0.5 * (v_conic.x * v_d.x * v_d.x + v_conic.z * v_d.y * v_d.y) - v_conic.y * v_d.x * v_d.y;
  if (power > 0.0) discard;
  float alpha = min(0.99, v_color.a * exp(power));
  if (alpha < 1.0 / 255.0) discard;
  color = vec4(v_color.rgb * alpha, alpha);
}`;

// ---- small 3-vector and 3x3 (row-major arrays) helpers
const sub = (a, b) => [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
const add = (a, b) => [a[0] + b[0], a[1] + b[1], a[2] + b[2]];
const scale = (a, s) => [a[0] * s, a[1] * s, a[2] * s];
const dot = (a, b) => a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
const norm = (a) => scale(a, 1 / Math.hypot(a[0], a[1], a[2]));
const row = (m, i) => [m[3 * i], m[3 * i + 1], m[3 * i + 2]];
const mulMv = (m, v) => [dot(row(m, 0), v), dot(row(m, 1), v), dot(row(m, 2), v)];
function mulMM(a, b) {
  const out = new Array(9);
  for (let i = 0; i < 3; i++) for (let j = 0; j < 3; j++) {
    out[3 * i + j] = a[3 * i] * b[j] + a[3 * i + 1] * b[3 + j] + a[3 * i + 2] * b[6 + j];
  }
  return out;
}
const transpose3 = (m) => [m[0], m[3], m[6], m[1], m[4], m[7], m[2], m[5], m[8]];
function axisAngle(axis, angle) {  // rotation matrix (Rodrigues)
  const [x, y, z] = norm(axis), c = Math.cos(angle), s = Math.sin(angle), t = 1 - c;
  return [t * x * x + c, t * x * y - s * z, t * x * z + s * y,
          t * x * y + s * z, t * y * y + c, t * y * z - s * x,
          t * x * z - s * y, t * y * z + s * x, t * z * z + c];
}

class Viewer {
  constructor(canvas, info, buffer) {
    this.canvas = canvas;
    this.info = info;
    this.count = info.count;
    this.cameras = info.cameras;
    const n = this.count;
    const means = new Float32Array(buffer, 0, 3 * n);
    const covs = new Float32Array(buffer, 12 * n, 6 * n);
    const rgba = new Float32Array(buffer, 36 * n, 4 * n);
    this.degree = info.sh_degree || 0;
    const restCount = 3 * ((this.degree + 1) ** 2 - 1) * n;
    this.setupSize();
    this.setupGL(means, covs, rgba);
    this.up = this.worldUp();
    this.viewVersion = 0;
    this.sortedVersion = -1;
    this.sortedLimit = 0;
    this.drawnVersion = -1;
    this.sortBusy = false;
    this.sortMs = 0;
    this.frames = 0;
    this.worker = new Worker("sort_worker.js");
    const importance = new Float32Array(n);
    for (let i = 0; i < n; i++) importance[i] = rgba[4 * i + 3] * (covs[6 * i] + covs[6 * i + 3] + covs[6 * i + 5]);
    const sh = {degree: this.degree, dc: null, rest: null};
    if (this.degree > 0) {
      sh.dc = new Float32Array(3 * n);
      for (let i = 0; i < n; i++) sh.dc.set(rgba.subarray(4 * i, 4 * i + 3), 3 * i);
      sh.rest = new Float32Array(buffer, 52 * n, restCount).slice();
    }
    const transfer = [importance.buffer].concat(this.degree > 0 ? [sh.dc.buffer, sh.rest.buffer] : []);
    this.worker.postMessage({means: new Float32Array(means), importance, ...sh}, transfer);
    this.worker.onmessage = (e) => this.onSorted(e.data);
    if (this.cameras.length) this.setCamera(0);
    else this.setDefaultView();
    this.setupControls();
    this.paused = false;  // while a benchmark draws the frames itself
    this.occlusion = true;  // occlusion culling (off only to measure it)
    const loop = () => { if (!this.paused) this.frame(); requestAnimationFrame(loop); };
    requestAnimationFrame(loop);
  }

  setupSize() {
    const q = new URLSearchParams(location.search);
    const base = this.cameras.length ? this.cameras[0] : {width: 800, height: 600};
    let s = q.has("scale") ? Number(q.get("scale"))
      : Math.min((innerWidth - 250) / base.width, (innerHeight - 10) / base.height);
    s = s > 0 ? s : 1;
    this.width = Number(q.get("width")) || Math.max(1, Math.round(base.width * s));
    this.height = Number(q.get("height")) || Math.max(1, Math.round(base.height * s));
    this.canvas.width = this.width;
    this.canvas.height = this.height;
  }

  setupGL(means, covs, rgba) {
    const gl = this.canvas.getContext("webgl2", {antialias: false, preserveDrawingBuffer: true,
                                                 premultipliedAlpha: true, alpha: false});
    if (!gl) throw new Error("this browser has no WebGL2");
    this.gl = gl;
    const compile = (type, src) => {
      const s = gl.createShader(type);
      gl.shaderSource(s, src);
      gl.compileShader(s);
      if (!gl.getShaderParameter(s, gl.COMPILE_STATUS)) throw new Error(gl.getShaderInfoLog(s));
      return s;
    };
    const link = (vertex, fragment, names) => {
      const prog = gl.createProgram();
      gl.attachShader(prog, compile(gl.VERTEX_SHADER, vertex));
      gl.attachShader(prog, compile(gl.FRAGMENT_SHADER, fragment));
      gl.linkProgram(prog);
      if (!gl.getProgramParameter(prog, gl.LINK_STATUS)) throw new Error(gl.getProgramInfoLog(prog));
      return [prog, Object.fromEntries(names.map((name) => [name, gl.getUniformLocation(prog, name)]))];
    };
    [this.reduce, this.reduceUniforms] = link(REDUCE_VERTEX, REDUCE_FRAGMENT, ["u_src", "u_alpha"]);
    [this.splat, this.uniforms] = link(VERTEX, FRAGMENT, ["u_data", "u_order", "u_colors", "u_sh", "u_count",
                                                          "u_opaque", "u_cull", "u_view", "u_intr", "u_size"]);
    gl.useProgram(this.splat);

    const n = this.count, rows = Math.max(1, Math.ceil(n / PER_ROW));
    const data = new Float32Array(TEX_WIDTH * rows * 4);
    for (let i = 0; i < n; i++) {  // texels: (mean, opacity), (cov xx xy xz yy), (cov yz zz, r, g), (b)
      const o = 16 * i;
      data[o] = means[3 * i]; data[o + 1] = means[3 * i + 1]; data[o + 2] = means[3 * i + 2]; data[o + 3] = rgba[4 * i + 3];
      data.set(covs.subarray(6 * i, 6 * i + 4), o + 4);
      data[o + 8] = covs[6 * i + 4]; data[o + 9] = covs[6 * i + 5];
      data[o + 10] = rgba[4 * i]; data[o + 11] = rgba[4 * i + 1]; data[o + 12] = rgba[4 * i + 2];
    }
    const texture = (unit, format, height, type, pixels) => {
      gl.activeTexture(gl.TEXTURE0 + unit);
      gl.bindTexture(gl.TEXTURE_2D, gl.createTexture());
      gl.texImage2D(gl.TEXTURE_2D, 0, format, TEX_WIDTH, height, 0, type[0], type[1], pixels);
      for (const p of [gl.TEXTURE_MIN_FILTER, gl.TEXTURE_MAG_FILTER]) gl.texParameteri(gl.TEXTURE_2D, p, gl.NEAREST);
    };
    texture(0, gl.RGBA32F, rows, [gl.RGBA, gl.FLOAT], data);
    gl.uniform1i(this.uniforms.u_data, 0);
    this.orderRows = Math.max(1, Math.ceil(n / TEX_WIDTH));
    this.order = new Uint32Array(TEX_WIDTH * this.orderRows);
    texture(1, gl.R32UI, this.orderRows, [gl.RED_INTEGER, gl.UNSIGNED_INT], this.order);
    gl.uniform1i(this.uniforms.u_order, 1);
    this.colors = this.degree > 0 ? new Float32Array(4 * TEX_WIDTH * this.orderRows) : null;
    texture(2, gl.RGBA32F, this.colors ? this.orderRows : 1, [gl.RGBA, gl.FLOAT], this.colors);
    gl.uniform1i(this.uniforms.u_colors, 2);
    gl.uniform1i(this.uniforms.u_sh, this.degree > 0 ? 1 : 0);

    gl.bindVertexArray(gl.createVertexArray());
    const quads = new Uint32Array(6 * Math.max(n, 1));  // two triangles per slot: corners 0 1 2, 2 1 3
    for (let s = 0, q = 0; s < Math.max(n, 1); s++, q += 6) {
      quads[q] = 4 * s; quads[q + 1] = quads[q + 4] = 4 * s + 1; quads[q + 2] = quads[q + 3] = 4 * s + 2; quads[q + 5] = 4 * s + 3;
    }
    gl.bindBuffer(gl.ELEMENT_ARRAY_BUFFER, gl.createBuffer());
    gl.bufferData(gl.ELEMENT_ARRAY_BUFFER, quads, gl.STATIC_DRAW);
    this.instances = 0;
    gl.disable(gl.DEPTH_TEST);
    // the frame's target (texture unit 3): premultiplied colour and opacity, drawn front to back, then
    // copied (scaled up while moving) onto the canvas
    const target = (unit, format, width, height, levels) => {
      const t = gl.createTexture();
      gl.activeTexture(gl.TEXTURE0 + unit);
      gl.bindTexture(gl.TEXTURE_2D, t);
      gl.texStorage2D(gl.TEXTURE_2D, levels, format, width, height);
      gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MIN_FILTER, levels > 1 ? gl.NEAREST_MIPMAP_NEAREST : gl.NEAREST);
      gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MAG_FILTER, gl.NEAREST);
      return t;
    };
    const framebuffer = (texture, level) => {
      const fb = gl.createFramebuffer();
      gl.bindFramebuffer(gl.FRAMEBUFFER, fb);
      gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, texture, level);
      return fb;
    };
    this.frameTexture = target(3, gl.RGBA8, this.width, this.height, 1);
    this.frameBuffer = framebuffer(this.frameTexture, 0);
    // the opaque pyramid (texture unit 4): level l has ceil(size / 2^(l+1)) texels a side, at most
    const side = [Math.ceil(this.width / 2), Math.ceil(this.height / 2)];
    this.opaqueLevels = Math.min(OPAQUE_LEVELS, Math.floor(Math.log2(Math.max(...side))) + 1);
    this.opaque = target(4, gl.R8, side[0], side[1], this.opaqueLevels);
    this.opaqueBuffers = Array.from({length: this.opaqueLevels}, (_, l) => framebuffer(this.opaque, l));
    gl.bindFramebuffer(gl.FRAMEBUFFER, null);
    gl.uniform1i(this.uniforms.u_opaque, 4);
    gl.useProgram(this.reduce);
    gl.uniform1i(this.reduceUniforms.u_src, 3);
    gl.useProgram(this.splat);
    this.quality = 1;  // of frames drawn while moving
    this.lastChange = -Infinity;
    this.fence = null;  // {sync, t0, quality} of the moving frame being timed
    this.motionFrameMs = 0;
  }

  worldUp() {  // the cameras' mean up direction (-y of the camera frame), else -y
    if (!this.cameras.length) return [0, -1, 0];
    let up = [0, 0, 0];
    for (const c of this.cameras) up = sub(up, [c.viewmat[4], c.viewmat[5], c.viewmat[6]]);
    return norm(up);
  }

  // ---- the camera: rotation R (world to camera, row-major), eye (world), target (orbit centre), intrinsics
  setCamera(i) {
    const c = this.cameras[i];
    const m = c.viewmat;
    this.R = [m[0], m[1], m[2], m[4], m[5], m[6], m[8], m[9], m[10]];
    this.eye = scale(mulMv(transpose3(this.R), [m[3], m[7], m[11]]), -1);
    const sx = this.width / c.width, sy = this.height / c.height;
    this.intr = [c.fx * sx, c.fy * sy, c.cx * sx, c.cy * sy];
    const forward = row(this.R, 2);
    const depth = dot(sub(this.info.centre, this.eye), forward);
    this.target = add(this.eye, scale(forward, depth > 0 ? depth : this.info.radius));
    this.activeCamera = i;
    for (const b of document.querySelectorAll("#cameras button")) b.classList.toggle("active", b.dataset.cam == i);
    this.changed();
  }

  setDefaultView() {
    const f = 0.5 * this.height / Math.tan(Math.PI / 6);
    this.intr = [f, f, 0.5 * this.width, 0.5 * this.height];
    this.target = this.info.centre;
    this.eye = add(this.target, [0, 0, -2.5 * this.info.radius]);
    this.R = [1, 0, 0, 0, 1, 0, 0, 0, 1];
    this.changed();
  }

  viewmat() {  // row-major 4x4 world-to-camera
    const t = scale(mulMv(this.R, this.eye), -1);
    const R = this.R;
    return [R[0], R[1], R[2], t[0], R[3], R[4], R[5], t[1], R[6], R[7], R[8], t[2], 0, 0, 0, 1];
  }

  orbit(dx, dy) {  // turn about the world up axis and the camera's right axis, around the target
    const q = mulMM(axisAngle(row(this.R, 0), -dy), axisAngle(this.up, -dx));
    this.eye = add(this.target, mulMv(q, sub(this.eye, this.target)));
    this.R = mulMM(this.R, transpose3(q));
    this.moved();
  }

  pan(dx, dy) {  // pixels, in the camera's image plane at the target's depth
    const depth = Math.max(dot(sub(this.target, this.eye), row(this.R, 2)), 1e-6);
    const shift = add(scale(row(this.R, 0), -dx * depth / this.intr[0]), scale(row(this.R, 1), -dy * depth / this.intr[1]));
    this.eye = add(this.eye, shift);
    this.target = add(this.target, shift);
    this.moved();
  }

  zoom(factor) {  // move toward (factor < 1) or away from the target
    this.eye = add(this.target, scale(sub(this.eye, this.target), factor));
    this.moved();
  }

  moved() {
    this.activeCamera = -1;
    for (const b of document.querySelectorAll("#cameras button.active")) b.classList.remove("active");
    this.changed();
  }

  changed() { this.viewVersion++; this.lastChange = performance.now(); }

  setupControls() {
    const c = this.canvas;
    let last = null;
    c.addEventListener("contextmenu", (e) => e.preventDefault());
    c.addEventListener("pointerdown", (e) => { last = [e.clientX, e.clientY, e.button === 2 || e.shiftKey]; c.setPointerCapture(e.pointerId); });
    c.addEventListener("pointerup", () => { last = null; });
    c.addEventListener("pointermove", (e) => {
      if (!last) return;
      const dx = e.clientX - last[0], dy = e.clientY - last[1];
      if (last[2]) this.pan(dx * this.width / c.clientWidth, dy * this.height / c.clientHeight);
      else this.orbit(dx * 0.005, dy * 0.005);
      last = [e.clientX, e.clientY, last[2]];
    });
    c.addEventListener("wheel", (e) => { e.preventDefault(); this.zoom(Math.exp(e.deltaY * 0.001)); }, {passive: false});
  }

  // ---- sorting (in the worker, one request at a time, always for the newest view) and drawing
  motionLimit() { return Math.max(MIN_MOTION_GAUSSIANS, Math.round(this.quality * this.count)); }

  requestSort(moving) {
    const limit = moving ? this.motionLimit() : this.count;
    if (this.sortBusy || (this.sortedVersion === this.viewVersion && this.sortedLimit === limit)) return;
    this.sortBusy = true;
    const v = this.viewmat();
    this.worker.postMessage({view: [v[8], v[9], v[10], v[11]], eye: this.eye, limit, version: this.viewVersion});
  }

  onSorted(msg) {
    const gl = this.gl;
    this.order.set(msg.indices);
    gl.activeTexture(gl.TEXTURE1);
    const rows = Math.max(1, Math.ceil(msg.count / TEX_WIDTH));
    gl.texSubImage2D(gl.TEXTURE_2D, 0, 0, 0, TEX_WIDTH, rows, gl.RED_INTEGER, gl.UNSIGNED_INT, this.order);
    if (msg.colors) {
      this.colors.set(msg.colors);
      gl.activeTexture(gl.TEXTURE2);
      gl.texSubImage2D(gl.TEXTURE_2D, 0, 0, 0, TEX_WIDTH, rows, gl.RGBA, gl.FLOAT, this.colors);
    }
    this.instances = msg.count;
    this.sortedVersion = msg.version;
    this.sortedLimit = msg.limit;
    this.sortMs = msg.ms;
    this.sortBusy = false;
  }

  frame(force = false, moving = null) {
    // draws when the view, the order or the resolution changed since the last frame drawn; a view drawn
    // whole stays as drawn (the motion quality may still drop within the settle window: nothing better)
    this.timeMotionFrame();
    if (!force && this.drawnVersion === this.viewVersion) return;
    const now = performance.now();
    if (moving === null) moving = this.inMotion(now);
    this.requestSort(moving);
    const quality = moving ? this.quality : 1, scale = Math.sqrt(quality);
    const version = this.viewVersion, key = `${version}/${this.sortedVersion}/${this.sortedLimit}/${scale}`;
    if (!force && key === this.drawnKey) return;
    const gl = this.gl, w = Math.max(1, Math.round(this.width * scale)), h = Math.max(1, Math.round(this.height * scale));
    this.draw(w, h);
    if (moving && !this.fence) {
      this.fence = {sync: gl.fenceSync(gl.SYNC_GPU_COMMANDS_COMPLETE, 0), t0: now, quality};
      gl.flush();
    }
    this.drawnKey = key;
    const complete = this.sortedVersion === version && this.sortedLimit >= this.count && scale === 1;
    this.drawnVersion = complete ? version : -1;
    this.frames++;
  }

  inMotion(now = performance.now()) {  // within the settle window after the last change of the view
    return now - this.lastChange < Math.max(SETTLE_MS, 3 * this.motionFrameMs);
  }

  draw(w, h) {  // the sorted Gaussians at w x h pixels, front to back in chunks, then onto the canvas
    const gl = this.gl, v = this.viewmat(), n = this.instances;
    gl.useProgram(this.splat);
    gl.uniformMatrix4fv(this.uniforms.u_view, false, [v[0], v[4], v[8], v[12], v[1], v[5], v[9], v[13],
                                                       v[2], v[6], v[10], v[14], v[3], v[7], v[11], v[15]]);
    gl.uniform4fv(this.uniforms.u_intr, this.intr.map((x) => x * w / this.width));
    gl.uniform2f(this.uniforms.u_size, w, h);
    gl.uniform1i(this.uniforms.u_count, n);
    gl.uniform1i(this.uniforms.u_cull, 0);
    gl.clearColor(0, 0, 0, 0);
    for (const fb of this.opaqueBuffers) {  // nothing opaque yet (texels beyond this frame's size stay so)
      gl.bindFramebuffer(gl.FRAMEBUFFER, fb);
      gl.clear(gl.COLOR_BUFFER_BIT);
    }
    gl.bindFramebuffer(gl.FRAMEBUFFER, this.frameBuffer);
    gl.viewport(0, 0, w, h);
    gl.clear(gl.COLOR_BUFFER_BIT);
    gl.enable(gl.BLEND);
    gl.blendFunc(gl.ONE_MINUS_DST_ALPHA, gl.ONE);  // premultiplied colour, near to far ("under")
    for (let start = 0, chunk = FIRST_CHUNK; start < n; start += chunk, chunk *= 2) {
      const count = Math.min(chunk, n - start);
      gl.drawElements(gl.TRIANGLES, 6 * count, gl.UNSIGNED_INT, 24 * start);
      if (this.occlusion && start + count < n) {
        this.findOpaque(w, h);
        gl.bindFramebuffer(gl.FRAMEBUFFER, this.frameBuffer);
        gl.viewport(0, 0, w, h);
        gl.enable(gl.BLEND);
        gl.useProgram(this.splat);
        gl.uniform1i(this.uniforms.u_cull, 1);
      }
    }
    gl.disable(gl.BLEND);
    gl.bindFramebuffer(gl.READ_FRAMEBUFFER, this.frameBuffer);
    gl.bindFramebuffer(gl.DRAW_FRAMEBUFFER, null);
    gl.blitFramebuffer(0, 0, w, h, 0, 0, this.width, this.height, gl.COLOR_BUFFER_BIT,
                       w === this.width && h === this.height ? gl.NEAREST : gl.LINEAR);
    gl.bindFramebuffer(gl.FRAMEBUFFER, null);
  }

  findOpaque(w, h) {  // the opaque pyramid of the frame drawn so far (w x h pixels)
    const gl = this.gl;
    gl.disable(gl.BLEND);
    gl.useProgram(this.reduce);
    gl.activeTexture(gl.TEXTURE4);
    for (let l = 0; l < this.opaqueLevels; l++) {
      gl.uniform1i(this.reduceUniforms.u_alpha, l === 0 ? 1 : 0);
      gl.uniform1i(this.reduceUniforms.u_src, l === 0 ? 3 : 4);
      if (l > 0) {  // read level l - 1 only, while writing level l
        gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_BASE_LEVEL, l - 1);
        gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MAX_LEVEL, l - 1);
      }
      gl.bindFramebuffer(gl.FRAMEBUFFER, this.opaqueBuffers[l]);
      gl.viewport(0, 0, Math.ceil(w / 2 ** (l + 1)), Math.ceil(h / 2 ** (l + 1)));
      gl.drawArrays(gl.TRIANGLES, 0, 3);
    }
    gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_BASE_LEVEL, 0);
    gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MAX_LEVEL, this.opaqueLevels - 1);
  }

  timeMotionFrame() {  // once a timed moving frame has finished, fit the motion quality to its time
    const gl = this.gl, f = this.fence;
    if (!f) return;
    const state = gl.clientWaitSync(f.sync, 0, 0);
    if (state !== gl.ALREADY_SIGNALED && state !== gl.CONDITION_SATISFIED) return;
    const ms = this.motionFrameMs = Math.max(performance.now() - f.t0, 1);
    this.quality = Math.min(1, Math.max(MIN_QUALITY, f.quality * Math.sqrt(MOTION_FRAME_MS / ms)));
    gl.deleteSync(f.sync);
    this.fence = null;
  }

  // ---- for tests and benchmarks
  settled() {  // resolves once the current view is drawn in its own depth order
    return new Promise((resolve) => {
      const check = () => (this.drawnVersion === this.viewVersion ? resolve(true) : requestAnimationFrame(check));
      check();
    });
  }

  async benchmark(frames, seconds = 60, moving = false, radiansPerFrame = 0.01) {
    // frames per second while orbiting (each frame finished), over `frames` frames or `seconds` if sooner;
    // moving: at the adaptive motion quality, else at full quality
    const gl = this.gl, pixel = new Uint8Array(4);
    this.paused = true;
    const start = performance.now();
    let i = 0;
    for (; i < frames && performance.now() - start < 1000 * seconds; i++) {
      this.orbit(radiansPerFrame, 0);
      this.frame(true, moving);
      gl.readPixels(0, 0, 1, 1, gl.RGBA, gl.UNSIGNED_BYTE, pixel);  // wait for the frame to finish
      await new Promise((r) => requestAnimationFrame(r));
    }
    this.paused = false;
    return {fps: i / ((performance.now() - start) / 1000), frames: i, sortMs: this.sortMs, drawn: this.instances,
            quality: moving ? this.quality : 1};
  }
}

async function start() {
  const info = await (await fetch("model.json")).json();
  const buffer = await (await fetch("model.bin")).arrayBuffer();
  const viewer = new Viewer(document.getElementById("canvas"), info, buffer);
  const list = document.getElementById("cameras");
  info.cameras.forEach((c, i) => {
    const b = document.createElement("button");
    b.id = `cam-${i}`;
    b.dataset.cam = i;
    b.textContent = `camera ${i}${c.heldout ? " (held out)" : ""}`;
    b.addEventListener("click", () => viewer.setCamera(i));
    list.appendChild(b);
  });
  if (!info.cameras.length) list.textContent = "none (give --scene)";
  document.getElementById("info").textContent =
    `${info.source}: ${info.count.toLocaleString()} Gaussians` + (info.sh_degree ? ` (SH degree ${info.sh_degree})` : "")
    + `, ${viewer.width} x ${viewer.height}`;
  let frames = 0, t = performance.now();
  setInterval(() => {
    const now = performance.now();
    const drawn = viewer.frames - frames;  // frames are drawn only when something changed
    document.getElementById("fps").textContent = (drawn ? `${(drawn * 1000 / (now - t)).toFixed(1)} frames/s` : "still")
      + `, last sort ${viewer.sortMs.toFixed(0)} ms`;
    frames = viewer.frames; t = now;
  }, 1000);
  window.viewer = viewer;
}

start().catch((err) => {
  document.getElementById("info").textContent = `error: ${err.message}`;
  window.viewerError = String(err.message || err);
});
