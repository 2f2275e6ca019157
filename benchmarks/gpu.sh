#!/usr/bin/env bash
# The one prepared script for a GPU machine: keep the carried kit, install it, a 30 s smoke step,
# then parity and the sweep; every record appended to $OUT/gpu.jsonl as it is measured.
#
#   benchmarks/gpu.sh stage        # keep the carried kit part(s) (.gpukit/parts/partN) in KIT_DIR
#   benchmarks/gpu.sh              # keep, install, smoke, parity, sweep (~7 min on an H200)
#   benchmarks/gpu.sh --dry-run    # no GPU: the same steps on ONNX Runtime's CPU provider, tiny
#   benchmarks/gpu.sh --help
#
# The device machine reaches no package index. Build the kit here once:
#   python -m benchmarks.gpu_kit build      # .gpukit/parts/part1, part2 (xz, <= 52 MiB each)
# then two device calls in a row, nothing done here between them (the machine goes back after
# 30 s idle): `benchmarks/gpu.sh stage` carrying .gpukit/parts/part1, then `benchmarks/gpu.sh`
# carrying .gpukit/parts/part2. Time plan and rerun: benchmarks/README.md, GPU.
#
# Environment: PY (python3), KIT_DIR (/tmp/cardstream-kit), KIT_PARTS (.gpukit/parts: where
# carried parts arrive), OUT (results; the device tool sets
# it; default benchmarks/results/gpu), BUDGET_S (360: the whole script; each step gets what is
# left), SMOKE (1), SMOKE_S (60), PARITY (1), TASKS (card,id_photo), PRECISIONS (fp32,fp16),
# BATCHES (1,4,16,32,64,128), SIZE (1600x1200), SECONDS_PER_POINT (2), PROCS (1,2,4),
# PROCS_MAX_BATCH (32), PROCS_MEM_LIMIT_MIB (0), CUDA_CODEC (auto|nvimgcodec|host), TENSORRT (0).
# Results under $OUT (they come back even from a call stopped at its limit): gpu.jsonl (one JSON
# line per record), gpu.log (this script's log), summary.json (also the last line on stdout).
# Exit codes: 0 done (failed points, checks and parity are records, not fatal), 2 usage, 3 no
# CUDA device, 4 kit incomplete or install failed, 5 the model does not run on CUDA.
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
BUDGET_S=${BUDGET_S:-360}
KIT_DIR=${KIT_DIR:-/tmp/cardstream-kit}
KIT_PARTS=${KIT_PARTS:-.gpukit/parts}
RESULTS=${OUT:-benchmarks/results/gpu}
TASKS=${TASKS:-card,id_photo}
PRECISIONS=${PRECISIONS:-fp32,fp16}
BATCHES=${BATCHES:-1,4,16,32,64,128}
SIZE=${SIZE:-1600x1200}
SECONDS_PER_POINT=${SECONDS_PER_POINT:-2}
PROCS=${PROCS:-1,2,4}
PROCS_MAX_BATCH=${PROCS_MAX_BATCH:-32}
PROCS_MEM_LIMIT_MIB=${PROCS_MEM_LIMIT_MIB:-0}
CUDA_CODEC=${CUDA_CODEC:-auto}
SMOKE=${SMOKE:-1}
SMOKE_S=${SMOKE_S:-60}
PARITY=${PARITY:-1}
left() { echo $((BUDGET_S - ($(date +%s) - T0))); }

# --- the kit: keep what this call carried --------------------------------------------------------
stage_parts() {
  mkdir -p "$KIT_DIR"
  local n=0 part
  for part in "$KIT_PARTS"/part*/; do
    [ -d "$part" ] || continue
    cp -f "$part"* "$KIT_DIR"/
    n=$((n + 1))
    log "kept $(basename "$part") ($(ls "$part" | wc -l) file(s)) in $KIT_DIR"
  done
  [ "$n" -gt 0 ] || log "this call carried no kit part ($KIT_PARTS/partN)"
}

if [ "$mode" = stage ]; then
  stage_parts
  exit 0
fi

mkdir -p "$RESULTS"
exec 2> >(tee -a "$RESULTS/gpu.log" >&2)

summary() {  # the summary of whatever the journal holds: $RESULTS/summary.json and stdout
  "$PY" -m benchmarks.gpu_sweep --summarize "$RESULTS/gpu.jsonl" > "$RESULTS/summary.json" \
    || echo '{"error": "no summary"}' > "$RESULTS/summary.json"
  cat "$RESULTS/summary.json"
}

if [ "$mode" = dry ]; then
  PY=${PY:-.venv/bin/python}
  log "dry run on the CPU: the pixel graphs on ONNX Runtime's CPU provider against the CPU path"
  set +e
  timeout "$(left)" "$PY" -m benchmarks.gpu_smoke --device cpu --size 640x480 --model-batch 1 \
    --out "$RESULTS" > /dev/null
  log "smoke exit status $? (1: a check not ok; the host codec is a counted fallback here)"
  timeout "$(left)" "$PY" -m benchmarks.gpu_sweep --device cpu --parity --parity-n 3 \
    --batches 1,2 --size 480x360 --unique 2 --seconds 0.5 --procs 1,2 --procs-max-batch 2 \
    --tasks "$TASKS" --budget-s "$(( $(left) - 20 ))" --out "$RESULTS" > /dev/null
  log "sweep exit status $?"
  set -e
  summary
  exit 0
fi

# --- a CUDA device, or stop --------------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  log "no CUDA device: nvidia-smi is missing or lists no GPU (use --dry-run on a CPU machine)"
  exit 3
fi
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader >&2

PY=${PY:-python3}
stage_parts
if [ -f "$KIT_DIR/manifest.json" ]; then
  "$PY" -m benchmarks.gpu_kit assemble "$KIT_DIR" >&2 || exit 4
  SITE=$KIT_DIR/site
  if [ ! -f "$SITE/.installed" ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "$KIT_DIR"/assembled/*.whl >&2 || { log "pip install failed"; exit 4; }
    touch "$SITE/.installed"
  fi
  export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
  export U2NET_HOME="$KIT_DIR/assembled/models"
  log "kit installed in $SITE ($(( $(date +%s) - T0 )) s)"
else
  log "no kit in $KIT_DIR: using $PY's own packages (they must include onnxruntime-gpu)"
fi
# CUDA 13 / cuDNN 9 user-space libraries of NVIDIA's wheels (the image's PyTorch ones, the kit's
# nvJPEG)
NV_LIBS=$("$PY" - <<'PY'
import glob, os, site
dirs = []
for sp in os.environ.get("PYTHONPATH", "").split(":") + site.getsitepackages() + [site.getusersitepackages()]:
    dirs += sorted(d for d in glob.glob(os.path.join(sp, "nvidia", "*", "lib")) if os.path.isdir(d))
print(":".join(dict.fromkeys(dirs)))
PY
)
export LD_LIBRARY_PATH="${NV_LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# load a kernel's module when it is first used (CUDA's default since 12.2): the kit's ONNX
# Runtime keeps only the sm_90 images, and nothing else should ever be read
export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-LAZY}

# --- smoke (versions, codec, every graph's placement, the model on CUDA, memory) ---------------
if [ "$SMOKE" = 1 ]; then
  set +e
  timeout "$SMOKE_S" "$PY" -m benchmarks.gpu_smoke --device cuda --cuda-codec "$CUDA_CODEC" \
    --out "$RESULTS" > /dev/null
  rc=$?
  set -e
  log "smoke exit status $rc (0: every check ok; 1: see the smoke record; 124: stopped at ${SMOKE_S} s)"
  if [ "$rc" = 5 ]; then
    log "the model does not run on CUDAExecutionProvider: nothing after this would measure the GPU"
    summary
    exit 5
  fi
fi

# --- parity, then the sweep (each task x precision in its own process) -------------------------
extra=()
[ "$PARITY" = 1 ] && extra+=(--parity)
[ "${TENSORRT:-0}" = 1 ] && extra+=(--tensorrt)
sweep_budget=$(( $(left) - 20 ))
[ "$sweep_budget" -ge 30 ] || { log "only $(left) s left of BUDGET_S=$BUDGET_S"; sweep_budget=30; }
set +e
timeout $(( sweep_budget + 40 )) "$PY" -m benchmarks.gpu_sweep --device cuda --tasks "$TASKS" \
  --precisions "$PRECISIONS" --batches "$BATCHES" --size "$SIZE" --seconds "$SECONDS_PER_POINT" \
  --procs "$PROCS" --procs-max-batch "$PROCS_MAX_BATCH" \
  --procs-mem-limit-mib "$PROCS_MEM_LIMIT_MIB" --cuda-codec "$CUDA_CODEC" \
  --budget-s "$sweep_budget" --out "$RESULTS" "${extra[@]}" > /dev/null
log "sweep exit status $? after $(( $(date +%s) - T0 )) s"
set -e
nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader >&2 || true
summary
