"""The GPU path (``RuntimeSettings.device = "cuda"``): pixels stay on the device.

- :mod:`processors.gpu.resample` and :mod:`processors.gpu.graphs`: resize and perspective warp
  as ONNX graphs (MatMul with OpenCV/Pillow-exact weight matrices, GridSample), which ONNX
  Runtime runs on its CPU and CUDA execution providers alike; :mod:`processors.gpu.ops` runs
  them on host arrays.
- :mod:`processors.gpu.cuda`: the CUDA backend (nvImageCodec decode/encode, the graphs and the
  model with inputs and outputs bound on the device). NVIDIA packages are imported there only,
  when the backend is built: nvImageCodec needs a CUDA device even to import its decoders.

Nothing in this package imports an NVIDIA package at import time.
"""
