#!/bin/bash
# The GPU checks on a CUDA machine without network access whose python3 already holds torch and
# numba-cuda (a CUDA container image): install the rest from wheels, run the CUDA tests on the device
# while gsplat builds its extension, then benchmarks/gpu.py. Everything is written to OUT_DIR.
#
#   benchmarks/gpu_machine.sh OUT_DIR [WHEEL_DIR] [SECONDS]
#
# WHEEL_DIR (default .whl) holds what the image lacks, fetched where pip works, for the image's Python
# (3.12 here):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux1_x86_64 -d .whl \
#       mpi4py==4.1.2 mpich==5.0.2 simpy==4.1.2 plyfile==1.1.5 gsplat==1.5.3
# SECONDS (default 570) bounds the whole script: the tests get at most 150 of them, gpu.py the rest
# (each row is printed as soon as it is measured, so a run cut short keeps what it has).
set -u
out=${1:?usage: benchmarks/gpu_machine.sh OUT_DIR [WHEEL_DIR] [SECONDS]}
wheels=${2:-.whl}
budget=${3:-570}
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
cd "$(dirname "$0")/.."
mkdir -p "$out"
python=$(command -v python3)
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 MKL_NUM_THREADS=1

{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    $python --version
    $python -m pip install -q --no-index --no-deps --no-compile --force-reinstall "$wheels"/*.whl
    $python -m pip install -q --no-index --no-deps --no-build-isolation -e . || echo "editable install failed"
    bin=$(dirname "$($python -c 'import sys; print(sys.executable)')")
    if [ ! -x "$bin/pregel" ]; then  # the console script, where the editable install could not make it
        printf '#!%s\nfrom pregel.cli import main\nmain()\n' "$python" > "$bin/pregel"
        chmod +x "$bin/pregel"
    fi
    $python -m pip list 2>/dev/null | grep -i -E "^(numba|numba-cuda|numpy|torch|torch.geometric|mpi4py|mpich|gsplat) "
} > "$out/setup.log" 2>&1

# numba-cuda 0.30 registers np.row_stack when its CUDA target loads; numpy 2.5 (which an image may
# hold beside it) removed it, so give it back to every process of this run
shim=$(mktemp -d)
cat > "$shim/sitecustomize.py" <<'EOF'
import numpy
if not hasattr(numpy, "row_stack"):
    numpy.row_stack = numpy.vstack
EOF
export PYTHONPATH=$shim:$PWD:$PWD/benchmarks
echo "setup done at $(elapsed) s" >> "$out/setup.log"

# gsplat compiles its CUDA extension on first use (105 s on an H200 with 10 jobs): here, beside the tests
(MAX_JOBS=10 TORCH_CUDA_ARCH_LIST=$($python -c "import torch; print('%d.%d' % torch.cuda.get_device_capability())") \
    timeout -k 5 300 nice -n 19 $python -c "from gsplat.cuda._backend import _C; print('gsplat built', _C)" \
    > "$out/gsplat_build.log" 2>&1; echo "gsplat build rc=$? at $(elapsed) s" >> "$out/gsplat_build.log") &
build=$!

PREGEL_REAL_GPU=1 timeout -k 5 150 $python -m pytest -q -n 8 --dist loadfile -p no:cacheprovider tests/cudasim \
    --ignore tests/cudasim/test_gpu_benchmark.py > "$out/cudasim.log" 2>&1
echo "tests rc=$? at $(elapsed) s" >> "$out/cudasim.log"
wait $build
gsplat=--no-gsplat
grep -q "gsplat built" "$out/gsplat_build.log" && gsplat=""

timeout -k 5 $(( budget - $(elapsed) )) $python benchmarks/gpu.py --sections ecabfd $gsplat > "$out/gpu.log" 2>&1
echo "gpu.py rc=$? at $(elapsed) s" >> "$out/gpu.log"
