"""JPEG decode and encode on the GPU with NVIDIA nvImageCodec (``nvidia-nvimgcodec-cu13``).

Imported only by :class:`processors.gpu.backend.CudaPixels`: nvImageCodec needs a CUDA device
even to create its decoder. API checked against the docstrings of ``nvidia-nvimgcodec-cu13``
0.9.0.20 (``nvimgcodec_impl`` in the wheel) and NVIDIA/nvImageCodec's ``test/python``:

- ``Decoder(device_id=, max_num_cpu_threads=)``; ``Decoder.decode(list[CodeStream], params=)``
  returns a list with ``None`` where an image could not be decoded;
  ``CodeStream(bytes)`` wraps encoded bytes.
- ``DecodeParams(apply_exif_orientation=, color_spec=, allow_any_depth=, sample_format=)``: the
  EXIF orientation is left to the backend's ``orient`` graph (one reader of the tag, the probe's),
  ``ColorSpec.SRGB`` with ``SampleFormat.I_BGR``: interleaved BGR, the CPU backend's order.
- The decoded ``Image`` exposes ``__cuda_array_interface__`` (``shape (h, w, 3)``, ``typestr
  |u1``, ``data (ptr, False)``; ``strides`` None when rows are not padded).
- ``as_image(obj, *, sample_format=)`` wraps any ``__cuda_array_interface__`` object;
  ``Encoder(device_id=, max_num_cpu_threads=).encode(list, codec="jpeg", params=)`` returns
  ``CodeStream`` objects (buffer protocol: ``bytes(cs)``) or None;
  ``EncodeParams(quality_type=QualityType.QUALITY, quality_value=q,
  chroma_subsampling=ChromaSubsampling.CSS_420)``: libjpeg's quality scale, 4:2:0 as OpenCV's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

try:
    from nvidia import nvimgcodec  # needs a CUDA device and driver
except ImportError as e:  # no ``nvidia`` namespace, or one from other CUDA wheels without it
    raise ModuleNotFoundError("No module named 'nvidia.nvimgcodec'",
                              name="nvidia.nvimgcodec") from e

from processors.gpu.device import DeviceImage

__all__ = ["NvImageCodec"]


class _CudaArray(Protocol):
    """What :meth:`NvImageCodec._wrap` reads of an ``nvimgcodec.Image``: Numba's CUDA Array
    Interface (version 3: ``shape``, ``typestr``, ``data``, ``strides``)."""

    __cuda_array_interface__: dict[str, Any]


class NvImageCodec:
    """:class:`processors.gpu.backend.Codec` on nvImageCodec.

    Args:
        device_id: CUDA device index.
        threads: nvImageCodec's CPU threads (0: one per core).
        device: where the decoded images live as the backend binds them: ``cuda``, or ``cpu``
            for the test double of nvImageCodec (``tests/doubles.py``), whose images are host
            arrays.

    Raises:
        Exception: whatever nvImageCodec raises when it cannot start (no CUDA device: CUDA
            error 35; the backend counts it and keeps its host codec, or fails as configured).
    """

    oriented = False

    def __init__(self, device_id: int, threads: int = 0, device: str = "cuda") -> None:
        self.device_id = device_id
        self.device = device
        self.decoder = nvimgcodec.Decoder(device_id=device_id, max_num_cpu_threads=threads)
        self.encoder = nvimgcodec.Encoder(device_id=device_id, max_num_cpu_threads=threads)
        self.params = nvimgcodec.DecodeParams(apply_exif_orientation=False,
                                              color_spec=nvimgcodec.ColorSpec.SRGB,
                                              allow_any_depth=False,
                                              sample_format=nvimgcodec.SampleFormat.I_BGR)

    @property
    def version(self) -> str:
        """See :class:`processors.gpu.backend.Codec`: ``nvImageCodec <version>``."""
        return f"nvImageCodec {getattr(nvimgcodec, '__version__', 'unknown')}"

    def _wrap(self, img: _CudaArray) -> DeviceImage | None:
        """A decoded ``nvimgcodec.Image`` as a :class:`DeviceImage` (the image kept alive);
        None when it is not a dense 8-bit 3-channel device image."""
        cai = img.__cuda_array_interface__
        h, w, c = cai["shape"]
        dense = cai.get("strides") in (None, (w * c, c, 1))
        if c != 3 or cai["typestr"] != "|u1" or not dense:
            return None
        return DeviceImage(cai["data"][0], h, w, c, self.device, self.device_id, img)

    def decode(self, datas: Sequence[bytes]) -> list[DeviceImage | None]:
        """Decode a batch of JPEG files: ``(h, w, 3) uint8`` BGR in device memory, stored
        orientation; None where nvImageCodec returned none (the backend falls back to the CPU)."""
        images = self.decoder.decode([nvimgcodec.CodeStream(d) for d in datas], params=self.params)
        return [None if im is None else self._wrap(im) for im in images]

    def encode(self, images: Sequence[DeviceImage], quality: int) -> list[bytes | None]:
        """Encode a batch of BGR device images: baseline JPEG, 4:2:0, ``quality`` 1..100."""
        if not images:
            return []
        srcs = [nvimgcodec.as_image(im, sample_format=nvimgcodec.SampleFormat.I_BGR)
                for im in images]
        params = nvimgcodec.EncodeParams(quality_type=nvimgcodec.QualityType.QUALITY,
                                         quality_value=float(quality),
                                         chroma_subsampling=nvimgcodec.ChromaSubsampling.CSS_420)
        streams = self.encoder.encode(srcs, codec="jpeg", params=params)
        return [None if cs is None else bytes(cs) for cs in streams]
