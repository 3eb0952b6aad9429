"""The one list of the distributed trainer's modes (``pregel train --mode``, ``pregel simulate``).

* ``odin``: barrier-free; a step waits only for the cells it reads (exact: the single-process result);
* ``barrier``: the same program in the engine's bulk-synchronous mode, a global barrier per batch
  (the synchronous baseline);
* ``odin-fast``: odin where an image may read a low-impact cell a bounded number of updates old.
"""
MODES = ("odin", "barrier", "odin-fast")
