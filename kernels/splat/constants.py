"""Numbers that fix the rasterizer conventions (docs/rasterizer.md).

Shared by the kernels and the torch reference so that both follow exactly the same rules.
"""

TILE_SIZE = 16  # tiles are TILE_SIZE x TILE_SIZE pixels
TILE_PIXELS = TILE_SIZE * TILE_SIZE  # pixels of a tile: the CPU and CUDA raster kernels work a tile at a time
NEAR_PLANE = 0.01  # Gaussians with view depth z <= NEAR_PLANE are culled
EPS_2D = 0.3  # added to the diagonal of the projected 2D covariance
FOV_CLIP = 0.3  # x/z, y/z are clamped this many half-field-of-view tangents outside the image
RADIUS_SIGMAS = 3.0  # radius = ceil(RADIUS_SIGMAS * sqrt(largest eigenvalue of the 2D covariance))
ALPHA_MAX = 0.99  # alpha is clamped to at most this
ALPHA_MIN = 1.0 / 255.0  # a Gaussian with alpha below this is skipped at a pixel
T_MIN = 1e-4  # compositing stops before the transmittance would drop below this
