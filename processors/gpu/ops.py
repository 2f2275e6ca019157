"""The pixel graphs (:mod:`processors.gpu.graphs`) in ONNX Runtime sessions, host arrays in and out.

This is how the graphs run on the CPU execution provider (tests, the CPU half of the parity
checks) and how their results are compared with OpenCV and Pillow. The CUDA backend
(:mod:`processors.gpu.backend`) runs the same graphs with inputs and outputs bound on the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import numpy as np
import onnx
import onnxruntime as ort

from processors.gpu.graphs import prep_graph, resample_graph, warp_graph
from processors.gpu.resample import resize_weights

__all__ = ["GraphOps", "graph_session"]


def graph_session(model: onnx.ModelProto, providers: Sequence[str | tuple[str, dict]] | None = None,
                  threads: int = 0) -> ort.InferenceSession:
    """An ONNX Runtime session of a pixel graph.

    Args:
        model: the graph.
        providers: execution providers in priority order (default: the CPU one).
        threads: intra-op threads (0: ONNX Runtime's default).
    """
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=list(providers or ["CPUExecutionProvider"]))


class GraphOps:
    """Model-input preparation, resize and perspective warp on one set of providers.

    Args:
        providers: ONNX Runtime providers (default: the CPU one).
        side: model input side (px).
        threads: intra-op threads per session (0: ONNX Runtime's default).
    """

    def __init__(self, providers: Sequence[str | tuple[str, dict]] | None = None, side: int = 320,
                 threads: int = 0) -> None:
        self.providers = list(providers or ["CPUExecutionProvider"])
        self.side = side
        self.threads = threads
        self._warps: dict[tuple[int, str, str], ort.InferenceSession] = {}
        self._resamples: dict[tuple[int, bool], ort.InferenceSession] = {}

    def _session(self, model: onnx.ModelProto) -> ort.InferenceSession:
        return graph_session(model, self.providers, self.threads)

    @cached_property
    def _prep_area(self) -> ort.InferenceSession:
        return self._session(prep_graph(self.side, swap_rb=True))

    @cached_property
    def _prep_lanczos(self) -> ort.InferenceSession:
        return self._session(prep_graph(self.side, swap_rb=True, round_between=True))

    def prep(self, images_bgr: Sequence[np.ndarray], kind: str = "area") -> np.ndarray:
        """Model input of a batch: one graph call per distinct image size.

        Args:
            images_bgr: N >= 1 images ``(H_i, W_i, 3) uint8`` BGR.
            kind: ``area`` (the card detector's ``preprocess``: OpenCV ``INTER_AREA``, rounded
                once) or ``lanczos`` (rembg's ``normalize``: Pillow ``LANCZOS``, rounded per pass).

        Returns:
            ``(N, 3, side, side) float32`` in the order of ``images_bgr``.

        Raises:
            ValueError: an unknown ``kind``.
        """
        if kind not in ("area", "lanczos"):
            raise ValueError(f"kind must be area or lanczos, not {kind!r}")
        sess = self._prep_area if kind == "area" else self._prep_lanczos
        out = np.empty((len(images_bgr), 3, self.side, self.side), np.float32)
        groups: dict[tuple[int, int], list[int]] = {}
        for i, im in enumerate(images_bgr):
            groups.setdefault(im.shape[:2], []).append(i)
        for hw, idx in groups.items():
            ry, rxt = resize_weights(kind, hw, (self.side, self.side))
            batch = np.stack([images_bgr[i] for i in idx])
            out[idx] = sess.run(None, {"image": batch, "ry": ry, "rxt": rxt})[0]
        return out

    def resample(self, image: np.ndarray, dst_hw: tuple[int, int],
                 kind: str = "area") -> np.ndarray:
        """Resize one ``(H, W, C)`` or ``(H, W)`` uint8 image to ``dst_hw`` = ``(h, w)`` px.

        ``area`` rounds once (OpenCV ``INTER_AREA``), ``lanczos`` after each pass (Pillow).
        Returns the same layout as ``image``, uint8.
        """
        flat = image.ndim == 2
        x = image[..., None] if flat else image
        key = (x.shape[2], kind == "lanczos")
        sess = self._resamples.get(key)
        if sess is None:
            sess = self._resamples[key] = self._session(resample_graph(*key))
        ry, rxt = resize_weights(kind, x.shape[:2], dst_hw)
        out = sess.run(None, {"image": x[None], "ry": ry, "rxt": rxt})[0][0]
        return out[..., 0] if flat else out

    def warp(self, image: np.ndarray, homography: np.ndarray, dst_hw: tuple[int, int],
             mode: str = "bilinear", padding: str = "border") -> np.ndarray:
        """Warp one ``(H, W, C)`` or ``(H, W)`` uint8 image.

        Args:
            image: source pixels.
            homography: ``(3, 3)`` output px → source px (see :func:`graphs.warp_graph`).
            dst_hw: output ``(h, w)`` px.
            mode: ``bilinear`` or ``bicubic``.
            padding: ``border`` or ``zeros``.

        Returns:
            ``(h, w[, C]) uint8``, the layout of ``image``.
        """
        flat = image.ndim == 2
        x = image[..., None] if flat else image
        key = (x.shape[2], mode, padding)
        sess = self._warps.get(key)
        if sess is None:
            sess = self._warps[key] = self._session(warp_graph(*key))
        out = sess.run(None, {"image": x[None],
                              "homography": np.asarray(homography, np.float32)[None],
                              "out_hw": np.asarray(dst_hw, np.int64)})[0][0]
        return out[..., 0] if flat else out
