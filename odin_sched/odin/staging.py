"""The trainer's crossing between device tensors and the host arrays that MPI carries."""

import numpy as np
import torch


class HostStaging:
    """Where the trainer's tensors and the host arrays that MPI carries meet: the dataflow transport
    sends NumPy payloads and the window-end gather NumPy rows, so on a GPU every block goes to the
    host right before it is handed over and to the device right after it arrives, here and nowhere
    else. ``bytes_staged`` counts those copies (both directions; 0 on the CPU, where a block handed
    over is a view of the tensor). Payloads to the same rank go through the host too: the
    transport holds NumPy arrays.

    device: the torch device of the trainer's tensors; staged: whether they are device tensors
    (``--device cuda``; under Numba's simulator those are CPU tensors, and the copies count alike).
    """

    def __init__(self, device, staged: bool):
        self.device, self.staged = torch.device(device), staged
        self.bytes_staged = 0

    def to_host(self, block: torch.Tensor) -> np.ndarray:
        """A tensor [rows, ...] as a host array of the same shape (a view of it on the CPU)."""
        self._count(block)
        return block.detach().cpu().numpy()

    def to_device(self, payload: np.ndarray, columns: int) -> torch.Tensor:
        """A received payload (a read-only host view) as a tensor [rows, columns] of its own on the device."""
        block = torch.from_numpy(np.array(payload).reshape(-1, columns))
        self._count(block)
        return block.to(self.device)

    def rows_to_device(self, payload: np.ndarray, rows: np.ndarray) -> torch.Tensor:
        """Rows ``rows`` [k] int64 of a received payload [n, columns] (a read-only host array) as a tensor
        [k, columns] of their own on the device (only those rows are copied)."""
        block = torch.from_numpy(np.asarray(payload).take(rows, axis=0))
        self._count(block)
        return block.to(self.device)

    def _count(self, block: torch.Tensor) -> None:
        if self.staged:
            self.bytes_staged += block.numel() * block.element_size()
