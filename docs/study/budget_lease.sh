#!/usr/bin/env bash
# The study's second GPU call (docs/gpu.md, "The exact weights, in two calls"): after the first call
# installed .gpu_kit's wheels into /tmp/site and copied its site/ to /tmp/kit, join the exact fp32
# weights, then keep a 16-core, one-GPU machine full with four queues at once, each under one limit:
#   A: the cells not done (seeds 4-5 of CoLA, MRPC and RTE), then the merges of seed 5 from their weights
#   B: the merges of seeds 2-4 (their vanilla and LP-FT weights did not come back: trained again first)
#   C: SST-2 (1 epoch, seeds 1-3)
#   D: the CUDA-marked tests (tests/test_cuda.py)
# Every queue writes its tar after each cell (budget.py --tar), so a queue stopped at the limit still
# returns every finished cell's records. Usage there: bash docs/study/budget_lease.sh SECONDS
set -u
limit=${1:-480}
out=${OUT:?the device tool sets OUT}
export PYTHONPATH=/tmp/site:/tmp/kit/site:$PWD OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
python3 benchmarks/split_weights.py join /tmp/kit/site .gpu_kit_low || exit 1
budget="python3 docs/study/budget.py"
log="$out/lease.log"
# A's merges are seed 5's alone: B trains seeds 2-4's sources into runs/budget/endpoints/, which A must not
# also merge (CoLA seed 4's LP-FT merges wait for the next call: its source trains in A).
( timeout "$limit" $budget run --seeds 4-5 --jobs 6 --deadline $((limit * 2 / 3)) --tar "$out/a.tar"
  rest=$((limit - SECONDS))
  if [ "$rest" -gt 20 ]; then timeout "$rest" $budget merge --seeds 5 --jobs 6 --tar "$out/a5.tar"; fi ) >>"$log" 2>&1 &
timeout "$limit" $budget merge --seeds 2-4 --train-missing --jobs 6 --tar "$out/b.tar" >>"$log" 2>&1 &
timeout "$limit" $budget run --only sst2 --seeds 1-3 --jobs 4 --tar "$out/c.tar" >>"$log" 2>&1 &
# 40 s alone, but over 150 s beside the 16 training processes (the 2026-11-26 lease cut them there)
timeout $((limit - 20)) python3 -m pytest -q -rs -m cuda tests/test_cuda.py -p no:cacheprovider >"$out/cuda_tests.log" 2>&1 &
wait
rm -f "$out"/*.partial  # a tar a limit cut off: the one before it stands
ls -l "$out"
