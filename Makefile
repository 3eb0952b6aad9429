# Pregel-MPI: everything a fresh clone needs, from Python 3.11 and pip alone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   := demo_out
# One thread per rank: ranks, not threads, are the unit of parallelism.
export OMP_NUM_THREADS := 1
export NUMBA_NUM_THREADS := 1
export MKL_NUM_THREADS := 1

.PHONY: demo test gpu-test venv clean

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Two pytest workers: most tests wait on mpiexec launches, so two overlap on 2 cores (README, Testing).
# Each test file stays on one worker, so its module fixtures run once. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2

test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests
	NUMBA_ENABLE_CUDASIM=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests/cudasim

# On a CUDA machine (README, GPU): install the `gpu` extra (GPU_EXTRA=gpu-cu12 for CUDA 12 drivers)
# and run the CUDA kernel tests on the device.
GPU_EXTRA ?= gpu

$(VENV)/.installed-%: setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[$*]'
	touch $@

gpu-test: $(VENV)/.installed-$(GPU_EXTRA)
	PREGEL_REAL_GPU=1 $(BIN)/python -m pytest -q tests/cudasim

demo: $(STAMP)
	mkdir -p $(DEMO)
	@echo "== Graph analytics: generate a power-law graph, inspect it, PageRank on 2 ranks"
	$(BIN)/pregel generate --kind powerlaw --nodes 200000 --avg-degree 10 --features 16 --labels 4 --seed 1 --out $(DEMO)/graph.h5
	$(BIN)/pregel inspect $(DEMO)/graph.h5
	$(BIN)/mpiexec -n 2 $(BIN)/pregel run pagerank --graph $(DEMO)/graph.h5 --out $(DEMO)/pagerank.h5 --tol 1e-10 --stats --quiet
	@echo "== GNN inference: train a 2-layer GraphSAGE with PyG, score every vertex on 2 ranks, check against PyG"
	$(BIN)/python examples/train_sage.py train --graph $(DEMO)/graph.h5 --out $(DEMO)/sage.pt
	$(BIN)/mpiexec -n 2 $(BIN)/pregel infer --graph $(DEMO)/graph.h5 --model $(DEMO)/sage.pt --out $(DEMO)/sage_scores.h5 --stats
	$(BIN)/python examples/train_sage.py check --graph $(DEMO)/graph.h5 --model $(DEMO)/sage.pt --scores $(DEMO)/sage_scores.h5
	@echo "== Gaussian splatting: generate a scene, train from its noisy point cloud (one process)"
	$(BIN)/pregel generate-scene --gaussians 2000 --cameras 24 --width 64 --height 64 --seed 1 --out $(DEMO)/scene.h5
	$(BIN)/pregel train --scene $(DEMO)/scene.h5 --steps 400 --eval-every 200 --out $(DEMO)/trained.h5 --ply $(DEMO)/trained.ply
	$(BIN)/pregel render --scene $(DEMO)/trained.h5 --ply $(DEMO)/trained.ply --out $(DEMO)/views
	$(BIN)/pregel plot $(DEMO)/trained.h5 --out $(DEMO)/training.png
	@echo "held-out views: $(DEMO)/views/*.png   training curve: $(DEMO)/training.png"
	@echo "== Barrier-free distributed splatting (Odin): 2 ranks, batches of 4, against the barrier baseline and one process"
	$(BIN)/python benchmarks/odin.py --ranks 2 --gaussians 8000 --cameras 80 --width 64 --height 48 --steps 20 --repeats 1 --dir $(DEMO)/odin --png $(DEMO)/odin_timeline.png

clean:
	rm -rf $(VENV) $(DEMO) *.egg-info
