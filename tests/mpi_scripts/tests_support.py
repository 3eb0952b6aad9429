"""Settings shared by the exactness test of the distributed trainer and the MPI script it launches."""
from odin_sched.training.densify import DensifyConfig


def densify_config(case: dict):
    """The densification of a test case: every 3 batches from batch 3, low threshold (so it happens)."""
    if not case["densify"]:
        return None
    return DensifyConfig(interval=3, start=3, stop=case["steps"], grad_threshold=1e-5)
