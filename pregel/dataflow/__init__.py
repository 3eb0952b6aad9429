"""Dataflow execution of a DAG: every vertex fires once, as soon as all its inputs have arrived.

A ``DataflowProgram`` says what each vertex sends and computes; a ``DataflowPlan`` says on which rank each
vertex fires and in which order; ``run_dataflow`` runs it collectively on every rank, in dataflow mode (a rank
fires what is ready and waits only for the messages it needs) or in BSP mode (phase by phase, with a barrier and
an Alltoallv after each). The modules, each importing only those above it:

- ``plan``: what a run takes and gives back: ``DataflowProgram``, ``DataflowPlan`` (``depth_phases``: the
  phases of BSP mode), ``DataflowContext``, ``DataflowResult`` and its ``Span``s;
- ``routes``: the plan's deliveries as NumPy tables (``Routes``): one message per vertex and destination rank;
- ``firing``: one rank's execution policy, whatever carries the messages (``Firing``): the ready queue, the
  sequence gate, each fire's inputs and the routing of its outputs; the simulator drives it too;
- ``runtime``: ``run_dataflow``, the MPI transport that drives each rank's ``Firing`` in either mode;
- ``trace``: ``write_chrome_trace``, a traced run's spans as a Chrome trace.

Their public names are imported here (``from pregel.dataflow import run_dataflow``).
"""

from pregel.dataflow.firing import Firing
from pregel.dataflow.plan import DataflowContext, DataflowPlan, DataflowProgram, DataflowResult, Span, depth_phases
from pregel.dataflow.routes import Routes
from pregel.dataflow.runtime import run_dataflow
from pregel.dataflow.trace import write_chrome_trace

__all__ = ["DataflowContext", "DataflowPlan", "DataflowProgram", "DataflowResult", "Firing", "Routes", "Span",
           "depth_phases", "run_dataflow", "write_chrome_trace"]
