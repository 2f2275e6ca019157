"""The pixel backend on ONNX graphs: :class:`GraphPixels` and, on a GPU, :class:`CudaPixels`.

Every step of :class:`processors.pixels.PixelBackend` runs as one of the graphs of
:mod:`processors.gpu.graphs` in an ONNX Runtime session, its inputs and outputs bound by pointer
(:mod:`processors.gpu.device`) so that pixels stay where they are:

==================  ========================================================================
decode              JPEG: the codec's batched decode (nvImageCodec on a GPU), EXIF orientation
                    by the ``orient`` graph; other formats and what the codec refuses: the CPU
                    decoder (strict), then uploaded. The images of one size are then stacked in
                    one ``(n, h, w, 3)`` buffer (``stack`` graph), in order
model_input         ``shrink`` graph (:func:`processors.pixels.shrink` stage by stage) once per
                    run of images, written into rows of one
                    :class:`~processors.gpu.device.DeviceBatch` that ``BatchedModel.run`` binds
                    in place; only the masks come back
working_grey        ``shrink`` graph with BT.601 grey first, once per run, output to the host
sample_grey         ``sample`` graph (GridSample), points in, grey levels out (host), per image
warp                ``resample`` (area, :func:`processors.pixels.antialias_plan`) when the card
                    is large, then ``warp`` (GridSample bilinear, border replicated), once per
                    run sharing the pre-filter factor and output size; outputs on device, back
                    to back
to_host             ``copy`` graph with its output bound to the host, once per run
encode_jpeg         the codec's batched encode (nvImageCodec on a GPU); host arrays on the CPU
==================  ========================================================================

A *run* (:func:`runs`) is a set of the batch's images that lie back to back in one buffer:
after :meth:`GraphPixels.decode`, the uploads of one size are one run, in any order the caller
holds them, so each step is one graph run (one launch sequence and one device sync) per upload
size in the batch instead of one per image. ``graph_runs`` counts them by graph.

``GraphPixels(device="cpu")`` runs the very same code on ONNX Runtime's CPU provider with host
memory and a host codec (libjpeg-turbo): that is how it is tested without a GPU
(``tests/unit/test_gpu_backend.py``), against :class:`processors.pixels.CpuPixels`.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any, Protocol, TypeVar

import numpy as np
import onnx
import onnxruntime as ort
import structlog

from processors.decode import DecodeSettings, EncodedImage
from processors.errors import DecodeError, ProviderError
from processors.gpu.device import DeviceBatch, DeviceImage, next_pow2
from processors.gpu.graphs import (
    copy_graph,
    orient_graph,
    resample_graph,
    sample_graph,
    shrink_graph,
    stack_graph,
    warp_graph,
)
from processors.gpu.resample import resize_weights, shrink_plan
from processors.pixels import (
    GREY_BGR,
    IMAGENET_MEAN,
    IMAGENET_STD,
    CpuPixels,
    Decoded,
    antialias_plan,
    working_size,
)
from processors.runtime import SPINNING_KEY, RuntimeSettings, cuda_provider_options
from processors.tracing import DECODE, span
from schemas.reasons import ReasonCode

log = structlog.get_logger("cardstream.pixels")
_T = TypeVar("_T")

__all__ = ["Codec", "CudaPixels", "Fallbacks", "GraphPixels", "HostCodec"]

WEIGHT_CACHE = 64
"""Resize weight pairs kept on the device, by (kind, source size, output size, factor): uploads
of one app mostly share a size, so the model input's weights are uploaded once."""

STACK_SESSIONS = 16
"""``stack`` graph sessions kept, by image count (a batch's size group)."""


def runs(images: Sequence[DeviceImage]) -> list[list[int]]:
    """The indices of ``images`` in runs: images of one shape that lie back to back in one
    buffer (rows of one stack), each run in memory order, so that it is bound as one
    ``(len(run), h, w, c)`` graph input whatever the order the caller holds them in. Every index
    is in exactly one run; ``[]`` for no images."""
    order = sorted(range(len(images)), key=lambda k: (id(images[k].owner), images[k].ptr))
    out: list[list[int]] = []
    for k in order:
        if out:
            a, b = images[out[-1][-1]], images[k]
            if (b.owner is a.owner and b.shape == a.shape and b.device == a.device
                    and b.ptr == a.ptr + a.nbytes):
                out[-1].append(k)
                continue
        out.append([k])
    return out


class Fallbacks:
    """Counts of the work a GPU backend handed to the host instead (thread-safe), so that a run
    that looks healthy cannot measure another path than the one it names: a benchmark reports
    :meth:`snapshot` beside its figures, and the first fallback of each kind is logged
    (``pixels_fallback``, with its reason).

    Kinds: ``codec_start`` (nvImageCodec did not start: the host codec serves the backend),
    ``decode_host`` (JPEGs the codec did not decode, decoded on the CPU and uploaded; a corrupt
    upload counts here too, since the CPU decoder then names its reason), ``encode_host``
    (outputs the codec did not encode, copied to the host and encoded by libjpeg-turbo).
    """

    KINDS = ("codec_start", "decode_host", "encode_host")

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._why: dict[str, str] = {}
        self._lock = threading.Lock()

    def add(self, kind: str, n: int = 1, why: str = "") -> None:
        """Count ``n`` fallbacks of ``kind`` (one of :attr:`KINDS`) for reason ``why``.

        Raises:
            ValueError: an unknown ``kind``.
        """
        if kind not in self.KINDS:
            raise ValueError(f"fallback kind must be one of {self.KINDS}, not {kind!r}")
        if n <= 0:
            return
        with self._lock:
            first = kind not in self._counts
            self._counts[kind] += n
            if why:
                self._why[kind] = why
        if first:
            log.warning("pixels_fallback", kind=kind, images=n, why=why)

    def snapshot(self) -> dict[str, Any]:
        """``{"counts": {kind: n}, "why": {kind: last reason}}`` (every kind, 0 when none)."""
        with self._lock:
            return {"counts": {k: self._counts.get(k, 0) for k in self.KINDS},
                    "why": dict(self._why)}


class Codec(Protocol):
    """Batched JPEG decode and encode where the backend's pixels live."""

    oriented: bool
    """True when :meth:`decode` already applies the EXIF orientation."""

    def decode(self, datas: Sequence[bytes]) -> list[DeviceImage | None]:
        """``(h, w, 3) uint8`` BGR per JPEG, None where the codec cannot decode it."""
        ...

    def encode(self, images: Sequence[DeviceImage], quality: int) -> list[bytes | None]:
        """Baseline 4:2:0 JPEG bytes per BGR image, None where encoding failed."""
        ...

    @property
    def version(self) -> str:
        """What encodes and decodes (library and version), for reports."""
        ...


class HostCodec:
    """:class:`Codec` in host memory: libjpeg-turbo through :class:`CpuPixels` (full resolution,
    strict, orientation applied). For ``GraphPixels(device="cpu")``, and as the GPU backend's
    codec when nvImageCodec is not installed (decoded on the CPU, then uploaded)."""

    oriented = True

    def __init__(self, cpu: CpuPixels, upload: Callable[[np.ndarray], DeviceImage],
                 download: Callable[[Sequence[DeviceImage]], list[np.ndarray]]) -> None:
        self.cpu = cpu
        self.upload = upload
        self.download = download

    def decode(self, datas: Sequence[bytes]) -> list[DeviceImage | None]:
        """See :class:`Codec`; corrupt data gives None (the backend then asks the CPU again,
        which names the reason)."""
        from processors.decode import probe_image

        out: list[DeviceImage | None] = []
        for data in datas:
            try:
                (d,) = self.cpu.decode([probe_image(data, self.cpu.settings)], None)
            except DecodeError:
                d = None
            out.append(self.upload(d.pixels) if isinstance(d, Decoded) else None)
        return out

    def encode(self, images: Sequence[DeviceImage], quality: int) -> list[bytes | None]:
        """See :class:`Codec` (OpenCV's libjpeg-turbo)."""
        return list(self.cpu.encode_jpeg(self.download(images), quality))

    @property
    def version(self) -> str:
        """See :class:`Codec`: OpenCV's build (its libjpeg-turbo encodes, simplejpeg decodes)."""
        import cv2

        return f"host (OpenCV {cv2.__version__})"


class GraphPixels:
    """:class:`processors.pixels.PixelBackend` on ONNX graphs, pixels in ``device`` memory.

    Args:
        runtime: runtime settings (``cuda_device_id``, ``postprocess_threads``).
        decode: decode limits (the probe's).
        device: ``cuda`` (the CUDA execution provider, device memory) or ``cpu`` (the CPU
            provider, host memory: the same code path, for tests and parity checks).
        codec: JPEG codec in ``device`` memory (default :class:`HostCodec`).

    Raises:
        ProviderError: ``device="cuda"`` without ONNX Runtime's CUDA execution provider.
    """

    name = "graphs"

    def __init__(self, runtime: RuntimeSettings, decode: DecodeSettings, device: str = "cpu",
                 codec: Codec | None = None) -> None:
        if device == "cuda":
            available = ort.get_available_providers()
            if "CUDAExecutionProvider" not in available:
                raise ProviderError(f"device=cuda requested but ONNX Runtime's providers are "
                                    f"{available}; install the `gpu` extra (CUDAExecutionProvider)")
            self.providers: list = [("CUDAExecutionProvider",
                                     cuda_provider_options(runtime, tf32=False)),
                                    "CPUExecutionProvider"]
        elif device == "cpu":
            self.providers = ["CPUExecutionProvider"]
        else:
            raise ValueError(f"device must be cuda or cpu, not {device!r}")
        self.device = device
        self.device_id = runtime.cuda_device_id if device == "cuda" else 0
        self.threads = runtime.postprocess_threads
        self.cpu = CpuPixels(decode, runtime.postprocess_threads)
        self.fallbacks = Fallbacks()
        self.codec: Codec = codec or HostCodec(self.cpu, self.upload, self.to_host)
        self._weights: OrderedDict[tuple, tuple[ort.OrtValue, ort.OrtValue]] = OrderedDict()
        self._lock = threading.Lock()
        self._orient: dict[int, ort.InferenceSession] = {}
        self._stacks: OrderedDict[int, ort.InferenceSession] = OrderedDict()
        self.graph_runs: Counter[str] = Counter()
        self._shrinks: dict[tuple[int, bool, bool], ort.InferenceSession] = {}

    # sessions ------------------------------------------------------------------------------
    def _session(self, model: onnx.ModelProto) -> ort.InferenceSession:
        """A pixel graph's session: one intra-op thread that does not spin (the graphs run on
        the device; the host only computes shapes, and images run on ``postprocess_threads``
        threads already), TF32 off on CUDA (:func:`processors.runtime.cuda_provider_options`).

        Raises:
            ProviderError: on ``cuda``, the session's first provider is not CUDA's.
        """
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.add_session_config_entry(SPINNING_KEY, "0")
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=self.providers)
        if self.device == "cuda" and sess.get_providers()[0] != "CUDAExecutionProvider":
            raise ProviderError(f"pixel graph {model.graph.name} runs on {sess.get_providers()}")
        return sess

    def _shrink_session(self, halvings: int, final: bool, grey: bool) -> ort.InferenceSession:
        """The :func:`shrink_graph` for model input (``grey`` False) or a grey working copy."""
        key = (halvings, final, grey)
        with self._lock:
            sess = self._shrinks.get(key)
        if sess is None:
            model = (shrink_graph(halvings, final, grey=GREY_BGR.tolist()) if grey else
                     shrink_graph(halvings, final, mean=IMAGENET_MEAN.tolist(),
                                  std=IMAGENET_STD.tolist(), swap_rb=True))
            sess = self._session(model)
            with self._lock:
                sess = self._shrinks.setdefault(key, sess)
        return sess

    @cached_property
    def _sample(self) -> ort.InferenceSession:
        return self._session(sample_graph(GREY_BGR.tolist()))

    @cached_property
    def _area(self) -> ort.InferenceSession:
        return self._session(resample_graph(3))

    @cached_property
    def _warp(self) -> ort.InferenceSession:
        return self._session(warp_graph(3, "bilinear", "border"))

    @cached_property
    def _copy(self) -> ort.InferenceSession:
        return self._session(copy_graph())

    def _orient_session(self, orientation: int) -> ort.InferenceSession:
        with self._lock:
            sess = self._orient.get(orientation)
            if sess is None:
                sess = self._orient[orientation] = self._session(orient_graph(orientation))
            return sess

    def start_codec(self, choice: str) -> None:
        """Use nvImageCodec (:class:`processors.gpu.nvcodec.NvImageCodec`, its images in this
        backend's memory) as the codec, per ``RuntimeSettings.cuda_codec``: ``host`` keeps the
        host codec; ``auto`` keeps it when nvImageCodec is missing or fails to start (counted as
        ``codec_start`` with the reason); ``nvimgcodec`` raises then.

        Raises:
            ProviderError: ``nvimgcodec`` and nvImageCodec did not start.
            ValueError: an unknown ``choice``.
        """
        if choice not in ("auto", "nvimgcodec", "host"):
            raise ValueError(f"codec must be auto, nvimgcodec or host, not {choice!r}")
        if choice == "host":
            return
        try:
            from processors.gpu.nvcodec import NvImageCodec

            self.codec = NvImageCodec(self.device_id, self.threads, self.device)
        except Exception as e:  # noqa: BLE001 - nvImageCodec raises its own types without a GPU
            why = (f"no module {e.name}" if isinstance(e, ModuleNotFoundError)
                   else f"{type(e).__name__}: {e}")
            if choice == "nvimgcodec":
                raise ProviderError(f"nvImageCodec unavailable: {why}") from e
            self.fallbacks.add("codec_start", 1, why)

    # memory --------------------------------------------------------------------------------
    def upload(self, image: np.ndarray) -> DeviceImage:
        """A host ``(h, w, c) uint8`` array copied into ``device`` memory."""
        arr = np.ascontiguousarray(image[..., None] if image.ndim == 2 else image, np.uint8)
        return DeviceImage.of_ortvalue(ort.OrtValue.ortvalue_from_numpy(arr, self.device,
                                                                        self.device_id),
                                       self.device_id)

    def _bind_image(self, io: ort.IOBinding, name: str, img: DeviceImage, n: int = 1) -> None:
        """Bind ``n`` images of ``img``'s shape lying back to back from ``img`` on as
        ``(n, h, w, c)``."""
        io.bind_input(name, img.device, img.device_id, np.uint8, [n, *img.shape], img.ptr)

    def _run(self, sess: ort.InferenceSession, io: ort.IOBinding, graph: str) -> None:
        """Run a bound graph and count it in ``graph_runs`` by graph (each run ends with a device
        sync: what the batching of runs of images saves)."""
        sess.run_with_iobinding(io)
        with self._lock:
            self.graph_runs[graph] += 1

    def _rows(self, value: ort.OrtValue) -> list[DeviceImage]:
        """The images of an ``(n, h, w, c) uint8`` value, each kept alive by it."""
        n, h, w, c = value.shape()
        base, step = value.data_ptr(), h * w * c
        return [DeviceImage(base + k * step, h, w, c, self.device, self.device_id, value)
                for k in range(n)]

    def _cached(self, key: tuple, make: Callable[[], tuple[np.ndarray, np.ndarray]]
                ) -> tuple[ort.OrtValue, ort.OrtValue]:
        """A pair of host arrays uploaded once per ``key`` (at most :data:`WEIGHT_CACHE`)."""
        with self._lock:
            hit = self._weights.get(key)
            if hit is not None:
                self._weights.move_to_end(key)
                return hit
        ry, rxt = make()
        pair = (ort.OrtValue.ortvalue_from_numpy(ry, self.device, self.device_id),
                ort.OrtValue.ortvalue_from_numpy(rxt, self.device, self.device_id))
        with self._lock:
            self._weights[key] = pair
            while len(self._weights) > WEIGHT_CACHE:
                self._weights.popitem(last=False)
        return pair

    def _resize(self, sess: ort.InferenceSession, img: DeviceImage, kind: str,
                dst_hw: tuple[int, int], scale: float | None = None, n: int = 1) -> ort.IOBinding:
        """Bind ``n`` images from ``img`` on and their resize weights on ``sess``; the caller
        binds the output."""
        io = sess.io_binding()
        self._bind_image(io, "image", img, n)
        src_hw = (img.height, img.width)
        ry, rxt = self._cached((kind, src_hw, dst_hw, scale),
                               lambda: resize_weights(kind, src_hw, dst_hw, scale))
        io.bind_ortvalue_input("ry", ry)
        io.bind_ortvalue_input("rxt", rxt)
        return io

    def _shrunk(self, img: DeviceImage, dst_wh: tuple[int, int], grey: bool, n: int = 1
                ) -> tuple[ort.InferenceSession, ort.IOBinding]:
        """Bind ``n`` images from ``img`` on for :func:`processors.pixels.shrink` to ``dst_wh``
        (stage sizes on the host, the closing bilinear weights cached); the caller binds the
        output."""
        crops, final = shrink_plan((img.width, img.height), dst_wh)
        sess = self._shrink_session(len(crops), final is not None, grey)
        io = sess.io_binding()
        self._bind_image(io, "image", img, n)
        if len(crops):
            io.bind_cpu_input("crops", crops)
        if final is not None:
            ry, rxt = self._cached(("linear", final[0].shape[1], final[1].shape[0], dst_wh),
                                   lambda: final)
            io.bind_ortvalue_input("ry", ry)
            io.bind_ortvalue_input("rxt", rxt)
        return sess, io

    def _device_output(self, sess: ort.InferenceSession, io: ort.IOBinding, name: str,
                       graph: str) -> ort.OrtValue:
        io.bind_output(name, self.device, self.device_id)
        self._run(sess, io, graph)
        return io.get_outputs()[0]

    def _stack_session(self, n: int) -> ort.InferenceSession:
        with self._lock:
            sess = self._stacks.get(n)
            if sess is not None:
                self._stacks.move_to_end(n)
                return sess
        sess = self._session(stack_graph(n))
        with self._lock:
            self._stacks[n] = sess
            while len(self._stacks) > STACK_SESSIONS:
                self._stacks.popitem(last=False)
        return sess

    def stack(self, images: Sequence[DeviceImage]) -> list[DeviceImage]:
        """Images of one shape in one ``(n, h, w, c)`` buffer (one ``stack`` graph run),
        returned as its rows, so that every later step binds them as one batch
        (:func:`runs`); images already back to back are returned as they are."""
        if runs(images) == [list(range(len(images)))]:
            return list(images)
        sess = self._stack_session(len(images))
        io = sess.io_binding()
        for k, img in enumerate(images):
            self._bind_image(io, f"x{k}", img)
        return self._rows(self._device_output(sess, io, "stacked", "stack"))

    def _by_codec(self, kind: str, n: int, none_why: str,
                  call: Callable[[], Sequence[_T | None]]) -> list[_T | None]:
        """``call()``'s ``n`` results from the codec, None where the host must do the work: all
        ``n`` when the call raises, else the images the codec returned None for; either way
        counted in :attr:`fallbacks` under ``kind`` with the reason (the exception, or
        ``none_why``)."""
        try:
            got = list(call())
        except Exception as e:  # noqa: BLE001 - a codec's own error types (CUDA, nvJPEG)
            self.fallbacks.add(kind, n, f"{type(e).__name__}: {e}")
            return [None] * n
        self.fallbacks.add(kind, sum(g is None for g in got), none_why)
        return got

    def synchronize(self) -> None:
        """Wait for all work on the device (``cudaDeviceSynchronize`` through ONNX Runtime's
        ``IOBinding.synchronize_inputs``): a codec may write on another stream than ONNX
        Runtime's. Nothing to wait for on the CPU."""
        if self.device == "cuda":
            self._copy.io_binding().synchronize_inputs()

    # PixelBackend --------------------------------------------------------------------------
    def decode(self, images: Sequence[EncodedImage], long_side: int | None
               ) -> list[Decoded | DecodeError]:
        """See :meth:`processors.pixels.PixelBackend.decode`: always full resolution (scale 1.0;
        nvJPEG has no DCT scaling). JPEGs go to the codec in one batch; EXIF orientation by the
        ``orient`` graph; a JPEG the codec refuses and every other format are decoded by the CPU
        backend (its strict rules and reasons) and uploaded. The decoded images of one size are
        then stacked in one buffer, in the order given (:meth:`stack`)."""
        with span(DECODE, attributes={"cardstream.decode.images": len(images),
                                     "cardstream.decode.backend": self.name}):
            return self._decode(images)

    def _decode(self, images: Sequence[EncodedImage]) -> list[Decoded | DecodeError]:
        """:meth:`decode`'s work (its span around it)."""
        out: list[DeviceImage | DecodeError | None] = [None] * len(images)
        jpegs = [i for i, im in enumerate(images) if im.format == "jpeg"]
        decoded: list[DeviceImage | None] = []
        if jpegs:
            decoded = self._by_codec("decode_host", len(jpegs), "the codec returned no image",
                                     lambda: self.codec.decode([images[i].data for i in jpegs]))
        for i, dev in zip(jpegs, decoded, strict=True):
            if dev is None:
                continue
            im = images[i]
            if not self.codec.oriented and im.orientation != 1:
                sess = self._orient_session(im.orientation)
                io = sess.io_binding()
                self._bind_image(io, "image", dev)
                dev = self._rows(self._device_output(sess, io, "oriented", "orient"))[0]
            if (dev.width, dev.height) != (im.width, im.height):
                out[i] = DecodeError(ReasonCode.CORRUPT_IMAGE,
                                     f"jpeg decoded {dev.width}x{dev.height} != header "
                                     f"{im.width}x{im.height}")
                continue
            out[i] = dev
        rest = [i for i in range(len(images)) if out[i] is None]
        for i, d in zip(rest, self.cpu.decode([images[i] for i in rest], None), strict=True):
            out[i] = self.upload(d.pixels) if isinstance(d, Decoded) else d
        shapes: dict[tuple[int, ...], list[tuple[int, DeviceImage]]] = {}
        for i, o in enumerate(out):
            if isinstance(o, DeviceImage):
                shapes.setdefault(o.shape, []).append((i, o))
        for same in shapes.values():
            rows = self.stack([o for _, o in same])
            for (i, _), row in zip(same, rows, strict=True):
                out[i] = row
        self.synchronize()
        # every index is filled: by the codec or the CPU, a DeviceImage or a DecodeError
        return [o if isinstance(o, DecodeError) else Decoded(o, o.width, o.height, 1.0)
                for o in out if o is not None]

    def model_input(self, images: Sequence[Decoded], side: int) -> DeviceBatch:
        """See :meth:`processors.pixels.PixelBackend.model_input`: a
        :class:`~processors.gpu.device.DeviceBatch` of capacity :func:`next_pow2` ``(N)``, written
        by one ``shrink`` graph run per run of images (:func:`runs`; area halvings then bilinear
        as :func:`processors.pixels.shrink`, each stage rounded); its rows in run order, the
        images' order in ``DeviceBatch.order`` when that differs."""
        n = len(images)
        value = ort.OrtValue.ortvalue_from_shape_and_type([next_pow2(n), 3, side, side],
                                                          np.float32, self.device, self.device_id)
        rows = [d.pixels for d in images]
        order: list[int] = []
        for run in runs(rows):
            sess, io = self._shrunk(rows[run[0]], (side, side), grey=False, n=len(run))
            io.bind_output("input", self.device, self.device_id, np.float32,
                           [len(run), 3, side, side],
                           value.data_ptr() + len(order) * 3 * side * side * 4)
            self._run(sess, io, "model_input")
            order += run
        return DeviceBatch(value, n, side, self.device, self.device_id,
                           None if order == list(range(n)) else tuple(order))

    def working_grey(self, images: Sequence[Decoded], max_side: int | None) -> list[np.ndarray]:
        """See :meth:`processors.pixels.PixelBackend.working_grey` (grey rounded, then
        :func:`processors.pixels.shrink` stage by stage; one run per run of images)."""
        out: list[np.ndarray] = [np.empty(0, np.uint8)] * len(images)
        rows = [d.pixels for d in images]
        for run in runs(rows):
            d = images[run[0]]
            sess, io = self._shrunk(rows[run[0]], working_size(d.width, d.height, max_side),
                                    grey=True, n=len(run))
            io.bind_output("resized", "cpu")
            self._run(sess, io, "working_grey")
            for k, grey in zip(run, io.copy_outputs_to_cpu()[0][..., 0], strict=True):
                out[k] = grey
        return out

    def sample_grey(self, image: Decoded, points: np.ndarray) -> np.ndarray:
        """See :meth:`processors.pixels.PixelBackend.sample_grey` (``sample`` graph)."""
        pts = np.ascontiguousarray(points, np.float32)
        io = self._sample.io_binding()
        self._bind_image(io, "image", image.pixels)
        io.bind_cpu_input("points", pts.reshape(-1, 2))
        io.bind_output("samples", "cpu")
        self._run(self._sample, io, "sample")
        return io.copy_outputs_to_cpu()[0].reshape(pts.shape[:-1])

    def warp(self, images: Sequence[Decoded], homographies: np.ndarray,
             sizes: Sequence[tuple[int, int]]) -> list[DeviceImage]:
        """See :meth:`processors.pixels.PixelBackend.warp`: the area pre-filter of
        :func:`processors.pixels.antialias_plan` by the ``resample`` graph, then the ``warp``
        graph, once per run of images (:func:`runs`) that share the pre-filter's factor and the
        output size; the outputs stay in ``device`` memory, back to back."""
        plans = [antialias_plan(homographies[k], sizes[k], (d.width, d.height))
                 for k, d in enumerate(images)]
        keys = [(f, wh, tuple(size)) for (f, wh, _), size in zip(plans, sizes, strict=True)]
        rows = [d.pixels for d in images]
        out: list[DeviceImage | None] = [None] * len(images)
        for run in runs(rows):
            i = 0
            while i < len(run):
                j = next((t for t in range(i + 1, len(run)) if keys[run[t]] != keys[run[i]]),
                         len(run))
                part = run[i:j]
                f, (rw, rh), _ = plans[part[0]]
                src = rows[part[0]]
                if f > 1:
                    io = self._resize(self._area, src, "area", (rh, rw), float(f), n=len(part))
                    src = self._rows(self._device_output(self._area, io, "resized", "area"))[0]
                io = self._warp.io_binding()
                self._bind_image(io, "image", src, len(part))
                io.bind_cpu_input("homography",
                                  np.stack([plans[t][2] for t in part]).astype(np.float32))
                size = sizes[part[0]]
                io.bind_cpu_input("out_hw", np.array([size[1], size[0]], np.int64))
                warped = self._rows(self._device_output(self._warp, io, "warped", "warp"))
                for k, img in zip(part, warped, strict=True):
                    out[k] = img
                i = j
        return [o for o in out if o is not None]  # the runs cover every index

    def to_host(self, images: Sequence[Any]) -> list[np.ndarray]:
        """See :meth:`processors.pixels.PixelBackend.to_host` (``copy`` graph to the host, once
        per run of images; host arrays are returned as they are)."""
        out = list(images)
        dev = [k for k, im in enumerate(images) if not isinstance(im, np.ndarray)]
        for run in runs([images[k] for k in dev]):
            io = self._copy.io_binding()
            self._bind_image(io, "x", images[dev[run[0]]], len(run))
            io.bind_output("y", "cpu")
            self._run(self._copy, io, "to_host")
            for t, arr in zip(run, io.copy_outputs_to_cpu()[0], strict=True):
                out[dev[t]] = arr
        return out

    def encode_jpeg(self, images: Sequence[Any], quality: int) -> list[bytes]:
        """See :meth:`processors.pixels.PixelBackend.encode_jpeg`: device images in one batch
        of the codec; host arrays (a card turned on the host), and device images the codec did
        not encode (an error of the whole call, or None for an image: counted as
        ``encode_host``), by the CPU backend.

        Raises:
            RuntimeError: the CPU backend failed on an image too.
        """
        out: list[bytes | None] = [None] * len(images)
        dev = [i for i, im in enumerate(images) if isinstance(im, DeviceImage)]
        if dev:
            coded = self._by_codec("encode_host", len(dev), "the codec returned no bytes",
                                   lambda: self.codec.encode([images[i] for i in dev], quality))
            for i, data in zip(dev, coded, strict=True):
                out[i] = data
        host = [i for i in range(len(images)) if out[i] is None]
        hosted = self.to_host([images[i] for i in host])
        for i, data in zip(host, self.cpu.encode_jpeg(hosted, quality), strict=True):
            out[i] = data
        done = [o for o in out if o is not None]
        if len(done) != len(out):
            raise RuntimeError("JPEG encoding failed")
        return done


class CudaPixels(GraphPixels):
    """:class:`GraphPixels` on the GPU: ``device="cuda"``, its codec chosen by
    ``RuntimeSettings.cuda_codec`` (:meth:`GraphPixels.start_codec`: nvImageCodec, or the host
    codec when it is missing or fails to start, counted in :attr:`GraphPixels.fallbacks`).

    Raises:
        ProviderError: no CUDA execution provider, or ``cuda_codec="nvimgcodec"`` and
            nvImageCodec fails to start (not installed, no CUDA device, driver too old).
    """

    name = "cuda"

    def __init__(self, runtime: RuntimeSettings, decode: DecodeSettings) -> None:
        super().__init__(runtime, decode, device="cuda")
        self.start_codec(runtime.cuda_codec)
