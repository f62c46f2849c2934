#!/usr/bin/env bash
# The device check of docs/cuda.md, as one script for a lent GPU machine: every CUDA case of
# tests/cuda/_sim_cases.py on the real GPU (FASTDYN_CUDA_REAL=1: GPU tolerances, the largest
# relative difference of each comparison printed), then bench/gpu.py (arguments passed on).
# Logs go to $OUT (the device tool's output folder) or /tmp/gpu_check.
set -u
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD" PYTHONUNBUFFERED=1
out="${OUT:-/tmp/gpu_check}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
python3 -c "import numba, numpy; print('numba', numba.__version__, 'numpy', numpy.__version__)" | tee -a "$out/gpu.txt"
FASTDYN_CUDA_REAL=1 NUMBA_NUM_THREADS=2 timeout 300 \
    python3 -m pytest -q -p no:cacheprovider -s tests/cuda/_sim_cases.py >"$out/cases.log" 2>&1
echo "cases: exit $?"
grep -E "^MAXREL" "$out/cases.log" | sort -g -k2 | tail -20
grep -E "^(FAILED|ERROR)|passed|failed" "$out/cases.log" | tail -12
NUMBA_NUM_THREADS=16 timeout 420 python3 bench/gpu.py "$@" 2>&1 | tee "$out/bench.log"
