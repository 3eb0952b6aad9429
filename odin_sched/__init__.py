"""Gaussian splatting on Pregel-MPI, in five subpackages by job; each imports only those above it:

* ``odin_sched.scenes``: scenes and their formats (scene files, generation, COLMAP, PLY, rendering
  views) and their geometry (spatial cells of Gaussians, what a camera can see of them);
* ``odin_sched.training``: single-process training (the loop, the batched step, visible Adam,
  densification, the image order, checkpoints, metrics), and the set-up both trainers share;
* ``odin_sched.odin``: Odin, barrier-free distributed training (the step graph, its schedule,
  staleness, the window's program, the distributed trainer);
* ``odin_sched.sim``: the simulator of distributed training on many GPUs (cost model, profiles);
* ``odin_sched.view``: ``pregel view``, the browser viewer of trained Gaussians and the live training
  dashboard (an HTTP server on 127.0.0.1 and the page's own scripts).

All of them may use ``pregel`` (except ``pregel.cli``) and ``kernels``; none imports
``vertex_programs``. The command line (``pregel/cli/``) calls into them: it picks the trainer.
"""
