"""ONNX Runtime sessions: provider selection, SHA-256 pins, symbolic batch, batch buckets, warm-up.

One :class:`BatchedModel` per model file, created once per process. Inputs are run in fixed
batch-size buckets (default 1, 2, 4, 8, 16, 32; the last chunk is zero-padded up to a bucket) so
the session only ever sees those shapes. Warm-up runs every bucket, measures images/s and picks
the bucket with the best throughput within a latency budget: on a GPU that is usually the
largest, on a 2-core CPU it may be 1.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import onnxruntime as ort
import structlog
from pydantic import BaseModel, ConfigDict, Field

from processors.errors import ModelError, ProviderError
from processors.tracing import MODEL, span

if TYPE_CHECKING:
    from processors.gpu.device import DeviceBatch

DEFAULT_BUCKETS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
#: ONNX Runtime's session option for busy-waiting intra-op threads
#: (``onnxruntime_session_options_config_keys.h``:
#: ``kOrtSessionOptionsConfigAllowIntraOpSpinning``).
SPINNING_KEY = "session.intra_op.allow_spinning"
#: ONNX Runtime's run option that gives an arena's free memory back at the end of a run
#: (``onnxruntime_run_options_config_keys.h``: ``kOrtRunOptionsConfigEnableMemoryArenaShrinkage``).
SHRINK_KEY = "memory.enable_memory_arena_shrinkage"
#: ONNX Runtime's session option that computes int8 (U8S8) matrix products exactly on x86-64 CPUs
#: without VNNI (``onnxruntime_session_options_config_keys.h``:
#: ``kOrtSessionOptionsAvx2PrecisionMode``): there the fast U8S8 kernels add pairs of products in
#: 16 bits (``VPMADDUBSW``), which saturate for weights outside [-64, 63], and the int8 card
#: model's quad moved (the real photo ``cardwarp_emerson-allen_3`` of ``shared/cases``: IoU
#: 0.864 against 0.974 in fp32, on an AVX2-only AMD EPYC). ORT applies it on every x86 CPU with
#: AVX2 (``MlasPlatformU8S8Overflow``), VNNI or not, and converts the weights to U8U8, which is
#: slow where the fast kernels were exact: on an Intel Xeon with AVX-512 VNNI and AMX the int8
#: card model took 0.70 s of CPU per image with it against 0.25 s without, bit-identical
#: outputs. So it is set only where :func:`int8_saturates` finds the fast kernels saturating.
X64_PRECISION_KEY = "session.x64quantprecision"
log = structlog.get_logger("cardstream.runtime")
_SHARED: dict[tuple, BatchedModel] = {}
_SHARED_LOCK = threading.Lock()


def _saturation_probe(channels: int = 4) -> bytes:
    """A QDQ int8 1x1 convolution over ``(1, channels, 2, 2)`` float32 (activations uint8 at
    scale 1, weights int8 all 127, the sum quantised at scale 1000), as ``quantize_static`` writes
    the int8 models: ONNX Runtime runs it as one U8S8 QLinearConv. At 255 everywhere the exact sum
    is ``channels * 255 * 127`` (129540 for 4); kernels that add pairs of products in 16 bits
    give 2 * 32767 per pair (66000 after the output's rounding)."""
    import onnx
    from onnx import TensorProto, helper

    num = onnx.numpy_helper.from_array
    inits = [num(np.array(1.0, np.float32), "s1"), num(np.array(0, np.uint8), "z1"),
             num(np.full((1, channels, 1, 1), 127, np.int8), "w"),
             num(np.array(1.0, np.float32), "sw"), num(np.array(0, np.int8), "zw"),
             num(np.array(1000.0, np.float32), "so"), num(np.array(0, np.uint8), "zo")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s1", "z1"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s1", "z1"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["c"]),
             helper.make_node("QuantizeLinear", ["c", "so", "zo"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "so", "zo"], ["y"])]
    g = helper.make_graph(
        nodes, "saturation_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", channels, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1, 2, 2])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString()


_SATURATES: list[bool] = []
_PROBE_LOCK = threading.Lock()


def int8_saturates() -> bool:
    """Whether this CPU's fast int8 kernels in ONNX Runtime saturate (x86-64 without VNNI: pairs
    of U8S8 products summed in 16 bits), found once per process by running
    :func:`_saturation_probe` at 255 without :data:`X64_PRECISION_KEY`. True also where the
    probe cannot run (then every CPU session asks for exact products, slower but right);
    False on CPUs with VNNI or AMX and off x86, where ORT's fast kernels are exact."""
    with _PROBE_LOCK:
        if not _SATURATES:
            try:
                so = ort.SessionOptions()
                so.log_severity_level = 3
                sess = ort.InferenceSession(_saturation_probe(), so,
                                            providers=["CPUExecutionProvider"])
                (y,) = sess.run(None, {"x": np.full((1, 4, 2, 2), 255.0, np.float32)})
                saturates = bool(np.any(y != round(4 * 255 * 127 / 1000) * 1000.0))
            except Exception as e:  # noqa: BLE001 (ORT raises its own untyped errors)
                log.warning("int8_probe_failed", error=type(e).__name__)
                saturates = True
            _SATURATES.append(saturates)
            log.debug("int8_products", saturating_kernels=saturates)
        return _SATURATES[0]


def exact_int8(so: ort.SessionOptions) -> ort.SessionOptions:
    """``so`` (CPU session options), asking ONNX Runtime for exact int8 products
    (:data:`X64_PRECISION_KEY`) where :func:`int8_saturates` and only there."""
    if int8_saturates():
        so.add_session_config_entry(X64_PRECISION_KEY, "1")
    return so


class RuntimeSettings(BaseModel):
    """Inference settings (part of the frozen app settings, ``CARDSTREAM_RUNTIME__*``).

    Attributes:
        device: ``cpu``, ``cuda`` (fail at start-up unless CUDAExecutionProvider is active) or
            ``auto`` (CUDA when available, else CPU).
        buckets: allowed batch sizes, ascending. On CUDA keep them at 128 or below for u2netp at
            320 px: at 256, ONNX Runtime 1.31's CUDA Concat fails (a tensor above 2^31 elements;
            measured on an H200, ``benchmarks/README.md``).
        max_bucket: cap on the bucket warm-up may choose (None: the largest of ``buckets``).
        latency_budget_ms: a bucket whose single call takes longer than this is not chosen.
        intra_op_threads: ONNX Runtime intra-op threads (0: ORT's default = physical cores).
        intra_op_spinning: whether ONNX Runtime's intra-op threads busy-wait for work between
            operators (its ``session.intra_op.allow_spinning``, on by default in ONNX Runtime).
            Applies to sessions on the CPU provider only, where it is off by default: the
            waiting threads spin on the very cores that decode, post-process and serve Kafka
            and MinIO. ID photos at 2 MP, bucket 4, on the 2-core box (load 2-5): the bare
            models' process CPU per image 569 -> 509 ms with it off, the worker end to end
            669 -> 575 ms, wall times within the load's noise; cards at 2 MP, bucket 1: the bare
            model 621 -> 476 ms of CPU, the worker 2.68 -> 3.08 images/s (``benchmarks/README.md``,
            issue 29). The outputs are the same (same kernels; only idle threads wait
            differently).
        cpu_arena: keep ONNX Runtime's CPU memory arena (its default) for sessions on the CPU
            provider. Without it every call maps its activations afresh and the kernel zeroes
            them page by page: u2netp at 320 x 320, one image, one thread, took 588 ms of CPU
            per call of which 139 ms in the kernel (61,888 minor page faults), against 460 ms
            and 6 ms (0 faults) with it (issue 40), for about 130 MiB more resident memory at
            bucket 1. The arena keeps its peak, so warm-up gives back what the buckets above
            the chosen one took (:meth:`BatchedModel.shrink`); a worker holds about one chosen
            bucket's activations per model (~260 MiB per image for u2netp).
        cuda_device_id: GPU index for the CUDA EP.
        postprocess_threads: threads for per-item pre- and post-processing around the model call
            (decode, quad fit, warp, face search, mattes, JPEG encode; 0: ``os.cpu_count()``).
            OpenCV and NumPy release the GIL, so this is what feeds a GPU: on an H200 u2netp runs
            830 images/s at batch 64 while one thread post-processes about 10 cards/s.
        cpu_max_bucket: bucket cap when the session runs on the CPU EP. u2netp needs about
            260 MiB of activations per image, and on a CPU a batch above 8 only costs memory
            (measured in ``benchmarks/``: no throughput gain past 2-4 on 2 cores).
        precision: the model files and arithmetic (:func:`model_precision`). ``int8``: each
            model that has an int8 file pinned in ``models.json`` (``precision: int8``, built by
            :mod:`processors.quantise`) loads that file, the others their fp32 file; CPU
            provider only (a GPU session refuses it at start-up). ``auto`` (default): on ONNX
            Runtime's CPU provider, the int8 files that pass ``python -m
            benchmarks.precision_gate`` (entries without ``"auto": false``: today the card's
            ``card_u2netp.int8`` and the ID photo's ``u2netp.int8``) and fp32 files
            otherwise; on a GPU, ``fp32`` (:func:`processors.models.pinned_model`). ``fp32``:
            the fp32 files.
            ``fp16``: the fp32 files with weights and activations in float16 and float32 inputs
            and outputs (ONNX Runtime's ``transformers.float16``
            ``convert_float_to_float16(keep_io_types=True)``); with ``tensorrt`` the fp32 graph
            is kept and TensorRT builds fp16 kernels (``trt_fp16_enable``). u2netp's mask moves
            by well under one level of 255 (``tests/unit/test_gpu_model.py``); for the GPU (ONNX
            Runtime's CPU provider has no fast fp16 or bfloat16 convolution on x86: ``bf16`` is
            not offered, issue 40).
        tensorrt: put ONNX Runtime's TensorRT execution provider first (CUDA, then CPU, behind
            it) with an engine cache and one explicit optimisation profile for the batch axis
            (``trt_profile_min/opt/max_shapes``: 1, the largest bucket, the largest bucket).
            Needs TensorRT 10 (``libnvinfer.so.10``, what onnxruntime-gpu 1.31's provider links).
        trt_cache_dir: folder of TensorRT engine and timing caches (created); None: a
            ``cardstream-trt`` folder in the user cache (``$XDG_CACHE_HOME`` or ``~/.cache``).
        cuda_codec: the GPU pixel backend's JPEG codec. ``auto``: nvImageCodec when it is
            installed and starts, else the host codec (libjpeg-turbo, decoded on the CPU and
            uploaded), the start-up failure counted and logged (``pixels_fallback``);
            ``nvimgcodec``: nvImageCodec or fail at start-up; ``host``: the host codec always (a
            machine whose nvJPEG misbehaves, or to measure the GPU path without it).
        cuda_arena_extend_strategy: how each session's CUDA memory arena grows (ONNX Runtime's
            ``arena_extend_strategy``). ``kSameAsRequested`` (default here): by what is asked
            for; ONNX Runtime's own default ``kNextPowerOfTwo`` rounds each extension up to a
            power of two, so a batch-128 warm-up can hold twice what it uses for the life of the
            process while other worker processes on the GPU start.
        cuda_mem_limit_mib: cap of each session's CUDA arena in MiB (ONNX Runtime's
            ``gpu_mem_limit``; every session has its own arena); 0: no cap. With several worker
            processes on one GPU, about (GPU memory - 2 GiB) / (processes x sessions' share).
    """

    model_config = ConfigDict(frozen=True)

    device: Literal["cpu", "cuda", "auto"] = "auto"
    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    max_bucket: int | None = None
    latency_budget_ms: float = 2000.0
    intra_op_threads: int = 0
    intra_op_spinning: bool = False
    cpu_arena: bool = True
    cuda_device_id: int = 0
    postprocess_threads: int = 0
    cpu_max_bucket: int = 8
    precision: Literal["auto", "fp32", "fp16", "int8"] = "auto"
    tensorrt: bool = False
    trt_cache_dir: Path | None = None
    cuda_codec: Literal["auto", "nvimgcodec", "host"] = "auto"
    cuda_arena_extend_strategy: Literal["kSameAsRequested", "kNextPowerOfTwo"] = "kSameAsRequested"
    cuda_mem_limit_mib: int = Field(0, ge=0)


def bucket_slices(n: int, bucket: int) -> list[slice]:
    """The one place a batch is cut into buckets: consecutive slices of at most ``bucket`` items
    that cover ``range(n)`` in order (``bucket`` below 1 counts as 1; ``n`` = 0 gives none).

    Used by the worker and the processor commands (one ``process_batch`` call per slice, see
    :func:`processors.base.process_in_buckets`) and by :meth:`BatchedModel.run` (one model call
    per slice), so a chunk handed to a processor is one model call.
    """
    step = max(1, int(bucket))
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def require_file(path: Path, hint: str = "") -> None:
    """Raise :class:`ModelError` unless ``path`` is a regular file: ``model file missing`` (with
    ``hint``, e.g. `` (run `make models`)``) when nothing is there, ``not a regular file`` for a
    folder, FIFO or device."""
    if not path.exists():
        raise ModelError(f"model file missing: {path}{hint}")
    if not path.is_file():
        raise ModelError(f"cannot load {path}: not a regular file")


def verify_sha256(path: Path, expected: str) -> None:
    """Raise :class:`ModelError` unless ``path`` is a regular file that hashes to ``expected``
    (hex)."""
    require_file(path, " (run `make models`)")
    got = sha256_file(path)
    if got != expected:
        raise ModelError(f"model file {path} has sha256 {got}, expected {expected}")


def trt_cache_dir(settings: RuntimeSettings) -> Path:
    """The TensorRT cache folder of ``settings`` (see :class:`RuntimeSettings`), not created."""
    if settings.trt_cache_dir is not None:
        return Path(settings.trt_cache_dir)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cardstream-trt"


def tensorrt_options(settings: RuntimeSettings, input_name: str, sample_shape: Sequence[int],
                     max_batch: int) -> dict[str, str]:
    """ONNX Runtime TensorRT provider options (names as in ONNX Runtime 1.31's
    ``tensorrt_execution_provider_info.cc``): fp16 per ``settings.precision``, engine and timing
    caches under :func:`trt_cache_dir`, one profile for ``input_name`` with batch 1..``max_batch``
    (optimised for ``max_batch``) and the per-image ``sample_shape`` ``(C, H, W)``."""
    cache = str(trt_cache_dir(settings))
    dims = "x".join(str(d) for d in sample_shape)
    return {
        "device_id": str(settings.cuda_device_id),
        "trt_fp16_enable": "1" if settings.precision == "fp16" else "0",
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": cache,
        "trt_timing_cache_enable": "1",
        "trt_timing_cache_path": cache,
        "trt_profile_min_shapes": f"{input_name}:1x{dims}",
        "trt_profile_opt_shapes": f"{input_name}:{max_batch}x{dims}",
        "trt_profile_max_shapes": f"{input_name}:{max_batch}x{dims}",
    }


def cuda_provider_options(settings: RuntimeSettings, tf32: bool = True) -> dict[str, str]:
    """ONNX Runtime CUDA provider options for ``settings`` (names as in ONNX Runtime 1.31's
    ``cuda_execution_provider_info.cc``): ``device_id``, ``arena_extend_strategy``,
    ``gpu_mem_limit`` (bytes, when ``cuda_mem_limit_mib`` is set) and, with ``tf32`` False,
    ``use_tf32=0``: MatMul and convolution in full float32 instead of TF32's 10-bit mantissa
    (the provider's default on Ampere and newer). The pixel graphs need that: their resize
    MatMuls reproduce OpenCV's rounding to uint8, which TF32 breaks by up to a level."""
    opts = {"device_id": str(settings.cuda_device_id),
            "arena_extend_strategy": settings.cuda_arena_extend_strategy}
    if settings.cuda_mem_limit_mib:
        opts["gpu_mem_limit"] = str(settings.cuda_mem_limit_mib * 2**20)
    if not tf32:
        opts["use_tf32"] = "0"
    return opts


def providers_for(settings: RuntimeSettings, trt: dict[str, str] | None = None
                  ) -> list[str | tuple[str, dict]]:
    """Execution providers to request, in priority order, for ``settings.device``: CUDA
    (:func:`cuda_provider_options`) then CPU on a GPU (TensorRT first when ``trt`` options are
    given, from :func:`tensorrt_options`), else the CPU alone."""
    available = ort.get_available_providers()
    cuda = ("CUDAExecutionProvider", cuda_provider_options(settings))
    if settings.device == "cuda" or (settings.device == "auto"
                                     and "CUDAExecutionProvider" in available):
        gpu: list[str | tuple[str, dict]] = [cuda, "CPUExecutionProvider"]
        return [("TensorrtExecutionProvider", trt), *gpu] if trt is not None else gpu
    return ["CPUExecutionProvider"]


def model_precision(settings: RuntimeSettings) -> Literal["fp32", "fp16", "int8"]:
    """The precision the sessions of ``settings`` run at (:class:`RuntimeSettings`'s
    ``precision``): ``auto`` is ``int8`` where the session runs on the CPU provider
    (:func:`providers_for`) and ``fp32`` on a GPU. ``int8`` says which file a pinned model
    loads (:func:`processors.models.pinned_model`); a float file runs in fp32 under it
    (:func:`processors.models.file_precision`).

    Raises:
        ProviderError: ``int8`` asked for a session on a GPU (the int8 files are QDQ graphs
            calibrated for the CPU provider's kernels).
    """
    on_cpu = providers_for(settings) == ["CPUExecutionProvider"]
    if settings.precision == "auto":
        return "int8" if on_cpu else "fp32"
    if settings.precision == "int8" and not on_cpu:
        raise ProviderError("precision int8 runs on ONNX Runtime's CPU provider only; on a GPU "
                            "use fp32 or fp16 (CARDSTREAM_RUNTIME__PRECISION)")
    return settings.precision


def to_fp16(model_bytes: bytes) -> bytes:
    """The model with float16 weights and activations and float32 inputs and outputs (ONNX
    Runtime's ``onnxruntime.transformers.float16.convert_float_to_float16``, ``keep_io_types``;
    its default list of operators kept in float32). Returns the serialised model."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    m = convert_float_to_float16(onnx.load_model_from_string(model_bytes), keep_io_types=True)
    return m.SerializeToString()


def symbolic_batch(model_bytes: bytes, batch_name: str = "batch") -> bytes:
    """Rewrite dim 0 of every graph input and output to the symbolic ``batch_name``.

    rembg's U2-Net graphs ship with a fixed ``[1,3,320,320]`` input; the convolutions themselves
    are batch-agnostic, so making the leading dim symbolic lets one call take N images.
    Returns the serialised model (unchanged when dims are already symbolic).
    """
    import onnx

    m = onnx.load_model_from_string(model_bytes)
    for vi in list(m.graph.input) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if len(dims) > 0:
            dims[0].ClearField("dim_value")
            dims[0].dim_param = batch_name
    # intermediate value_info with a fixed batch would contradict the new inputs
    del m.graph.value_info[:]
    return m.SerializeToString()


@dataclass
class BatchStats:
    """Counters of a :class:`BatchedModel` (read by metrics and tests)."""

    calls: int = 0
    images: int = 0
    padded: int = 0
    bucket_ms: dict[int, float] = field(default_factory=dict)
    bucket_ips: dict[int, float] = field(default_factory=dict)


def _takes(graph_shape: Sequence[int | str | None], sample: tuple[int, ...]) -> bool:
    """Whether a graph input of ``graph_shape`` (ONNX Runtime's ``NodeArg.shape``: ints, or
    str/None for symbolic dims) takes a batch of images of shape ``sample``."""
    dims = list(graph_shape)[1:]
    return len(dims) == len(sample) and all(
        not isinstance(d, int) or d <= 0 or d == want for d, want in zip(dims, sample, strict=True))


class BatchedModel:
    """An ONNX model run in batch-size buckets.

    Args:
        path: ``.onnx`` file.
        sha256: expected hex digest (None skips the check; only for models built in tests).
        settings: runtime settings.
        name: model name for logs/results.
        make_batch_symbolic: rewrite dim 0 of inputs/outputs to a symbolic batch at load.
        outputs: fetch only the first ``outputs`` graph outputs (None: all). U²-Net has 7
            outputs of ``(N,1,H,W) float32`` and the processors read only the fused one: on a GPU
            the other 6 would each cost a device-to-host copy of ``N*H*W*4`` bytes per call.
        input_shape: one image's input shape the caller feeds (``(C, H, W)``, batch dim left
            out); the graph's first input must have that rank and, where its dims are numbers,
            those values (None: not checked).

    The session's first active provider is ``provider``; ``requested_provider`` is the one
    asked for first. They differ when ONNX Runtime fell back (TensorRT's libraries missing:
    TensorRT -> CUDA), which is logged (``model_provider_fallback``) and which a benchmark
    reports, so it never measures another provider than the one it names.

    Raises:
        ModelError: missing file, SHA-256 mismatch, a graph ONNX Runtime cannot load, or a
            graph whose first input does not take ``input_shape`` (e.g. another model's file
            given as ``--model``).
        ProviderError: ``device="cuda"`` but CUDAExecutionProvider is not active, or precision
            ``int8`` for a session on a GPU (:func:`model_precision`).
    """

    def __init__(
        self,
        path: Path,
        sha256: str | None,
        settings: RuntimeSettings,
        name: str,
        make_batch_symbolic: bool = False,
        outputs: int | None = None,
        input_shape: tuple[int, ...] | None = None,
    ) -> None:
        path = Path(path)
        if sha256 is not None:
            verify_sha256(path, sha256)
        else:
            require_file(path)
        self.name = name
        self.path = path
        self.sha256 = sha256
        self.settings = settings
        data = path.read_bytes()
        if not data:
            raise ModelError(f"cannot load {path}: empty file (0 bytes)")
        if make_batch_symbolic:
            try:
                data = symbolic_batch(data)
            except Exception as e:  # protobuf's DecodeError and friends: not an ONNX file
                raise ModelError(f"cannot load {path}: not an ONNX model "
                                 f"({type(e).__name__})") from e
        so = ort.SessionOptions()
        if settings.intra_op_threads:
            so.intra_op_num_threads = settings.intra_op_threads
        so.log_severity_level = 3
        on_cpu = providers_for(settings) == ["CPUExecutionProvider"]
        if on_cpu:
            so.enable_cpu_mem_arena = settings.cpu_arena
            so.add_session_config_entry(SPINNING_KEY, "1" if settings.intra_op_spinning else "0")
            exact_int8(so)  # int8 exact on CPUs without VNNI, fast elsewhere
        precision = model_precision(settings)
        trt = None
        try:
            if settings.tensorrt and not on_cpu:
                trt = self._trt_options(data, settings)
            elif precision == "fp16":
                data = to_fp16(data)
            self.session = ort.InferenceSession(data, so, providers=providers_for(settings, trt))
        except Exception as e:  # onnxruntime raises its own untyped errors
            raise ModelError(f"cannot load {path}: {e}") from e
        active = self.session.get_providers()
        if settings.device == "cuda" and "CUDAExecutionProvider" not in active:
            raise ProviderError(
                f"device=cuda requested but ONNX Runtime's active providers are {active}; "
                "install the `gpu` extra and a matching CUDA/cuDNN"
            )
        self.provider = active[0]
        first_wanted = providers_for(settings, trt)[0]
        self.requested_provider = (first_wanted[0] if isinstance(first_wanted, tuple)
                                   else first_wanted)
        if self.provider != self.requested_provider:  # e.g. TensorRT's libraries missing
            log.warning("model_provider_fallback", model=name,
                        requested=self.requested_provider, active=self.provider)
        first = self.session.get_inputs()[0]
        self.input_name = first.name
        self.input_shape = input_shape
        if input_shape is not None and not _takes(first.shape, input_shape):
            raise ModelError(f"cannot use {path} as {name}: its input {first.name!r} is "
                             f"{tuple(first.shape)}, this model is fed (N, "
                             f"{', '.join(map(str, input_shape))})")
        names = [o.name for o in self.session.get_outputs()]
        self.output_names = names[:outputs] if outputs else names
        buckets = tuple(sorted(settings.buckets))
        cap = settings.max_bucket or buckets[-1]
        if self.provider == "CPUExecutionProvider":
            cap = min(cap, settings.cpu_max_bucket)
        self.buckets = tuple(b for b in buckets if b <= cap) or (1,)
        self.chosen_bucket = self.buckets[-1]
        self.stats = BatchStats()
        self._lock = threading.Lock()

    @staticmethod
    def _trt_options(data: bytes, settings: RuntimeSettings) -> dict[str, str]:
        """TensorRT options for this graph: its first input's name and per-image shape."""
        import onnx

        first = onnx.load_model_from_string(data).graph.input[0]
        dims = [d.dim_value for d in first.type.tensor_type.shape.dim][1:]
        trt_cache_dir(settings).mkdir(parents=True, exist_ok=True)
        cap = min(settings.max_bucket or max(settings.buckets), max(settings.buckets))
        return tensorrt_options(settings, first.name, dims, cap)

    @classmethod
    def shared(cls, path: Path, sha256: str | None, settings: RuntimeSettings, name: str,
               make_batch_symbolic: bool = False, outputs: int | None = None,
               input_shape: tuple[int, ...] | None = None) -> BatchedModel:
        """The process-wide instance for this file and settings (created on first use).

        Processors that run the same model file (two tasks' processors run u2netp) share one
        session: that halves the model memory and the warm-up. Calls are serialised by the
        instance's lock.
        """
        key = (str(Path(path).resolve()), sha256, settings, make_batch_symbolic, outputs,
               input_shape)
        with _SHARED_LOCK:
            m = _SHARED.get(key)
            if m is None:
                m = _SHARED[key] = cls(path, sha256, settings, name, make_batch_symbolic, outputs,
                                       input_shape)
            return m

    @classmethod
    def drop_shared(cls) -> int:
        """Forget every process-wide instance :meth:`shared` made; returns how many. Each
        session (and its CPU arena, which keeps its peak size while ``cpu_arena`` is on) is
        freed once no processor holds it. A long-lived process that builds processors under many
        settings (the unit-test session: one per module) calls it between them; a worker never
        needs to (it builds its processors once)."""
        with _SHARED_LOCK:
            n = len(_SHARED)
            _SHARED.clear()
        return n

    def bucket_for(self, n: int) -> int:
        """Smallest bucket >= ``n`` (``n`` <= chosen bucket)."""
        for b in self.buckets:
            if b >= n:
                return b
        return self.buckets[-1]

    def _span_attributes(self, images: int, rows: int) -> dict[str, str | int]:
        """What a model call's span says: the model, its provider, the images and the rows run
        (the bucket, padding included)."""
        return {"cardstream.model.name": self.name, "cardstream.model.provider": self.provider,
                "cardstream.model.images": images, "cardstream.model.rows": rows}

    def _run_padded(self, x: np.ndarray) -> list[np.ndarray]:
        n = x.shape[0]
        b = self.bucket_for(n)
        if b > n:
            pad = np.zeros((b - n, *x.shape[1:]), dtype=x.dtype)
            x = np.concatenate([x, pad], axis=0)
        with self._lock, span(MODEL, attributes=self._span_attributes(n, b)):
            outs = self.session.run(self.output_names, {self.input_name: x})
            self.stats.calls += 1
            self.stats.images += n
            self.stats.padded += b - n
        return [o[:n] for o in outs]

    def _run_bound(self, batch: DeviceBatch, start: int, n: int) -> list[np.ndarray]:
        """Rows ``[start, start + n)`` of a device batch, bound in place (no copy) and padded up
        to their bucket with the batch's spare rows when it has them; outputs to the host."""
        b = self.bucket_for(n)
        rows = b if start + b <= batch.capacity else n
        io = self.session.io_binding()
        io.bind_input(self.input_name, batch.device, batch.device_id, np.float32,
                      [rows, 3, batch.side, batch.side], batch.row_ptr(start))
        for name in self.output_names:
            io.bind_output(name, "cpu")
        with self._lock, span(MODEL, attributes=self._span_attributes(n, rows)):
            self.session.run_with_iobinding(io)
            self.stats.calls += 1
            self.stats.images += n
            self.stats.padded += rows - n
        return [o[:n] for o in io.copy_outputs_to_cpu()]

    def run(self, x: np.ndarray | DeviceBatch) -> list[np.ndarray]:
        """Run a batch.

        Args:
            x: ``(N, C, H, W) float32`` host input, any N >= 1; or a
                :class:`processors.gpu.device.DeviceBatch` (the GPU pixel backend's model input),
                bound where it lies with ONNX Runtime's IOBinding, each chunk padded with the
                batch's spare rows (its capacity is a power of two, so they suffice for
                power-of-two buckets; otherwise the chunk runs unpadded); the outputs in the
                images' order (``DeviceBatch.order``).

        Returns:
            The fetched graph outputs (all, or the first ``outputs``) as host arrays, each with
            leading dim N (padding removed). The batch is split into ``ceil(N / chosen_bucket)``
            calls, the last one padded up to a bucket.
        """
        if not isinstance(x, np.ndarray):
            if x.n == 0:
                raise ValueError("empty batch")
            parts = [self._run_bound(x, part.start, part.stop - part.start)
                     for part in bucket_slices(x.n, self.chosen_bucket)]
            return [x.in_order(np.concatenate([p[k] for p in parts], axis=0))
                    for k in range(len(parts[0]))]
        else:
            if x.ndim < 1 or x.shape[0] == 0:
                raise ValueError("empty batch")
            parts = [self._run_padded(x[part])
                     for part in bucket_slices(x.shape[0], self.chosen_bucket)]
        return [np.concatenate([p[k] for p in parts], axis=0) for k in range(len(parts[0]))]

    def warm_up(self, sample_shape: Sequence[int] | None = None, repeats: int = 2) -> int:
        """Run every bucket ``repeats`` times on zeros, choose the best bucket.

        Args:
            sample_shape: one image's input shape ``(C, H, W)`` (None: the ``input_shape``
                given at construction).
            repeats: timed calls per bucket; the fastest counts. Untimed calls come first (1 on the
                CPU, 3 on CUDA, where they also autotune cuDNN and grow the memory arena).

        A second call returns the bucket chosen by the first without measuring again.

        Returns:
            The chosen bucket: highest images/s among buckets whose call time stays within
            ``latency_budget_ms`` (bucket 1 always qualifies). Buckets are tried in ascending
            order and the sweep stops once a bucket exceeds the budget or falls below 90% of the
            best throughput so far, so a CPU does not spend warm-up on batches it cannot use.
        """
        if self.stats.bucket_ips:  # already measured (a shared instance)
            return self.chosen_bucket
        sample_shape = sample_shape or self.input_shape
        if sample_shape is None:
            raise ValueError(f"{self.name}: warm_up needs a sample shape (none given at load)")
        # CUDA: the first calls at a new shape also autotune cuDNN and grow the memory arena (on
        # an H200, bucket 8 timed 37 ms per call after one untimed call and 13 ms after three)
        untimed = 1 if self.provider == "CPUExecutionProvider" else 3
        best, best_ips = self.buckets[0], 0.0
        calls0, images0, padded0 = self.stats.calls, self.stats.images, self.stats.padded
        for b in self.buckets:
            x = np.zeros((b, *sample_shape), dtype=np.float32)
            for _ in range(untimed):
                self._run_padded(x)
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                self._run_padded(x)
                times.append((time.perf_counter() - t0) * 1000.0)
            ms = min(times)
            ips = b * 1000.0 / ms if ms > 0 else float("inf")
            self.stats.bucket_ms[b] = ms
            self.stats.bucket_ips[b] = ips
            if (b == self.buckets[0] or ms <= self.settings.latency_budget_ms) and ips > best_ips:
                best, best_ips = b, ips
            if ms > self.settings.latency_budget_ms:
                break  # larger buckets only take longer
            if ips < 0.9 * best_ips:
                break  # throughput is falling (a CPU past its cores): larger buckets won't win
        # warm-up calls are not traffic
        self.stats.calls, self.stats.images, self.stats.padded = calls0, images0, padded0
        self.chosen_bucket = best
        if b != best:  # a larger bucket was tried: its activations need not stay
            self.shrink(sample_shape)
        return best

    def shrink(self, sample_shape: Sequence[int] | None = None) -> None:
        """Give the CPU arena's free memory back (:class:`RuntimeSettings` ``cpu_arena``): one
        call on zeros at the smallest bucket with ONNX Runtime's arena shrinkage, not counted
        in :attr:`stats`. The next calls grow it again to what they use. No-op on a GPU or
        without the arena.

        Args:
            sample_shape: one image's input shape (None: the ``input_shape`` given at load;
                without either, nothing is done).
        """
        shape = sample_shape or self.input_shape
        if self.provider != "CPUExecutionProvider" or not self.settings.cpu_arena or not shape:
            return
        ro = ort.RunOptions()
        ro.add_run_config_entry(SHRINK_KEY, "cpu:0")
        x = np.zeros((self.buckets[0], *shape), dtype=np.float32)
        with self._lock:
            self.session.run(self.output_names, {self.input_name: x}, ro)


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One recorded :meth:`BatchedModel.run` (see :func:`recorded_calls`).

    Attributes:
        model: the model instance.
        x: its input ``(N, ...) float32`` (a copy).
        outputs: what it returned (copies).
    """

    model: BatchedModel
    x: np.ndarray
    outputs: list[np.ndarray]


@contextmanager
def recorded_calls(calls: list[ModelCall]) -> Iterator[None]:
    """Inside: every :meth:`BatchedModel.run` of the process runs as usual and is appended to
    ``calls`` (host inputs only), in call order, so a processor's pass over some uploads gives
    the exact inputs each of its models saw: the quantiser's calibration data
    (:mod:`processors.quantise`) and the benchmarks' replays (``benchmarks.cpu_outside``)."""
    real = BatchedModel.run

    def record(self: BatchedModel, x: np.ndarray | DeviceBatch) -> list[np.ndarray]:
        out = real(self, x)
        if isinstance(x, np.ndarray):  # a GPU batch stays on the device: not recorded
            calls.append(ModelCall(self, np.array(x, copy=True),
                                   [np.array(o, copy=True) for o in out]))
        return out

    BatchedModel.run = record  # type: ignore[method-assign]  # recording: the model call wrapped
    try:
        yield
    finally:
        BatchedModel.run = real  # type: ignore[method-assign]  # the real call put back
