"""The GPU path (``RuntimeSettings.device = "cuda"``): pixels stay on the device.

- :mod:`processors.gpu.resample` and :mod:`processors.gpu.graphs`: resize, grey, sampling,
  EXIF orientation and perspective warp as ONNX graphs (MatMul with OpenCV/Pillow weight
  matrices, AveragePool, GridSample), which ONNX Runtime runs on its CPU and CUDA execution
  providers alike; :mod:`processors.gpu.ops` runs them on host arrays.
- :mod:`processors.gpu.device`: device buffers bound to sessions by pointer (IOBinding).
- :mod:`processors.gpu.backend`: :class:`~processors.gpu.backend.GraphPixels`, the
  :class:`processors.pixels.PixelBackend` on those graphs, and
  :class:`~processors.gpu.backend.CudaPixels` (the ``cuda`` backend): CUDA provider plus
  :mod:`processors.gpu.nvcodec` (nvImageCodec), imported only when the backend is built, since
  nvImageCodec needs a CUDA device even to create its decoder.
- ``benchmarks/parity.py``: GPU path against CPU path (tests, ``benchmarks/gpu.sh``).

Nothing in this package imports an NVIDIA package at import time except
:mod:`processors.gpu.nvcodec`.
"""
