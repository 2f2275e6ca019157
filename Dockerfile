# syntax=docker/dockerfile:1.7
# The cardstream worker image (also runs the operator commands and the status app).
#
#   docker build -t cardstream:0.1.0-gpu .                      # CUDA 13 + cuDNN 9, onnxruntime-gpu
#   docker build -t cardstream:0.1.0-cpu --build-arg VARIANT=cpu .   # python:3.11-slim, onnxruntime
#   docker build --build-arg EXTRA_MODELS="u2net" ...          # also bake rembg's full u2net (176 MB)
#
# GPU base: the PyPI onnxruntime-gpu 1.3x wheels are built with CUDA 13.0 and cuDNN 9 (the wheel's
# onnxruntime/capi/build_and_package_info.py says cuda_version = '13.0'; its `cuda`/`cudnn` extras
# name nvidia-*~=13.0 and nvidia-cudnn-cu13~=9.0). CUDA minor-version compatibility makes any 13.x
# runtime work; cuDNN 8 does not. The host needs an NVIDIA driver that supports CUDA 13 (>= 580)
# and the NVIDIA Container Toolkit. Ubuntu 24.04 has no Python 3.11, so the GPU variant installs a
# standalone CPython 3.11 with uv; the CPU variant uses the official python:3.11-slim image.
#
# Model files are baked in at build time under /models (U2NET_HOME, rembg's model home), fetched
# by scripts/models and verified against the SHA-256 pins in processors/models.json; the image
# never downloads a model at run time. The card model ships inside the package (package data).

ARG VARIANT=gpu
ARG CUDA_IMAGE=nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.9.26

FROM ${UV_IMAGE} AS uv

# ---- bases: the same interpreter at the same path in the build and runtime stages -------------
FROM ${PYTHON_IMAGE} AS base-cpu
ENV CARDSTREAM_RUNTIME__DEVICE=cpu \
    CARDSTREAM_PYTHON=/usr/local/bin/python3.11

FROM ${CUDA_IMAGE} AS base-gpu
ENV CARDSTREAM_RUNTIME__DEVICE=cuda \
    CARDSTREAM_PYTHON=/opt/python/3.11/bin/python3.11 \
    UV_PYTHON_INSTALL_DIR=/opt/python \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
# The venv's pyvenv.cfg records the interpreter's directory, so it must be the real one (a
# symlinked python elsewhere would not find its standard library): /opt/python/3.11 -> cpython-3.11.*.
RUN --mount=from=uv,source=/uv,target=/usr/local/bin/uv \
    uv python install 3.11 \
 && real="$(readlink -f "$(uv python find 3.11)")" \
 && ln -s "$(dirname "$(dirname "$real")")" /opt/python/3.11 \
 && "$CARDSTREAM_PYTHON" --version

# ---- build: a virtualenv at /app/.venv (the path scripts/models expects) and the models --------
FROM base-${VARIANT} AS build
ARG VARIANT
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    U2NET_HOME=/models
WORKDIR /app
RUN "$CARDSTREAM_PYTHON" -m venv /app/.venv
COPY pyproject.toml README.md ./
COPY schemas ./schemas
COPY processors ./processors
COPY streams ./streams
RUN /app/.venv/bin/pip install ".[${VARIANT}]" \
 && /app/.venv/bin/python -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
COPY scripts/models ./scripts/models
RUN scripts/models
# Optional extra rembg models (e.g. "u2net u2net_human_seg"): rembg downloads them into
# U2NET_HOME and checks its own MD5 pins. Select one with CARDSTREAM_IDPHOTO__MODEL.
ARG EXTRA_MODELS=""
RUN for m in ${EXTRA_MODELS}; do \
      /app/.venv/bin/python -c "import sys; from rembg.sessions import sessions_class as c; \
print([k for k in c if k.name() == sys.argv[1]][0].download_models())" "$m" || exit 1; \
    done \
 && ls -l /models

# ---- runtime -----------------------------------------------------------------------------------
FROM base-${VARIANT} AS runtime
ARG VARIANT
LABEL org.opencontainers.image.title="cardstream" \
      org.opencontainers.image.description="Identity uploads from Kafka, processed in batches with ONNX Runtime (card rectification, ID photos); results to Kafka exactly once." \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.cardstream.variant="${VARIANT}"
RUN groupadd --system --gid 10001 cardstream \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/cardstream --create-home \
      --shell /usr/sbin/nologin cardstream \
 && install -d -o 10001 -g 10001 /data  # the status app's RocksDB files (a volume mounts here)
COPY --from=build /app/.venv /app/.venv
COPY --from=build /models /models
ENV PATH=/app/.venv/bin:${PATH} \
    U2NET_HOME=/models \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NUMBA_CACHE_DIR=/tmp/numba \
    MPLCONFIGDIR=/tmp/matplotlib \
    CARDSTREAM_WORKER__HTTP_PORT=8080
WORKDIR /home/cardstream
USER 10001:10001
EXPOSE 8080
# /ready turns 200 only after warm-up (every model loaded, every batch bucket run once), and is
# 503 while no broker answers; the start period covers the first CUDA/cuDNN initialisation.
HEALTHCHECK --interval=15s --timeout=5s --start-period=5m --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/ready' % os.environ.get('CARDSTREAM_WORKER__HTTP_PORT', '8080'), timeout=4)"]
ENTRYPOINT ["cardstream"]
CMD ["worker", "--tasks", "card,id_photo"]
