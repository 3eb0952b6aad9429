"""Settings and helpers shared by MPI tests and the scripts they launch (tests/mpi_scripts is on their path)."""
import os

import torch

from odin_sched.training.densify import GradAccumulator, densify_round
from odin_sched.training.densify_schedule import DensifyConfig
from odin_sched.training.optim import VisibleAdam, default_lrs


def densify_config(case: dict):
    """The densification of a test case: every 3 batches from batch 3, low threshold (so it happens), and the
    opacities reset every ``case["opacity_reset"]`` images when the case says so."""
    if not case["densify"]:
        return None
    reset = {"opacity_reset_interval": case["opacity_reset"]} if "opacity_reset" in case else {}
    return DensifyConfig(interval=3, start=3, stop=case["steps"], grad_threshold=1e-5, **reset)


def exit_with_collective_error(comm, err) -> None:
    """An MPI script's end on a collective InputError (raised on every rank): print it as "rank R:
    MESSAGE", wait until every rank has printed, exit with status 2."""
    os.write(1, f"rank {comm.rank}: {err}\n".encode())  # one write, so mpiexec never splits or joins it
    comm.barrier()
    raise SystemExit(2)


def the_error_of_every_rank(stdout: str, size: int) -> str:
    """The one message that every rank of a job of ``size`` printed with ``exit_with_collective_error``
    (asserting that each rank printed it once and that they agree)."""
    lines = sorted(line for line in stdout.splitlines() if line.startswith("rank "))
    assert [line.split(":")[0] for line in lines] == [f"rank {r}" for r in range(size)], stdout
    messages = {line.split(": ", 1)[1] for line in lines}
    assert len(messages) == 1, messages
    return messages.pop()


def densified_model(g: int) -> tuple:
    """(VisibleAdam, GradAccumulator) of ``g`` random Gaussians (SH degree 1) after an Adam step on about
    70 % of them and a densification round (so ids are no longer rows), with fresh statistics."""
    gen = torch.Generator().manual_seed(0)
    params = {"means": torch.randn(g, 3, generator=gen), "scales": torch.randn(g, 3, generator=gen) - 3,
              "quats": torch.randn(g, 4, generator=gen), "opacities": torch.randn(g, generator=gen) + 2,
              "sh0": torch.randn(g, 1, 3, generator=gen), "shN": torch.randn(g, 3, 3, generator=gen)}
    opt, accum = VisibleAdam(params, default_lrs(1.0)), GradAccumulator(g)
    for p in opt.params.values():
        p.grad = torch.randn(p.shape, generator=gen)
    opt.step(torch.rand(g, generator=gen) < 0.7)
    accum.add(torch.rand(g, generator=gen), torch.ones(g, dtype=torch.bool), torch.full((g,), 3))
    config = DensifyConfig(interval=1, start=0, stop=10, grad_threshold=0.5, percent_dense=0.05)
    accum = densify_round(opt, accum, 1, 10, 1, 1.0, config, 3)
    accum.add(torch.rand(opt.num_gaussians, generator=gen), torch.ones(opt.num_gaussians, dtype=torch.bool),
              torch.full((opt.num_gaussians,), 2))
    return opt, accum
