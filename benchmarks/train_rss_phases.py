"""Where a ``pregel train`` process's resident memory goes: the process's resident set after each
phase of the command, printed by every rank (one process or ``mpiexec -n P``).

Runs ``pregel train ARGS`` in this process with the phases' functions wrapped (nothing else changes):
after the imports of the training path, reading the scene file (and the PLY), the image order's
visibility (the first Numba call: its runtime and cached kernels), the rest of the set-up, the owned
state (the distributed trainer's shard; one process: its optimizer is made inside training), the first
window (distributed), training, writing the outputs. Per phase: ``VmRSS`` and ``VmHWM`` (the peak so
far) of /proc/self/status, its anonymous and file-backed parts (``RssAnon``, ``RssFile``), glibc's
heap in use and free (``mallinfo2``), the bytes of the live torch tensors' storages that the collector
sees (views not counted twice; NumPy arrays are not seen, the collector does not track them) and the
processor seconds so far::

    flock /tmp/heavy.lock timeout 600 mpiexec -n 3 python benchmarks/train_rss_phases.py --scene S.h5 \\
        --init-ply S.ply --steps 12 --batch-size 3 --out /tmp/o.h5 --seed 0 --mode odin --window 4
"""
import ctypes
import gc
import os
import sys
import time

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

_ROWS = []
_LAST = {}


def _status() -> dict:
    with open("/proc/self/status") as f:
        return {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in f)
                if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile")}


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


def _heap() -> tuple:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    m = libc.mallinfo2()
    return m.uordblks + m.hblkhd, m.fordblks


def _live_tensors() -> int:
    """Bytes of the storages of the live torch tensors that the collector sees (a storage counted once)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return 0
    storages = {}
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor):
            try:
                s = obj.untyped_storage()
                storages[s.data_ptr()] = s.nbytes()
            except Exception:  # noqa: BLE001 (sparse or meta tensors)
                pass
    return sum(storages.values())


def mark(phase: str) -> None:
    """Record the process's memory after ``phase``."""
    s = _status()
    used, free = _heap()
    _ROWS.append((phase, s["VmRSS"], s["VmHWM"], s["RssAnon"], s["RssFile"], used, free, _live_tensors(),
                  time.process_time()))


def wrap(module, name: str, phase: str, first_only: bool = False, before: str | None = None):
    """Replace ``module.name`` with a function that marks ``phase`` after each call (or the first), and
    ``before`` (if given) before it."""
    inner = getattr(module, name)

    def wrapped(*args, **kwargs):
        if before is not None:
            mark(before)
        out = inner(*args, **kwargs)
        if not (first_only and _LAST.get(phase)):
            mark(phase)
            _LAST[phase] = True
        return out
    setattr(module, name, wrapped)


def report(rank: int) -> None:
    mb = 1 << 20
    lines = [f"rank {rank}: phase | VmRSS MiB | VmHWM MiB | anon | file | heap used | heap free | torch live "
             f"| processor s"]
    for phase, rss, hwm, anon, file, used, free, tensors, cpu in _ROWS:
        lines.append(f"rank {rank}: {phase} | {rss / mb:.0f} | {hwm / mb:.0f} | {anon / mb:.0f} | {file / mb:.0f} | "
                     f"{used / mb:.0f} | {free / mb:.0f} | {tensors / mb:.1f} | {cpu:.2f}")
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


def main():
    mark("python started")
    import h5py  # noqa: F401
    import mpi4py.MPI  # noqa: F401
    import numba  # noqa: F401
    import torch  # noqa: F401

    import odin_sched.odin.trainer as trainer
    import odin_sched.training.train as train
    from pregel import cli

    mark("imports (torch, numba, h5py, mpi4py, the trainers)")
    wrap(train, "read_scene", "scene file read")
    wrap(train, "GaussianPly", "PLY opened")
    wrap(train, "visible_cells_of_cameras", "image order's visibility (first Numba call)")
    wrap(train, "set_up", "set-up done")
    wrap(trainer, "set_up", "set-up done")
    wrap(train, "new_optimizer", "one process's optimizer")
    original_init = trainer.DistributedTrainer.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        mark("shard (owned state)")
    trainer.DistributedTrainer.__init__ = init
    wrap(trainer.DistributedTrainer, "_run_window", "first window run", first_only=True)
    original_run = trainer.DistributedTrainer.run

    def run(self):
        out = original_run(self)
        mark("training done")
        return out
    trainer.DistributedTrainer.run = run
    wrap(trainer, "write_outputs", "outputs written", before="training done, outputs next")
    wrap(train, "write_outputs", "outputs written", before="training done, outputs next")
    code = cli.main(["train", *sys.argv[1:]])
    mark("end")
    from pregel.comm import world

    report(world().Get_rank())
    return code


if __name__ == "__main__":
    sys.exit(main())
