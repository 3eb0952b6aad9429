"""One rank = one GPU: each rank's node-local rank and the GPU it drives.

Ranks on one node take the node's visible GPUs round-robin by node-local rank, so with more ranks
than GPUs several ranks share one. Nothing here imports ``numba.cuda`` until a GPU is asked for.
"""

import socket

from pregel.comm import Comm
from pregel.errors import InputError


def local_rank(comm: Comm) -> int:
    """This rank's index among the ranks of ``comm`` on its node (0 .. ranks on the node - 1).

    The rank in an ``MPI.COMM_TYPE_SHARED`` split of ``comm`` (the ranks that can share memory),
    ordered like ``comm``'s ranks. Collective.
    """
    if comm.size == 1:
        return 0
    from mpi4py import MPI

    node = comm.mpi.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    try:
        return node.Get_rank()
    finally:
        node.Free()


def visible_gpus() -> int:
    """How many CUDA GPUs this process sees (0 without a driver; 1 under NUMBA_ENABLE_CUDASIM=1)."""
    from numba import cuda

    return len(cuda.gpus) if cuda.is_available() else 0


def select_gpu(comm: Comm) -> int:
    """Make GPU ``local_rank(comm) % visible_gpus()`` Numba's current device; return its index.

    Collective; call it before any other CUDA work of the rank. When any rank sees no GPU, every
    rank raises that rank's ``InputError`` (one line), so the job ends instead of waiting on it.
    """
    local = local_rank(comm)
    count = visible_gpus()
    error = None
    if count == 0:
        error = InputError(f"`device` cuda: rank {comm.rank} on {socket.gethostname()} sees no CUDA GPU "
                           f"(no driver or no device; NUMBA_ENABLE_CUDASIM=1 runs Numba's CPU simulator)")
    comm.agree(error)
    from numba import cuda

    index = local % count
    cuda.select_device(index)
    return index
