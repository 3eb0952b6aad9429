"""The torch device and the rasterizer a process renders (and trains) with: the CPU kernels, or this
rank's GPU."""
import functools

import torch

from pregel.errors import InputError


def render_device(device: str, comm=None):
    """(torch device, render) of ``device`` 'cpu' or 'cuda' for the trainers and ``pregel render``.

    'cuda' selects this rank's GPU (``pregel.device.select_gpu`` on ``comm``, collective; default: the
    whole job; one ``InputError`` line on every rank when one sees none) and its torch device. Under
    Numba's CUDA simulator that torch device is the CPU (``pregel.device_path.torch_device``), and
    ``render`` is told to run its CUDA kernels anyway.
    """
    from kernels.splat import render

    if device not in ("cpu", "cuda"):
        raise InputError(f"`device` must be cpu or cuda, got {device!r}")
    if device == "cpu":
        return torch.device("cpu"), render
    from kernels._device import SIMULATED
    from pregel.comm import Comm
    from pregel.device import select_gpu
    from pregel.device_path import torch_device

    index = select_gpu(comm or Comm())
    if not (SIMULATED or torch.cuda.is_available()):
        raise InputError("`device` 'cuda': this torch is a CPU-only build (install a CUDA build of torch)")
    return torch.device(torch_device(index)), functools.partial(render, on_device=True)
