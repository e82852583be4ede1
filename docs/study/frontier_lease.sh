#!/usr/bin/env bash
# The frontier study's GPU call (docs/gpu.md, "The exact weights, in two calls"): after a first call copied
# .gpu_kit's site/ to /tmp/kit and installed its wheels into /tmp/site, this one carries .gpu_kit_low,
# rebuilds the package's fp32 weights bit for bit, and runs the study's cells 16 at a time on the one GPU,
# writing the records after each cell into $OUT/frontier.tar (a call stopped at its limit keeps them).
# Usage there: bash docs/study/frontier_lease.sh SECONDS [frontier.py run arguments...]
set -u
limit=${1:-540}
shift || true
out=${OUT:?the device tool sets OUT}
export PYTHONPATH=/tmp/site:/tmp/kit/site:$PWD OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
python3 benchmarks/split_weights.py join /tmp/kit/site .gpu_kit_low || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)" | tee -a "$out/gpu.txt"
python3 docs/study/frontier.py run --jobs 16 --limit "$limit" --tar "$out/frontier.tar" --device cuda --precision fp32 "$@" 2>&1 | tee "$out/run.log"
rm -f "$out"/*.partial
