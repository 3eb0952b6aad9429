#!/bin/bash
# PageRank on a Slurm allocation, checkpointed every 10 supersteps; resubmit the same script after
# a failure and it resumes from the newest complete checkpoint.
#   sbatch examples/slurm_pagerank.sh g.h5 pr.h5
#SBATCH --job-name=pregel-pagerank
#SBATCH --ntasks=8
#SBATCH --cpus-per-task=1
#SBATCH --time=02:00:00
set -euo pipefail
GRAPH=${1:?graph file}
OUT=${2:?result file}
CKPT=${OUT%.h5}.ckpt
PREGEL=${PREGEL:-.venv/bin/pregel}
RESUME=()
if compgen -G "$CKPT/step-*/manifest.json" > /dev/null; then
    RESUME=(--resume "$CKPT")
fi
# With the mpich wheel (the default install), Hydra's mpiexec finds the allocation and starts the
# ranks through Slurm. With a system MPI built with Slurm's PMI, `srun --mpi=pmi2 "$PREGEL" ...`
# works the same (see the README, "Launching").
mpiexec -n "$SLURM_NTASKS" "$PREGEL" run pagerank --graph "$GRAPH" --out "$OUT" \
    --checkpoint-dir "$CKPT" --checkpoint-every 10 "${RESUME[@]}"
