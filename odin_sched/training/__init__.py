"""Single-process Gaussian-splatting training: the settings of a run (``config.TrainConfig``), the
loop and the set-up both trainers share (``train``), the batched step (``step``), visible Adam
(``optim``), densification (``densify``), the order of the training images (``image_order``),
training checkpoints (``checkpoint``) and image metrics (``metrics``).

May import ``odin_sched.scenes``, ``pregel`` and ``kernels``; never the distributed trainer.
"""
