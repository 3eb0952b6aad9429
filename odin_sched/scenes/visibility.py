"""Conservative prediction of the cells a camera can see during a window of optimizer steps.

The Odin scheduler plans a window of W batches ahead: for every training camera it needs the cells
whose Gaussians could be visible (radius > 0 in ``kernels.splat``) at any step of the window. The
prediction must be conservative: a cell holding a Gaussian that is visible at some step must be
predicted. The argument:

1. Culling rule (``kernels.splat.scalar_math.project_gaussian``). With camera coordinates
   (x, y, z) = R p + t of the mean p, a Gaussian is culled unless z > NEAR_PLANE and its screen
   square meets the image: u + r > 0, u - r < width, v + r > 0, v - r < height, where
   u = fx x / z + cx, v = fy y / z + cy (the mean itself is not clamped) and
   r = ceil(RADIUS_SIGMAS sqrt(lambda_max(J Sigma J^T + EPS_2D I))). The Jacobian
   J = [[fx/z, 0, -fx u'/z], [0, fy/z, -fy v'/z]] uses u' = x/z clamped to ``clip_limits`` (and v'
   likewise), so |u'| <= tmax_x = max(|lo_x|, |hi_x|), |v'| <= tmax_y.

2. Radius bound. Sigma = Rot diag(s^2) Rot^T in camera axes has eigenvalues <= sigma_max^2, so
   lambda_max(J Sigma J^T) <= ||J||_2^2 sigma_max^2 = lambda_max(J J^T) sigma_max^2, where
   z^2 J J^T = [[P, Q], [Q, S]] with P = fx^2 (1 + u'^2), S = fy^2 (1 + v'^2), Q = fx fy u' v'.
   lambda_max = (P + S)/2 + sqrt(((P - S)/2)^2 + Q^2) does not decrease as P, S or |Q| grow, so
   ||J||_2^2 <= kappa / z^2 with kappa = lambda_max([[fx^2 (1 + tmax_x^2), fx fy tmax_x tmax_y],
   [fx fy tmax_x tmax_y, fy^2 (1 + tmax_y^2)]]) (tighter than the Frobenius norm P + S, up to a factor
   sqrt(2) on the radius). With sqrt(a + b) <= sqrt(a) + sqrt(b) and the ceiling adding less than 1:
   r <= A / z + b,  A = RADIUS_SIGMAS sigma_max sqrt(kappa),
   b = RADIUS_SIGMAS sqrt(EPS_2D) + 1. For floating-point rounding A gets a relative slack
   (RELATIVE_SLACK) and b one more pixel (PIXEL_SLACK).

3. Half-spaces. Multiplying by z > 0, "u + r > 0" implies fx x + (cx + b) z + A > 0, and
   "u - r < width" implies -fx x + (width - cx + b) z + A > 0; likewise for y with fy, cy, height;
   and z - NEAR_PLANE > 0. These five conditions n . (R p + t) + d > 0 are linear in the world point
   p: (R^T n) . p + (n . t + d) > 0. A Gaussian whose mean lies in a box (centre c, half-extent e)
   can be visible only if every half-space meets the box, i.e. w . c + |w| . e + d' > 0 for each
   plane (w = R^T n, d' = n . t + d). The test runs over cells x cameras at once, plane by plane.

4. Motion in a window. Visible Adam moves each coordinate of a parameter by at most
   lr * |m_hat| / (sqrt(v_hat) + eps) <= lr * adam_step_bound(beta1, beta2) per step, and a Gaussian
   takes at most one step per batch, so within W batches a mean moves at most
   sqrt(3) W c lr_means (Euclidean) and a log-scale grows at most W c lr_scales (``window_margin``).
   A mean that starts in a cell's box and moves at most m lies in the box plus a ball of radius m,
   over which the largest value of w . p + d' is w . c + |w| . e + m ||w|| + d'; and its sigma_max
   grows at most by the factor exp(log-scale margin). This covers every Gaussian that stays within
   the margin; quaternions and opacities do not enter the radius bound. ``motion_within_margin``
   checks the premise afterwards. Boxes also grow by FLOAT32_SLACK times their coordinates (a few float32 roundings of a mean), and
   a plane test accepts values down to -PLANE_TOLERANCE times the size of its terms (float64 sums).

The step bound (``adam_step_bound``). torch's Adam after t steps from zero state has
m_t = (1-b1) sum_{k<t} b1^k g_{t-k}, v_t = (1-b2) sum_{k<t} b2^k g_{t-k}^2 and the update
lr m_t / (1 - b1^t) / (sqrt(v_t / (1 - b2^t)) + eps). Writing b1^k g = (b1 / sqrt(b2))^k sqrt(b2)^k g,
Cauchy-Schwarz gives |m_t| <= (1-b1) sqrt(S_t) sqrt(v_t / (1-b2)), S_t = sum_{k<t} q^k, q = b1^2/b2,
so |update| / lr <= f(t) = (1-b1)/(1-b1^t) * sqrt((1-b2^t)(1-q^t) / ((1-b2)(1-q))) (eps only makes
steps smaller). Equality holds for g_j proportional to (b2/b1)^j, so f(t) is attained and the bound
is the supremum of f over t, finite when q < 1 (b1^2 < b2). Its limit is
L = (1-b1) / sqrt((1-b2)(1-q)) (about 7.27 for (0.9, 0.999)), not Kingma & Ba's typical
(1-b1)/sqrt(1-b2) (3.16). f(t) is evaluated for t <= T; for t > T, f(t) <= L / (1 - b1^T) because
both factors under the square root are below 1, so max(max_{t<=T} f(t), L / (1 - b1^T)) bounds the
supremum from above, and exceeds it by at most a relative b1^T (below 1e-12 for usual betas).
"""
import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from kernels.splat.constants import EPS_2D, NEAR_PLANE, RADIUS_SIGMAS
from kernels.splat.scalar_math import clip_limits
from odin_sched.scenes.cells import CellBounds

PIXEL_SLACK = 1.0        # extra pixels on the radius bound for rounding
RELATIVE_SLACK = 1e-4    # relative slack on the A / z term of the radius bound
FLOAT32_SLACK = 2.0 ** -22  # boxes also grow by this times their coordinates: float32 means are rounded
PLANE_TOLERANCE = 1e-9   # a plane test passes at values above -this times the size of its terms
TAIL = 1e-12             # adam_step_bound evaluates f(t) until b1^t is below this ...
MAX_STEPS = 10 ** 6      # ... or up to this many steps


def _one_minus_power(base: float, t: np.ndarray) -> np.ndarray:
    """1 - base^t without cancellation (0 < base < 1)."""
    return -np.expm1(t * math.log(base))


def adam_step_bound(beta1: float, beta2: float) -> float:
    """Largest |update| / lr of one torch Adam step over all gradient sequences (see module docstring).

    Requires 0 <= beta1 < 1, 0 < beta2 < 1 and beta1^2 < beta2 (otherwise there is no bound).
    """
    if not (0.0 <= beta1 < 1.0 and 0.0 < beta2 < 1.0 and beta1 * beta1 < beta2):
        raise ValueError(f"betas ({beta1}, {beta2}): need 0 <= beta1 < 1, 0 < beta2 < 1 and beta1^2 < beta2")
    q = beta1 * beta1 / beta2
    limit = (1.0 - beta1) / math.sqrt((1.0 - beta2) * (1.0 - q))
    if beta1 == 0.0:
        return limit  # m_hat = g: f(t) = sqrt((1 - b2^t) / (1 - b2)) increases towards the limit
    horizon = min(MAX_STEPS, math.ceil(math.log(TAIL) / math.log(beta1)))
    t = np.arange(1, horizon + 1, dtype=np.float64)
    f = ((1.0 - beta1) / _one_minus_power(beta1, t)
         * np.sqrt(_one_minus_power(beta2, t) * _one_minus_power(q, t) / ((1.0 - beta2) * (1.0 - q))))
    tail = limit / (1.0 - beta1 ** horizon)
    return float(max(f.max(), tail))


@dataclass(frozen=True)
class Margin:
    """How far Gaussians may drift within a window: the Euclidean move of a mean (world units) and
    the growth of any log-scale coordinate."""

    means: float
    log_scale: float


def window_margin(lr_means: float, lr_scales: float, betas: tuple, batches: int, safety: float = 1.0) -> Margin:
    """The motion margin of a window of ``batches`` optimizer steps.

    lr_means: the largest means learning rate in the window; lr_scales: the log-scales' rate;
    betas: the Adam betas of one step (batched betas when steps are batches); safety: a factor the
    scheduler may raise after a violation. means = safety sqrt(3) W c lr_means, log_scale =
    safety W c lr_scales with c = adam_step_bound(*betas).
    """
    if batches < 0 or lr_means < 0 or lr_scales < 0 or safety < 0:
        raise ValueError("window_margin: learning rates, batches and safety must be non-negative")
    steps = safety * batches * adam_step_bound(*betas)
    return Margin(means=math.sqrt(3.0) * steps * lr_means, log_scale=steps * lr_scales)


def _camera_planes(viewmats: np.ndarray, Ks: np.ndarray, width: int, height: int):
    """World half-spaces of every camera: normals w [C, 5, 3], offsets d [C, 5], the radius
    coefficient kappa^(1/2) [C]; plane i holds where w . p + d + (A if i < 4 else 0) > 0."""
    rot = viewmats[:, :3, :3].astype(np.float64)
    trans = viewmats[:, :3, 3].astype(np.float64)
    Ks = Ks.astype(np.float64)
    fx, fy, cx, cy = Ks[:, 0, 0], Ks[:, 1, 1], Ks[:, 0, 2], Ks[:, 1, 2]
    tmax_x = np.maximum(*np.abs(clip_limits(fx, cx, float(width))))
    tmax_y = np.maximum(*np.abs(clip_limits(fy, cy, float(height))))
    p, r, q = fx ** 2 * (1.0 + tmax_x ** 2), fy ** 2 * (1.0 + tmax_y ** 2), fx * fy * tmax_x * tmax_y
    sqrt_kappa = np.sqrt(0.5 * (p + r) + np.sqrt(0.25 * (p - r) ** 2 + q ** 2))  # sqrt(lambda_max)
    b = RADIUS_SIGMAS * math.sqrt(EPS_2D) + 1.0 + PIXEL_SLACK
    zero, one = np.zeros_like(fx), np.ones_like(fx)
    normals = np.stack([  # camera-space normals [C, 5, 3]
        np.stack([fx, zero, cx + b], axis=1),
        np.stack([-fx, zero, width - cx + b], axis=1),
        np.stack([zero, fy, cy + b], axis=1),
        np.stack([zero, -fy, height - cy + b], axis=1),
        np.stack([zero, zero, one], axis=1),
    ], axis=1)
    world_normals = np.einsum("cij,cpi->cpj", rot, normals)  # R^T n
    offsets = np.einsum("cpi,ci->cp", normals, trans)
    offsets[:, 4] -= NEAR_PLANE
    return world_normals, offsets, sqrt_kappa


def predict_visible_cells(bounds: CellBounds, viewmats: np.ndarray, Ks: np.ndarray, width: int, height: int,
                          margin: Margin) -> np.ndarray:
    """Cells that could be visible in each camera while every Gaussian stays within ``margin``.

    viewmats: np.ndarray  # [C, 4, 4] world-to-camera
    Ks: np.ndarray        # [C, 3, 3] pinhole intrinsics
    Returns np.ndarray    # [C, K] bool, True where the cell may hold a Gaussian with radius > 0
    Empty cells are never visible. A Numba kernel (``_plane_tests``); ``predict_visible_cells_numpy``
    is its NumPy twin.
    """
    terms = _visibility_terms(bounds, viewmats, Ks, width, height, margin)
    out = np.empty((len(terms[0]), len(terms[3])), bool)
    _plane_tests(*terms, bounds.count > 0, float(margin.means), out)
    return out


def predict_visible_cells_numpy(bounds: CellBounds, viewmats: np.ndarray, Ks: np.ndarray, width: int, height: int,
                                margin: Margin) -> np.ndarray:
    """``predict_visible_cells`` in NumPy, [C, K] arrays per plane (the kernel's twin)."""
    normals, offsets, sqrt_kappa, centre, half, magnitude, sigma = _visibility_terms(bounds, viewmats, Ks, width,
                                                                                     height, margin)
    radius_term = (RADIUS_SIGMAS * (1.0 + RELATIVE_SLACK)) * np.outer(sqrt_kappa, sigma)  # A [C, K]
    visible = np.broadcast_to(bounds.count > 0, radius_term.shape).copy()
    for plane in range(5):
        w, d = normals[:, plane], offsets[:, plane, None]
        extra = radius_term if plane < 4 else 0.0
        reach = margin.means * np.linalg.norm(w, axis=1)[:, None]  # the ball of the margin
        best = w @ centre.T + np.abs(w) @ half.T + reach + d + extra  # largest value over box + ball [C, K]
        size = np.abs(w) @ magnitude.T + np.abs(d) + extra
        visible &= best > -PLANE_TOLERANCE * size
    return visible


def _visibility_terms(bounds: CellBounds, viewmats, Ks, width: int, height: int, margin: Margin) -> tuple:
    """(normals [C, 5, 3], offsets [C, 5], kappa^(1/2) [C], box centres, half sizes and coordinate
    magnitudes (box + margin) [K, 3], grown sigma [K]) of the plane tests, float64."""
    viewmats, Ks = np.asarray(viewmats), np.asarray(Ks)
    if viewmats.ndim != 3 or viewmats.shape[1:] != (4, 4) or Ks.shape != (viewmats.shape[0], 3, 3):
        raise ValueError(f"viewmats must be [C, 4, 4] and Ks [C, 3, 3], got {list(viewmats.shape)} "
                         f"and {list(Ks.shape)}")
    normals, offsets, sqrt_kappa = _camera_planes(viewmats, Ks, width, height)
    centre = 0.5 * (bounds.lo + bounds.hi)
    half = 0.5 * (bounds.hi - bounds.lo) + FLOAT32_SLACK * np.maximum(np.abs(bounds.lo), np.abs(bounds.hi))
    sigma = bounds.max_sigma * math.exp(margin.log_scale)
    magnitude = np.abs(centre) + half + margin.means
    return (normals, offsets, sqrt_kappa, *(np.ascontiguousarray(x, np.float64) for x in (centre, half, magnitude)),
            np.ascontiguousarray(sigma, np.float64))


@njit(cache=True)
def _plane_tests(normals, offsets, sqrt_kappa, centre, half, magnitude, sigma, full, reach_margin, out):
    """out[c, k] = whether cell k passes camera c's five plane tests (``predict_visible_cells_numpy``'s
    sums, term by term in its order; cells not ``full`` fail). normals [C, 5, 3], offsets [C, 5],
    sqrt_kappa [C]; centre, half, magnitude [K, 3]; sigma [K]; full [K] bool; out [C, K] bool."""
    scale = RADIUS_SIGMAS * (1.0 + RELATIVE_SLACK)
    reach = np.empty(5)
    for c in range(normals.shape[0]):
        for p in range(5):
            w0, w1, w2 = normals[c, p, 0], normals[c, p, 1], normals[c, p, 2]
            reach[p] = reach_margin * np.sqrt(w0 * w0 + w1 * w1 + w2 * w2)
        for k in range(centre.shape[0]):
            ok = full[k]
            extra = scale * (sqrt_kappa[c] * sigma[k])
            p = 0
            while ok and p < 5:
                w0, w1, w2, d = normals[c, p, 0], normals[c, p, 1], normals[c, p, 2], offsets[c, p]
                e = extra if p < 4 else 0.0
                a0, a1, a2 = abs(w0), abs(w1), abs(w2)
                best = ((w0 * centre[k, 0] + w1 * centre[k, 1] + w2 * centre[k, 2])
                        + (a0 * half[k, 0] + a1 * half[k, 1] + a2 * half[k, 2]) + reach[p] + d + e)
                size = (a0 * magnitude[k, 0] + a1 * magnitude[k, 1] + a2 * magnitude[k, 2]) + abs(d) + e
                ok = best > -PLANE_TOLERANCE * size
                p += 1
            out[c, k] = ok


def motion_within_margin(start_means: np.ndarray, start_log_scales: np.ndarray, end_means: np.ndarray,
                         end_log_scales: np.ndarray, margin: Margin) -> np.ndarray:
    """Gaussians whose motion stayed inside the margin.

    start_means, end_means: np.ndarray            # [G, 3]
    start_log_scales, end_log_scales: np.ndarray  # [G, 3]
    Returns np.ndarray  # [G] bool: ||end - start|| <= margin.means and every log-scale grew by at
    most margin.log_scale (computed in float64)
    """
    step = np.subtract(end_means, start_means, dtype=np.float64)
    step *= step
    move = np.sqrt(step[:, 0] + step[:, 1] + step[:, 2])  # the Euclidean norm, summed in column order
    growth = np.subtract(end_log_scales, start_log_scales, dtype=np.float64)
    growth = np.maximum(np.maximum(growth[:, 0], growth[:, 1]), growth[:, 2])
    return (move <= margin.means) & (growth <= margin.log_scale)
