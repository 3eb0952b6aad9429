"""The command line maps its flags onto the library's config dataclasses: every field has the flag of
the same name (``batch_size`` <-> ``--batch-size``) with the same default, and a library error that
names a field reaches a command-line user as the flag."""
import dataclasses

import pytest

from odin_sched.odin.options import OdinOptions
from odin_sched.sim.config import SimulateConfig
from odin_sched.training.config import TrainConfig
from pregel.cli import build_parser, main
from pregel.cli.common import as_flags
from pregel.errors import InputError


def _subcommand(name):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return {a.dest: a for a in sub.choices[name]._actions}


@pytest.mark.parametrize("cls,command,no_flag", [
    (TrainConfig, "train", {"densify", "progress", "status"}),  # densify: from the --densify-* flags; status: always
    (OdinOptions, "train", set()),
    (SimulateConfig, "simulate", {"progress"}),  # progress: --quiet
])
def test_every_field_has_its_flag(cls, command, no_flag):
    actions = _subcommand(command)
    for field in dataclasses.fields(cls):
        if field.name in no_flag:
            continue
        assert field.name in actions, f"{cls.__name__}.{field.name} has no flag in pregel {command}"
        flag = "--" + field.name.replace("_", "-")
        assert flag in actions[field.name].option_strings


@pytest.mark.parametrize("cls,command,fields", [
    (TrainConfig, "train", ("batch_size", "seed", "ssim_weight", "eval_every", "ply", "png", "init_ply",
                            "sh_degree", "position_lr_max_steps", "position_lr_init")),
    (OdinOptions, "train", ("max_staleness", "stale_impact", "max_imbalance", "send_thread", "batches_ahead",
                            "hold_share")),
    (SimulateConfig, "simulate", ("layout", "gaussians", "cameras", "width", "height", "steps", "profile",
                                  "cells_per_gpu", "max_staleness", "shared_cores", "seed", "sh_degree",
                                  "host_sends", "batches_ahead", "hold_share")),
])
def test_flag_defaults_are_the_fields_defaults(cls, command, fields):
    actions = _subcommand(command)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    for name in fields:
        assert actions[name].default == defaults[name], name


def test_the_simulator_plans_as_the_runtime_by_default():
    from odin_sched.odin.options import BATCHES_AHEAD, HOLD_SHARE
    from odin_sched.odin.planner import PlanConfig

    assert SimulateConfig("x.h5").batches_ahead == OdinOptions.batches_ahead == BATCHES_AHEAD
    assert PlanConfig(1, 1).batches_ahead == BATCHES_AHEAD
    assert SimulateConfig("x.h5").hold_share == OdinOptions.hold_share == PlanConfig(1, 1).hold_share == HOLD_SHARE


def test_library_errors_name_the_field_and_the_command_line_the_flag(tmp_path, capsys):
    from odin_sched.sim.simulate import run

    with pytest.raises(InputError, match=r"^SimulateConfig\.cells_per_gpu must be at least 1, got 0$"):
        run(SimulateConfig(tmp_path / "x.h5", gpus=(2,), cells_per_gpu=0))
    assert main(["simulate", "--gpus", "2", "--cells-per-gpu", "0", "--out", str(tmp_path / "x.h5")]) == 2
    assert capsys.readouterr().err.strip() == "pregel simulate: error: --cells-per-gpu must be at least 1, got 0"
    assert not (tmp_path / "x.h5").exists()


def test_as_flags():
    assert as_flags("TrainConfig.batch_size 9 is more than the 8 training cameras") == \
        "--batch-size 9 is more than the 8 training cameras"
    assert as_flags("OdinOptions.max_staleness must be at least 0; see TrainConfig.steps") == \
        "--max-staleness must be at least 0; see --steps"
    assert as_flags("scene.h5: /init: no TrainConfigs.x here") == "scene.h5: /init: no TrainConfigs.x here"
    # a function's argument in backquotes, when the command has that flag
    assert as_flags("`orbit_format` mp4 needs `pregel render`", {"orbit_format", "out"}) == \
        "--orbit-format mp4 needs `pregel render`"
    assert as_flags("`orbit` must be non-negative", {"scene"}) == "`orbit` must be non-negative"


def test_each_algorithm_declares_its_options_and_run_has_their_flags():
    import vertex_programs as vp

    actions = _subcommand("run")
    for cls in (vp.PageRank, vp.ShortestPaths, vp.BreadthFirst, vp.WeakComponents):
        for option in cls.options:  # a flag not given is None (the program's default applies), and says the default
            action = actions[option.name]
            assert action.default is None and action.help.endswith(f"(default {option.default})"), option.name
    assert [o.name for o in vp.PageRank.options] == ["alpha", "tol", "max_iter"]
    assert vp.WeakComponents.options == ()


def test_pagerank_checks_its_options_and_summarises_its_result():
    import numpy as np

    from vertex_programs import PageRank

    with pytest.raises(InputError, match=r"^PageRank\.alpha must lie in \[0, 1\], got 1\.5$"):
        PageRank(alpha=1.5)
    with pytest.raises(InputError, match=r"^PageRank\.tol must be a positive number, got nan$"):
        PageRank(tol=float("nan"))
    with pytest.raises(InputError, match=r"^PageRank\.max_iter must be at least 1, got 0$"):
        PageRank(max_iter=0)
    program = PageRank.from_options({"alpha": 0.5, "tol": 1e-3, "max_iter": 7, "source": 3})
    assert (program.alpha, program.tol, program.max_supersteps) == (0.5, 1e-3, 7)
    values = np.array([0.1, 0.3, 0.05, 0.3, 0.15, 0.1])
    assert program.summary(values) == ["top vertices: 1 (0.300000), 3 (0.300000), 4 (0.150000), "
                                       "0 (0.100000), 5 (0.100000)"]
    assert program.warnings("master") == []
    assert as_flags(program.warnings("max_supersteps")[0]) == "PageRank did not converge within --max-iter 7"
