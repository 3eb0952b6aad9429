"""The GNN benchmarks' whole-process measurements (benchmarks/gnn_inference.py ``_launch``): every
process of an ``mpiexec`` job reports its peak RSS and processor seconds in a file of its own, so
none is lost when the ranks' output is mixed; the count of reports against the number of ranks; and
each rank's phase table (``phases``) adds up to the job's wall time."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))

import gnn_inference  # noqa: E402  (the benchmark script)


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_every_rank_reports_its_peak_rss(ranks, tmp_path):
    gnn_inference.write_graph_file(str(tmp_path / "graph.h5"), 300, 4.0, 8, 2.5)
    gnn_inference.write_models(str(tmp_path), "sage", [8, 8, 4])
    result = gnn_inference._launch(str(tmp_path), "engine", "sage", ranks)
    assert len(result["rss"]) == ranks
    assert all(rss > 20 << 20 for rss in result["rss"])  # a Python process with numpy and numba loaded
    assert result["cpu"] > 0
    assert sorted(os.listdir(tmp_path)) == ["engine%d.h5" % ranks, "graph.h5", "model.pt", "pyg.pt"]
    assert len(result["phases"]) == ranks
    for row in result["phases"]:
        assert list(row) == list(gnn_inference.PHASES)
        assert sum(row.values()) == pytest.approx(result["wall"], abs=1e-6)
        assert min(row.values()) > -1e-3 and row["imports"] > 0 and row["load"] > 0 and row["layer 1"] > 0
