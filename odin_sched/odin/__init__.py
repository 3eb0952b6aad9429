"""Odin: barrier-free distributed training on a sharded model. The owned state and persistent cells
(``shard``), the cells' metadata exchanged at window ends (``cell_meta``), planning from metadata,
overlapped with training (``planner``), the dependency graph of a window's steps (``depgraph``), its
schedule computed by vertex programs on the engine (``schedule``), bounded-staleness reads
(``staleness``), a window's dataflow program and the held-out evaluation (``program``), the window-end
exchange and visibility check (``window_end``), cell splits and migration (``migration``), each
owner's densification (``owner_densify``), host staging
of GPU payloads (``staging``), the list of modes (``modes``), the trainer's settings and their check
(``options``), a rank's metrics and timeline labels (``rank_record``) and the trainer's run (``trainer``).

May import ``odin_sched.training``, ``odin_sched.scenes``, ``pregel`` and ``kernels``.
"""
