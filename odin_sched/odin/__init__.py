"""Odin: barrier-free distributed training. The dependency graph of a window's steps (``depgraph``),
its schedule computed by vertex programs on the engine (``schedule``), bounded-staleness reads
(``staleness``), the window-end gather and visibility check (``window_end``), host staging of GPU
payloads (``staging``), the list of modes (``modes``) and the trainer: planning, the window's
program, metrics and the run (``trainer``).

May import ``odin_sched.training``, ``odin_sched.scenes``, ``pregel`` and ``kernels``.
"""
