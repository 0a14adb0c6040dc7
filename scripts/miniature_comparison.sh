#!/usr/bin/env bash
# The published comparison in miniature on SmolLM2-135M-Instruct (`make miniature`; docs/miniature.md):
#   1. the base model scored once by ifdistill-eval, with the eval configs the sweep's checkpoint
#      evaluations use (IFEval 0-shot and IFBench: the page's base rows), and 4-shot on the same IFEval
#      prompts (the ICL gap: `ifdistill-report icl-gap`);
#   2. the sweep: experiment=smollm2_miniature_comparison (SFT / off-policy / on-policy ICL distillation,
#      without and with replay), training pinned to core 0 and each run's evaluators to core 1, as `make demo`;
#   3. `ifdistill-report` over the sweep with the base rows: report.md / report.html and the figures;
#   4. `ifdistill-report plan` over it: the prompts and seeds each run against the base needs for 5 points.
# Usage: scripts/miniature_comparison.sh [OUT] [extra sweep overrides...]   (OUT: outputs/miniature)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:-outputs/miniature}")
shift || true
BIN=.venv/bin
IFEVAL=(eval=ifeval_local eval.data.max_examples=48 eval.generation.max_new_tokens=128)
IFBENCH=(eval=ifbench 'eval.data.path=${paths.shared_data_dir}/ifbench/IFBench_test_v2.jsonl' eval.data.hf_name=null
         eval.data.max_examples=32 eval.generation.max_new_tokens=128)
start=$SECONDS
stamp() { echo "[miniature] $1 ($(( SECONDS - start )) s)"; }

base_eval() {  # output folder under OUT, overrides...
  local dir=$1; shift
  if [ -f "$OUT/$dir/results.json" ]; then stamp "$dir: already scored"; return; fi
  "$BIN/ifdistill-eval" model=smollm2_135m "$@" eval.runtime.progress=false output_dir="$OUT/$dir" \
    hydra.run.dir="$OUT/$dir" > "$OUT/logs/${dir//\//_}.log" 2>&1 \
    || { tail -n 20 "$OUT/logs/${dir//\//_}.log"; exit 1; }
  stamp "$dir scored"
}

mkdir -p "$OUT/logs"
base_eval base/ifeval "${IFEVAL[@]}"
base_eval base/ifbench "${IFBENCH[@]}"
base_eval icl_4shot "${IFEVAL[@]}" eval.fewshot.k=4   # beside base/: not a base row of the page
"$BIN/ifdistill-report" icl-gap "$OUT/base/ifeval" "$OUT/icl_4shot" -o "$OUT/icl_gap" > "$OUT/logs/icl_gap.log" 2>&1
stamp "ICL gap: $OUT/icl_gap"

OMP_NUM_THREADS=1 taskset -c 0 "$BIN/ifdistill-train" -m experiment=smollm2_miniature_comparison \
  paths.output_root="$OUT" hydra.sweep.dir="$OUT/sweep" \
  "+callbacks.checkpoint_eval.devices.cpu_threads_bind='1'" "$@" 2>&1 | tee "$OUT/logs/sweep.log" \
  | grep -E --line-buffered "^\[(train|checkpoint-eval)\]|Launching|#[0-9]+ :|Error|error" || true
stamp "sweep done"

"$BIN/ifdistill-report" "$OUT/train/runs" --base-model "$OUT/base" -o "$OUT/report" > "$OUT/logs/report.log" 2>&1 || { tail -n 20 "$OUT/logs/report.log"; exit 1; }
stamp "results page: $OUT/report/report.md"
"$BIN/ifdistill-report" plan "$OUT/train/runs" --base-model "$OUT/base" --effect 5 -o "$OUT/plan" > "$OUT/logs/plan.log" 2>&1 \
  || { tail -n 20 "$OUT/logs/plan.log"; exit 1; }
stamp "plan for 5 points: $OUT/plan/plan.md"
