"""When and how much to densify: ``DensifyConfig`` and the image-counting schedule it is read by
(``odin_sched.training.densify`` has the densification itself). Plain Python, no torch: the command line
reads the defaults from here."""
import math
from dataclasses import dataclass


def first_image(step: int, batch_size: int) -> int:
    """The 1-based index of the first image of batch ``step`` (the reference's ``iteration``)."""
    return (step - 1) * batch_size + 1


def covers_multiple(step: int, batch_size: int, interval: int) -> bool:
    """Whether batch ``step`` (1-based), images (step - 1) B + 1 .. step B, covers a multiple of
    ``interval`` (Grendel-GS's ``check_update_at_this_iter``; for B = 1: step % interval == 0)."""
    first = first_image(step, batch_size)
    return (first + batch_size - 1) // interval > (first - 1) // interval


@dataclass(frozen=True)
class DensifyConfig:
    """When and how to densify (defaults of the reference 3DGS code; steps counted in images)."""

    interval: int = 100              # densification_interval
    start: int = 500                 # densify_from_iter (first round where image > start)
    stop: int = 15_000               # densify_until_iter (first image after the last round)
    grad_threshold: float = 0.0002   # densify_grad_threshold
    percent_dense: float = 0.01
    min_opacity: float = 0.005
    opacity_reset_interval: int = 3000  # 0: never reset
    max_screen_radius: float = 20.0  # pixels (the reference's size_threshold)
    max_world_fraction: float = 0.1  # x scene extent

    def __post_init__(self):
        """ValueError naming the first field out of range in backquotes (`grad_threshold`)."""
        problems = (
            (self.interval >= 1, f"`interval` must be at least 1, got {self.interval}"),
            (self.start >= 0, f"`start` must be at least 0, got {self.start}"),
            (self.stop >= self.start, f"`stop` must be at least `start` ({self.start}), got {self.stop}"),
            (0 < self.grad_threshold < math.inf, f"`grad_threshold` must be a positive number, got {self.grad_threshold}"),
            (0 < self.percent_dense < math.inf, f"`percent_dense` must be a positive number, got {self.percent_dense}"),
            (0 <= self.min_opacity < 1, f"`min_opacity` must be in [0, 1), got {self.min_opacity}"),
            (self.opacity_reset_interval >= 0,
             f"`opacity_reset_interval` must be at least 0, got {self.opacity_reset_interval}"),
        )
        for holds, message in problems:
            if not holds:
                raise ValueError(message)

    def due(self, step: int, steps: int, batch_size: int = 1) -> bool:
        """Whether to densify after batch ``step`` (1-based) of ``steps``."""
        image = first_image(step, batch_size)
        return (step < steps and self.start < image < self.stop
                and covers_multiple(step, batch_size, self.interval))

    def reset_due(self, step: int, steps: int, batch_size: int = 1) -> bool:
        """Whether to reset the opacities after batch ``step`` (after densifying, when both are due)."""
        return (self.opacity_reset_interval > 0 and step < steps
                and first_image(step, batch_size) < self.stop
                and covers_multiple(step, batch_size, self.opacity_reset_interval))

    def prunes_large(self, step: int, batch_size: int = 1) -> bool:
        """Whether a round after batch ``step`` also prunes Gaussians too large on screen or in the world
        (the reference: once its iteration is past the first opacity reset; without resets, always)."""
        return first_image(step, batch_size) > self.opacity_reset_interval
