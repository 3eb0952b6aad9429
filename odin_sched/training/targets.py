"""The training images as float32 tensors, converted from a scene's uint8 images when first asked for.

``Targets[c]`` is camera c's image [H, W, 3] in [0, 1] on the trainer's device (``torch`` float32 of
the uint8 image over 255, the same numbers whether it is converted alone or with all the others). Both
trainers read their scene's images lazily (``odin_sched.scenes.scene_io.SceneImages``) and call ``keep``
with the cameras of the images they are about to render (the single process: its batch's; a
distributed rank: those of its own images in the window it runs), so they hold only those (an image
asked for outside them, such as a held-out view, is converted, used and not kept): image memory
follows the images rendered at once, not the scene's (at 1280 x 720 every camera's image held as
float32 is 11 MB).
"""
import numpy as np
import torch


class Targets:
    """Camera -> training image [H, W, 3] float32 in [0, 1] on ``device``, from ``images`` ([C, H, W, 3]
    uint8: an array or a ``SceneImages``). ``peak``: the most images held at once."""

    def __init__(self, images, device="cpu"):
        self.images, self.device = images, device
        self.held, self.keeping, self.peak = {}, None, 0

    def __getitem__(self, cam) -> torch.Tensor:
        cam = int(cam)
        image = self.held.get(cam)
        if image is None:
            image = (torch.from_numpy(np.asarray(self.images[cam])).float() / 255.0).to(self.device)
            if self.keeping is None or cam in self.keeping:
                self.held[cam] = image
                self.peak = max(self.peak, len(self.held))
        return image

    def keep(self, cams) -> None:
        """Hold from now on only the images of cameras ``cams`` [k] (dropping the others)."""
        self.keeping = {int(c) for c in cams}
        self.held = {c: image for c, image in self.held.items() if c in self.keeping}

    def on(self, device) -> "Targets":
        """The same images on ``device`` (nothing held yet)."""
        return Targets(self.images, device)
