#!/usr/bin/env bash
# Benchmarks on a machine with an NVIDIA GPU: one prepared script, one JSON summary on stdout.
#
#   benchmarks/gpu.sh                      # from the repository root or anywhere
#   BATCHES=1,2,4,8,16,32,64 N=64 benchmarks/gpu.sh
#
# 1. checks the driver (nvidia-smi);
# 2. installs the project with the `gpu` extra into .venv: onnxruntime-gpu (pinned in
#    pyproject.toml, CUDA 13 / cuDNN 9 build). The CPU wheel `onnxruntime` is removed first:
#    both wheels install the same `onnxruntime` module and must not coexist. The CUDA and cuDNN
#    user-space libraries come from the machine (e.g. the CUDA 13 + cuDNN 9 base image of the
#    Dockerfile) or, if absent, from NVIDIA's wheels through onnxruntime-gpu's `cuda`/`cudnn`
#    extras, which `onnxruntime.preload_dlls()` loads (onnxruntime >= 1.21; benchmarks/run.py
#    calls it before creating sessions);
# 3. puts the model files in place (scripts/models; needs the package index or a warm cache);
# 4. checks that CUDAExecutionProvider is the *active* provider of a real session (ONNX Runtime
#    silently falls back to the CPU when the CUDA provider cannot load) — stops if not;
# 5. runs benchmarks 1-3 (model-only sweep with larger batches; end to end + naive baseline when
#    the local Kafka/MinIO stack can be started here) and prints summary.json.
#
# Results: benchmarks/results/gpu/*.json + PNGs. Environment: BATCHES, N (images per point),
# ROUNDS, OUT, PY (python3.11). Keep BATCHES at 128 or below: at 256 ONNX Runtime 1.31's CUDA
# Concat fails on u2netp. Measured on an H200 on 2026-11-30, with steps 2-3 done by hand from
# carried wheels (that machine had no network): benchmarks/README.md, "GPU".
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-python3.11}
BATCHES=${BATCHES:-1,2,4,8,16,32,64}
N=${N:-64}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-benchmarks/results/gpu}
VPY=.venv/bin/python

log() { echo "gpu.sh: $*" >&2; }

command -v nvidia-smi >/dev/null || { log "nvidia-smi not found: no NVIDIA driver on this machine"; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >&2

# 2. the gpu extra (never both ONNX Runtime wheels at once)
[ -x "$VPY" ] || "$PY" -m venv .venv
"$VPY" -m pip install -q --upgrade pip >&2
"$VPY" -m pip uninstall -y -q onnxruntime >&2 2>/dev/null || true
"$VPY" -m pip install -q -e ".[gpu,dev]" >&2
if ! ldconfig -p 2>/dev/null | grep -q 'libcudnn\.so\.9'; then
  ver=$("$VPY" -c 'import importlib.metadata as m; print(m.version("onnxruntime-gpu"))')
  log "no system cuDNN 9: adding NVIDIA's CUDA/cuDNN wheels (onnxruntime-gpu[cuda,cudnn]==$ver)"
  "$VPY" -m pip install -q "onnxruntime-gpu[cuda,cudnn]==$ver" >&2 || log "extras not installed"
fi
"$VPY" -m pip install -q "matplotlib>=3.8" >&2

# 3. models (verified by SHA-256)
scripts/models >&2

# 4. CUDA must be the active provider
"$VPY" - >&2 <<'PY'
import onnxruntime as ort
if hasattr(ort, "preload_dlls"):
    ort.preload_dlls()
from processors.models import manifest, model_path
from processors.runtime import BatchedModel, RuntimeSettings
print("onnxruntime", ort.__version__, "available providers:", ort.get_available_providers())
# device="cuda" raises ProviderError unless CUDAExecutionProvider is active in the session
m = BatchedModel(model_path("u2netp"), manifest()["u2netp"]["sha256"],
                 RuntimeSettings(device="cuda"), "u2netp", make_batch_symbolic=True)
active = m.session.get_providers()
assert active[0] == "CUDAExecutionProvider", f"active providers {active}"
print("active providers:", active)
PY

# 5. benchmarks 1-3 (2 and 3 need Kafka + MinIO on 127.0.0.1: scripts/stack, Java and cached builds)
sections=model
if scripts/stack up >&2 2>&1; then
  eval "$(scripts/stack env)"
  sections=model,compare
else
  log "local stack not available here: model-only sweep only (end to end and naive skipped)"
fi
"$VPY" -m benchmarks.run --device cuda --sections "$sections" --batches "$BATCHES" --n "$N" \
  --rounds "$ROUNDS" --out "$OUT" >&2
"$VPY" -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$OUT/summary.json"
