#!/usr/bin/env bash
# The one prepared script for a GPU machine: install from carried wheels, parity tests (GPU path
# against CPU path), then the processor-level sweep; ONE JSON line on stdout, last.
#
#   benchmarks/gpu.sh stage        # keep the carried part of the kit (.whl/) for a later call
#   benchmarks/gpu.sh              # install, check CUDA, parity, sweep (~4-7 min on an H200)
#   benchmarks/gpu.sh --dry-run    # no GPU: the CPU half of everything, at tiny sizes (~3 min)
#   benchmarks/gpu.sh --help
#
# The device machine reaches no package index. Build the kit here first:
#   python -m benchmarks.gpu_kit build      # .gpukit/: trimmed wheels + model-home files, in parts
#   python -m benchmarks.gpu_kit stage N    # .whl/ <- part N; carry .whl in that call
# one call per part: `benchmarks/gpu.sh stage` for all but the last, `benchmarks/gpu.sh` with
# the last (calls in a row keep the machine warm, and its /tmp). Details: benchmarks/README.md.
#
# Environment: PY (python3), KIT_DIR (/tmp/cardstream-kit), OUT (results; the device tool sets
# it; default benchmarks/results/gpu), BATCHES (1,2,4,8,16,32,64,128), SIZE (1600x1200),
# SECONDS_PER_POINT (3), PROCS (1,2,4), PRECISION (fp32|fp16), TENSORRT (0|1), BUDGET_S (480:
# the whole script's target; each step gets a timeout within it), PARITY (1).
# Exit codes: 0 done (parity failures are reported in the JSON, not fatal), 2 usage,
# 3 no CUDA device, 4 kit incomplete or install failed, 5 the CUDA provider is not active.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "gpu.sh: $*" >&2; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; }

mode=run
case "${1:-}" in
  "" | run) mode=run ;;
  stage) mode=stage ;;
  --dry-run) mode=dry ;;
  -h | --help) usage; exit 0 ;;
  *) log "unknown argument '$1'"; usage; exit 2 ;;
esac

T0=$(date +%s)
BUDGET_S=${BUDGET_S:-480}
KIT_DIR=${KIT_DIR:-/tmp/cardstream-kit}
RESULTS=${OUT:-benchmarks/results/gpu}
BATCHES=${BATCHES:-1,2,4,8,16,32,64,128}
SIZE=${SIZE:-1600x1200}
SECONDS_PER_POINT=${SECONDS_PER_POINT:-3}
PROCS=${PROCS:-1,2,4}
PRECISION=${PRECISION:-fp32}
PARITY=${PARITY:-1}
left() { echo $((BUDGET_S - ($(date +%s) - T0))); }
mkdir -p "$RESULTS"

# --- the kit: keep this call's part, reassemble, install --------------------------------------
stage_part() {
  mkdir -p "$KIT_DIR"
  if [ -d .whl ] && [ -n "$(ls -A .whl 2>/dev/null)" ]; then
    cp -f .whl/* "$KIT_DIR"/
    log "kept $(ls .whl | wc -l) file(s) of this call in $KIT_DIR"
  fi
}

install_kit() {  # reassemble chunked files, check SHA-256, pip install into $SITE
  local py=$1
  [ -f "$KIT_DIR/manifest.json" ] || return 1
  SITE=$KIT_DIR/site
  "$py" -m benchmarks.gpu_kit assemble "$KIT_DIR" >&2 || exit 4
  if [ ! -f "$SITE/.installed" ]; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "$KIT_DIR"/assembled/*.whl >&2 || { log "pip install failed"; exit 4; }
    touch "$SITE/.installed"
  fi
  export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
  export U2NET_HOME="$KIT_DIR/assembled/models"
  return 0
}

if [ "$mode" = stage ]; then
  stage_part
  exit 0
fi

if [ "$mode" = dry ]; then
  PY=${PY:-.venv/bin/python}
  log "dry run on the CPU: graph backend on ONNX Runtime's CPU provider against the CPU path"
  "$PY" -m pytest tests/unit/test_gpu_parity.py -q -rs -p no:cacheprovider >&2 || true
  exec timeout "$(left)" "$PY" -m benchmarks.gpu_sweep --device cpu --parity --parity-n 3 \
    --batches 1,2 --size 480x360 --unique 2 --seconds 0.5 --procs 1 --out "$RESULTS"
fi

# --- a CUDA device, or stop --------------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  log "no CUDA device: nvidia-smi is missing or lists no GPU (use --dry-run on a CPU machine)"
  exit 3
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >&2

PY=${PY:-python3}
stage_part
if ! install_kit "$PY"; then
  log "no kit in $KIT_DIR: using $PY's own packages (they must include onnxruntime-gpu)"
fi
# CUDA 13 / cuDNN 9 user-space libraries of NVIDIA's wheels (the image's PyTorch ones)
NV_LIBS=$("$PY" - <<'PY'
import glob, os, site
dirs = []
for sp in site.getsitepackages() + [site.getusersitepackages()] + os.environ.get("PYTHONPATH", "").split(":"):
    dirs += sorted(d for d in glob.glob(os.path.join(sp, "nvidia", "*", "lib")) if os.path.isdir(d))
print(":".join(dict.fromkeys(dirs)))
PY
)
export LD_LIBRARY_PATH="${NV_LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# load a kernel's module when it is first used (CUDA's default since 12.2): the kit's ONNX
# Runtime keeps only the sm_90 images, and nothing else should ever be read
export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-LAZY}

# --- CUDA must be the active provider of a real session (ORT falls back to the CPU silently) ---
"$PY" - >&2 <<'PY' || { log "CUDAExecutionProvider is not active"; exit 5; }
import onnxruntime as ort
from processors.models import manifest, model_path
from processors.runtime import BatchedModel, RuntimeSettings
print("onnxruntime", ort.__version__, "providers:", ort.get_available_providers())
m = BatchedModel(model_path("u2netp"), manifest()["u2netp"]["sha256"],
                 RuntimeSettings(device="cuda"), "u2netp", make_batch_symbolic=True, outputs=1)
assert m.session.get_providers()[0] == "CUDAExecutionProvider", m.session.get_providers()
print("active:", m.session.get_providers())
PY

# --- parity tests, then the sweep ---------------------------------------------------------------
PARITY_JSON="$RESULTS/parity.json"
parity_rc=skipped
if [ "$PARITY" = 1 ]; then
  rm -f "$PARITY_JSON"
  set +e
  CARDSTREAM_PARITY_JSON="$PARITY_JSON" timeout $(( $(left) / 3 )) "$PY" -m pytest \
    tests/unit/test_gpu_parity.py -q -rs -p no:cacheprovider -o addopts="" >&2
  parity_rc=$?
  set -e
  log "parity tests exit status $parity_rc (0: all bounds met)"
fi
extra=()
[ "${TENSORRT:-0}" = 1 ] && extra+=(--tensorrt)
sweep_budget=$(( $(left) - 60 ))
if [ "$sweep_budget" -lt 60 ]; then
  log "no time left for the sweep ($(left) s of BUDGET_S=$BUDGET_S)"
  sweep_budget=60
fi
timeout $(( sweep_budget + 90 )) "$PY" -m benchmarks.gpu_sweep --device cuda --batches "$BATCHES" \
  --size "$SIZE" --seconds "$SECONDS_PER_POINT" --procs "$PROCS" --precision "$PRECISION" \
  --budget-s "$sweep_budget" --out "$RESULTS" "${extra[@]}" > "$RESULTS/sweep.line"
"$PY" - "$RESULTS/sweep.line" "$PARITY_JSON" "$parity_rc" "$(( $(date +%s) - T0 ))" <<'PY'
import json, os, sys
line, parity, rc, wall = sys.argv[1:]
out = json.loads(open(line).read().strip().splitlines()[-1])
out["parity_tests"] = {"exit_status": rc,
                       "results": json.load(open(parity)) if os.path.isfile(parity) else None}
out["gpu_sh_wall_s"] = int(wall)
print(json.dumps(out))
PY
