#!/usr/bin/env bash
# Training data as the paper prepared it (reinforce_ada/tasks/data_prep.py): clean, format, keep prompts
# whose pass rate under the model to be trained lies in (0, 0.313] ("easy") or (0, 0.125] ("hard").
#
#   INPUT=openr1.parquet MODEL=Qwen/Qwen2.5-Math-1.5B OUTPUT=data/openr1 bash scripts/prepare_data.sh [options]
#
# Environment: INPUT (parquet/JSONL with problem and answer fields), MODEL, OUTPUT,
# DIFFICULTY [easy] (or hard; empty: use --min-pass-rate/--max-pass-rate), K [16] samples per prompt, MAX_TOKENS [4096], TEST_SIZE [0].
# Extra options go to the module (e.g. --problem-key question --answer-key solution). An
# interrupted run, started again with the same OUTPUT, continues where it stopped.
set -euo pipefail
: "${INPUT:?set INPUT to the dataset file}" "${MODEL:?set MODEL to the model folder or name}" "${OUTPUT:?set OUTPUT}"
py=${PYTHON:-python}
difficulty=${DIFFICULTY-easy}
exec "$py" -m reinforce_ada.tasks.data_prep --input "$INPUT" --model "$MODEL" --output "$OUTPUT" \
  ${difficulty:+--difficulty "$difficulty"} --k "${K:-16}" --max-tokens "${MAX_TOKENS:-4096}" \
  --test-size "${TEST_SIZE:-0}" "$@"
