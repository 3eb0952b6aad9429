"""The firing priorities of a planned window (``odin_sched.odin.planner.publish_first``), against a
hand-worked order."""
import numpy as np

from odin_sched.odin.depgraph import build_step_graph
from odin_sched.odin.planner import publish_first


def test_publish_first_fires_versions_then_images_batch_by_batch():
    """Hand-worked: three batches of two cameras, every camera seeing both cells (images 0-5, versions 6-13:
    cell 0's initial and three batch versions, then cell 1's). Given critical paths, the firing order
    (highest priority first) is every version by its path, then the images of batch 0, 1, 2, each batch by
    its path, whatever the paths of the later batches."""
    steps = build_step_graph(np.array([[0, 1], [2, 3], [0, 2]]), np.ones((4, 2), bool))
    assert (steps.num_images, steps.num_versions) == (6, 8)
    path = np.array([1.0, 9.0, 5.0, 2.0, 8.0, 3.0, 0.5, 0.7, 0.2, 0.1, 0.3, 0.6, 0.4, 0.0])
    order = np.argsort(-publish_first(path, steps), kind="stable").tolist()
    assert order == [7, 11, 6, 12, 10, 8, 9, 13, 1, 0, 2, 3, 4, 5]
    # the critical path alone would fire images 1, 4, 2, 5, 3, 0
    assert np.argsort(-path[:6], kind="stable").tolist() == [1, 4, 2, 5, 3, 0]
