#!/usr/bin/env bash
# More columns on the miniature's page, scored after `make miniature` (scripts/miniature_comparison.sh) on
# the same models with the same eval configs, as its 90-minute budget leaves no room for them in training
# (docs/multiturn-reliability.md, "The miniature comparison"):
#   1. the base model by ifdistill-eval into OUT/base/NAME (a base row of the page), skipped when scored;
#   2. every run's final checkpoint by `ifdistill-eval backfill run_dir=RUN steps=[LAST] +eval@evals.NAME=OPTION`:
#      the run's evals/NAME/, metrics.json and W&B run, as an evaluation in training would have written them;
#   3. ifdistill-report over the runs with the base rows into OUT/report: the page with a column per benchmark.
# Each benchmark on its first 48 rows with 128 new tokens, as the miniature scores IFEval.
# Usage: scripts/miniature_more_columns.sh [OUT] [NAME=OPTION ...]   (OUT: outputs/miniature;
#        NAME=OPTION: an eval section name and its conf/eval option; default multiturn=ifeval_multiturn)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:-outputs/miniature}")
shift || true
EXTRA=("$@")
[ ${#EXTRA[@]} -gt 0 ] || EXTRA=(multiturn=ifeval_multiturn)
BIN=${IFDISTILL_BIN:-.venv/bin}
ROWS=(data.max_examples=48 generation.max_new_tokens=128)
start=$SECONDS
stamp() { echo "[miniature+] $1 ($(( SECONDS - start )) s)"; }
[ -d "$OUT/train/runs" ] || { echo "no miniature runs under $OUT/train/runs: run make miniature first" >&2; exit 2; }
mkdir -p "$OUT/logs"

for pair in "${EXTRA[@]}"; do
  name=${pair%%=*}; option=${pair#*=}
  [ "$name" != "$pair" ] && [ -n "$name" ] && [ -n "$option" ] || { echo "expected NAME=OPTION, got '$pair'" >&2; exit 2; }
  if [ -f "$OUT/base/$name/results.json" ]; then
    stamp "base/$name: already scored"
  else
    "$BIN/ifdistill-eval" model=smollm2_135m "eval=$option" "${ROWS[@]/#/eval.}" eval.runtime.progress=false \
      output_dir="$OUT/base/$name" hydra.run.dir="$OUT/base/$name" > "$OUT/logs/base_$name.log" 2>&1 \
      || { tail -n 20 "$OUT/logs/base_$name.log"; exit 1; }
    stamp "base/$name scored"
  fi
  for run in "$OUT"/train/runs/*/; do
    run=${run%/}
    last=$(find "$run/exports" -maxdepth 1 -name "step_*" -printf "%f\n" 2>/dev/null | sort | tail -n 1 || true)
    [ -n "$last" ] || { stamp "$(basename "$run"): no export, skipped"; continue; }
    step=$((10#${last#step_}))
    "$BIN/ifdistill-eval" backfill run_dir="$run" "steps=[$step]" runner=local "+eval@evals.$name=$option" \
      "${ROWS[@]/#/evals.$name.}" "evals.$name.runtime.progress=false" \
      > "$OUT/logs/backfill_${name}_$(basename "$run").log" 2>&1 \
      || { tail -n 20 "$OUT/logs/backfill_${name}_$(basename "$run").log"; exit 1; }
    stamp "$(basename "$run") step $step: $name scored"
  done
done

"$BIN/ifdistill-report" "$OUT/train/runs" --base-model "$OUT/base" -o "$OUT/report" > "$OUT/logs/report_more.log" 2>&1 \
  || { tail -n 20 "$OUT/logs/report_more.log"; exit 1; }
stamp "results page: $OUT/report/report.md"
