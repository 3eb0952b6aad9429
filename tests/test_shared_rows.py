"""The shared-memory row transfer (pregel/shared_rows.py) and the exchange through it, at P = 2 and 3
under mpiexec (tests/mpi_scripts/shared_rows.py): received rows against a NumPy twin that slices every
sender's rows by its plan, the window's flags and its release of pages, the exchange's ghost rows
against the function of the global ids that made them, Alltoallv where every rank prefers it,
and an error on one rank ending the job."""
import json
import os
import shutil
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "shared_rows.py")
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
TIMEOUT = 120  # seconds; a hang fails the test instead of the suite


def launch(mode, size, folder):
    environment = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    return subprocess.run([MPIEXEC, "-n", str(size), sys.executable, "-m", "mpi4py", SCRIPT, mode, str(folder)],
                          capture_output=True, text=True, timeout=TIMEOUT, env=environment)


def reports(mode, size, folder):
    result = launch(mode, size, folder)
    assert result.returncode == 0, result.stderr
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(size)]


@pytest.mark.parametrize("size", [2, 3])
def test_rows_arrive_as_the_numpy_twin_slices_them(size, tmp_path):
    for report in reports("rounds", size, tmp_path):
        assert report["window"]  # every rank of the test runs on this machine
        assert report["equal"] == [True] * 5
        assert report["kinds"] == [["float32", [4]], ["float64", []], ["float32", [16]], ["float64", [3]],
                                   ["float32", [8]]]
        assert report["held_flags"] & 1 and report["view_flags"] & 1  # BUSY while rows or a view are held
        assert report["dropped_flags"] == 0
        assert report["equal_released"] and report["emptied"] and report["equal_after_release"]


@pytest.mark.parametrize("size", [2, 3])
def test_exchange_through_the_window_equals_the_ghosts_values(size, tmp_path):
    for report in reports("exchange", size, tmp_path):
        assert report["ghosts"] > 0
        assert report["ghosts_equal"] == [True, True, True]  # window, Alltoallv, window again
        assert report["direct_equal"] == [True, True, True]
        assert report["ext"] == [False, True, False]  # only the Alltoallv exchange builds [n + g] rows


@pytest.mark.parametrize("size", [2, 3])
def test_alltoallv_only_where_every_rank_prefers_it(size, tmp_path):
    for report in reports("prefer", size, tmp_path):
        assert report["every rank"] == [True, True]  # Alltoallv (it builds [n + g] rows), rows equal
        assert report["none"] == [False, True]  # the window
        assert report["all but the last"] == [False, True]  # one rank would fault: the window


@pytest.mark.parametrize("size", [2, 3])
def test_an_error_on_one_rank_ends_the_job(size, tmp_path):
    result = launch("error", size, tmp_path)  # a hang would raise TimeoutExpired
    assert result.returncode != 0
    assert "AttributeError: 'NoneType' object has no attribute 'shape'" in result.stderr
    assert not list(tmp_path.glob("rank*.json"))
