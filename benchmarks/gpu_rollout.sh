#!/usr/bin/env bash
# The device check for issue "benchmarks": run on the lent GPU machine (one H200) with the
# device tool, from the repository root; needs only PyTorch and transformers, which it has.
#   run(command="bash benchmarks/gpu_rollout.sh", timeout_s=600)
# Results come back in $OUT; copy the table into benchmarks/RESULTS.md with the date.
set -euo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$out/gpu.txt"
# Qwen2.5-1.5B's shape, then Qwen2.5-7B's; the paper's anchors are 2.8x and 1.59x step time.
python -m benchmarks.gpu_rollout --prompts 256 --repeats 3 --json "$out/gpu_1p5b.json" 2>&1 | tee "$out/gpu_1p5b.txt"
python -m benchmarks.gpu_rollout --layers 28 --hidden 3584 --intermediate 18944 --heads 28 --kv-heads 4 \
  --prompts 128 --repeats 2 --json "$out/gpu_7b.json" 2>&1 | tee "$out/gpu_7b.txt"
# reinforce_ada.sampling_seed on a GPU, where vLLM is installed: the same rollouts (the tiny model, so that the
# sampler's own cost shows) seeded and unseeded; vLLM's older model runner seeds rows one by one in Python.
# The ratio of the two tables' seconds, row by row, is what seeding costs the rollout.
if python -c "import vllm" 2>/dev/null; then
  python -m benchmarks.rollout_time --prompts 256 --max-tokens 256 --repeats 2 --label seeded 2>&1 | tee "$out/seeded.txt"
  python -m benchmarks.rollout_time --prompts 256 --max-tokens 256 --repeats 2 --unseeded --label unseeded 2>&1 \
    | tee "$out/unseeded.txt"
fi
