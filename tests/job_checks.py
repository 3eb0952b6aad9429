"""Checks on whole `pregel` jobs shared by the checkpoint tests of `run`, `infer` and `train`: killing a
job's process for real and what it must leave behind, and one-line errors."""
import hashlib
import json
import os
import signal
import time

KILL_DEADLINE = 30  # seconds from the kill to the end of the job


def wait_for(path, job, deadline_seconds: float, what: str) -> None:
    """Wait until ``path`` exists while the job ``job`` (a Popen) still runs."""
    deadline = time.time() + deadline_seconds
    while not path.exists():
        assert job.poll() is None, job.communicate()
        assert time.time() < deadline, what
        time.sleep(0.005)


def kill_and_end(job, pid: int) -> None:
    """SIGKILL process ``pid`` of the job ``job``; the whole job must end within ``KILL_DEADLINE``."""
    os.kill(pid, signal.SIGKILL)
    killed = time.time()
    job.communicate(timeout=KILL_DEADLINE)
    assert time.time() - killed < KILL_DEADLINE


def stop(job) -> None:
    """Make sure the job is gone (after a failed assertion too)."""
    if job.poll() is None:
        job.kill()
        job.communicate()


def assert_nothing_written(job, out, folder) -> None:
    """A killed job: non-zero exit, no file at ``out`` and no temporary one beside it."""
    assert job.returncode != 0
    assert not out.exists(), "a killed job leaves no result file"
    assert not list(folder.glob(f".{out.name}.*")), "nor a temporary one"


def intact(step_dir, parts: int | None = None) -> bool:
    """A complete checkpoint: the manifest and every part it lists, with matching SHA-256, and
    ``parts`` parts (default: one per rank)."""
    manifest = json.loads((step_dir / "manifest.json").read_text())
    expected = manifest["ranks"] if parts is None else parts
    return all(hashlib.sha256((step_dir / p["file"]).read_bytes()).hexdigest() == p["sha256"]
               for p in manifest["parts"]) and len(manifest["parts"]) == expected


def one_line_error(result, *fragments) -> None:
    """A refused command (a CompletedProcess): exit status 2 and one stderr line holding ``fragments``."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert all(f in lines[0] for f in fragments), lines[0]
