"""The simulator: distributed training on many virtual GPUs with the runtime's own planning and
firing code and a SimPy clock (``simulate``; ``simulate.run(config.SimulateConfig)`` is ``pregel
simulate``), and a cost model with its measured profiles (``costmodel``, ``profiles/*.json``).

May import every other part of ``odin_sched``, ``pregel`` and ``kernels``.
"""
