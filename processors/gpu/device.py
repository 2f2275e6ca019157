"""Buffers in the memory of an ONNX Runtime device (``cuda``, or ``cpu`` for tests), bound to
sessions by pointer.

ONNX Runtime's ``IOBinding.bind_input`` / ``bind_output`` take a device, an element type, a shape
and a raw pointer (``onnxruntime`` 1.31 ``onnxruntime_inference_collection.IOBinding``), so a
buffer can be read or written at any offset and with any shape that fits: a decoded image
``(h, w, 3)`` is bound as ``(1, h, w, 3)``, row ``k`` of a model-input batch as
``(1, 3, S, S)`` at ``ptr + k * 3 * S * S * 4``. Nothing here imports an NVIDIA package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnxruntime as ort

__all__ = ["DeviceBatch", "DeviceImage", "next_pow2"]


@dataclass(frozen=True)
class DeviceImage:
    """An ``(height, width, channels) uint8`` C-contiguous image in device memory.

    Attributes:
        ptr: address of pixel ``(0, 0, 0)``.
        height, width, channels: shape (px, px, channels).
        device: ONNX Runtime device type (``cuda`` or ``cpu``).
        device_id: device index.
        owner: what keeps the memory alive (an ``OrtValue``, an ``nvimgcodec.Image``, an array).
    """

    ptr: int
    height: int
    width: int
    channels: int
    device: str
    device_id: int
    owner: Any

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(height, width, channels)``."""
        return self.height, self.width, self.channels

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self.height * self.width * self.channels

    @property
    def __cuda_array_interface__(self) -> dict:
        """CUDA Array Interface v3 (Numba's specification), for nvImageCodec's ``as_image``:
        C-contiguous (``strides`` None), no stream to wait on (the producing ONNX Runtime run
        has synchronised its stream when it returned).

        Raises:
            AttributeError: the image is not in CUDA memory.
        """
        return self._interface("cuda", "__cuda_array_interface__")

    @property
    def __array_interface__(self) -> dict:
        """NumPy's array interface (v3) of an image in host memory (``device`` ``cpu``): what
        nvImageCodec's ``as_image`` and ``np.asarray`` read.

        Raises:
            AttributeError: the image is not in host memory.
        """
        return self._interface("cpu", "__array_interface__")

    def _interface(self, device: str, name: str) -> dict:
        """The v3 interface dict both protocols share (uint8, C-contiguous, read-write), for an
        image on ``device``.

        Raises:
            AttributeError: the image is elsewhere (so ``hasattr(img, name)`` is False).
        """
        if self.device != device:
            where = "CUDA" if device == "cuda" else "host"
            raise AttributeError(f"{name} is only defined for {where} memory")
        return {"shape": self.shape, "typestr": "|u1", "data": (self.ptr, False),
                "version": 3, "strides": None}

    @classmethod
    def of_ortvalue(cls, value: ort.OrtValue, device_id: int = 0) -> DeviceImage:
        """Wrap an ``OrtValue`` of shape ``(1, h, w, c)`` or ``(h, w, c)``, uint8.

        Raises:
            ValueError: another shape or element type.
        """
        shape = tuple(value.shape())
        if len(shape) == 4 and shape[0] == 1:
            shape = shape[1:]
        if len(shape) != 3 or value.data_type() != "tensor(uint8)":
            raise ValueError(f"expected a (1, h, w, c) uint8 tensor, got {value.shape()} "
                             f"{value.data_type()}")
        device = "cuda" if value.device_name().lower() == "cuda" else "cpu"
        return cls(value.data_ptr(), *shape, device=device, device_id=device_id, owner=value)


@dataclass(frozen=True)
class DeviceBatch:
    """A model-input batch ``(capacity, 3, side, side) float32`` in device memory; rows ``[0, n)``
    hold the images, the rest is scratch that bucket padding may read (never written back).

    Attributes:
        value: the ``OrtValue`` holding the memory.
        n: images in the batch.
        side: input side (px).
        device: ONNX Runtime device type.
        device_id: device index.
        order: ``order[r]`` is the caller's index of the image in row ``r`` (rows are written
            one run of same-size images at a time); None when row ``r`` is image ``r``.
            ``BatchedModel.run`` and :meth:`numpy` return the caller's order.
    """

    value: ort.OrtValue
    n: int
    side: int
    device: str
    device_id: int
    order: tuple[int, ...] | None = None

    @property
    def capacity(self) -> int:
        """Rows allocated (>= ``n``)."""
        return int(self.value.shape()[0])

    @property
    def row_bytes(self) -> int:
        """Bytes per image: ``3 * side * side * 4``."""
        return 3 * self.side * self.side * 4

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(n, 3, side, side)``: the shape a host array of the batch would have."""
        return self.n, 3, self.side, self.side

    def row_ptr(self, k: int) -> int:
        """Address of row ``k``."""
        return self.value.data_ptr() + k * self.row_bytes

    def numpy(self) -> np.ndarray:
        """A host copy of the images, in the caller's order: ``(n, 3, side, side) float32``."""
        return self.in_order(self.value.numpy()[: self.n])

    def in_order(self, rows: np.ndarray) -> np.ndarray:
        """Per-row results ``(n, ...)`` (e.g. the model's masks) in the caller's order."""
        return rows if self.order is None else rows[np.argsort(self.order)]


def next_pow2(n: int) -> int:
    """Smallest power of two >= ``n`` (>= 1). With power-of-two buckets, a batch of ``n`` rows
    allocated with this capacity lets every chunk be padded up to its bucket in place
    (``processors.runtime.BatchedModel.run``)."""
    return 1 << max(0, (n - 1).bit_length())
