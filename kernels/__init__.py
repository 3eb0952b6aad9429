"""Numba compute kernels for Pregel-MPI.

Every kernel comes in three versions with the same arguments:

* a Numba CPU version (``@njit``),
* a Numba CUDA version (``numba.cuda.jit``; the graph kernels' are in ``kernels.graph_cuda``, the
  splatting stages' in ``kernels.splat.cuda_kernels``, the optimizer's in ``kernels.adam_cuda``, which the
  dispatch functions import only for device arrays, so CPU runs never load ``numba.cuda``),
* a reference twin in plain NumPy or torch, named with a leading underscore, that tests compare with.

A single public dispatch function per kernel picks the CUDA version for device arrays (anything that
exposes ``__cuda_array_interface__``) and the CPU version otherwise. The exceptions run on the CPU
only: ``gather_reduce_sent``, ``sent_edges`` and ``sent_positions`` (the gather of a superstep in
which only some vertices send; the GPU path masks its dense gather instead), ``kernels.by_column``
(the edges of a small front), ``kernels.local_components`` and ``attention_gather``. This package
imports nothing from ``pregel``, ``vertex_programs`` or ``odin_sched``.
"""

from kernels._numba_start import start as start_numba

start_numba()

from kernels.gather import gather_reduce  # noqa: E402
from kernels.scatter import scatter_reduce  # noqa: E402
from kernels.segment_softmax import segment_softmax  # noqa: E402

__all__ = ["gather_reduce", "scatter_reduce", "segment_softmax"]
