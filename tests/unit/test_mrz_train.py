"""Fine-tuning the MRZ recogniser from its exported file (processors/card/training/mrz_train.py):
the model built from the ONNX file computes what the file computes. Needs the training extras
(torch, onnx); skipped without them."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from processors.card.mrz.recognise import CELL_H, CELL_W  # noqa: E402
from processors.card.training.mrz_train import build_model, freeze_norms, load_init  # noqa: E402
from processors.models import model_path  # noqa: E402


def test_a_model_started_from_the_shipped_file_computes_the_same_logits():
    import onnxruntime as ort

    path = model_path("mrz_char")
    x = np.random.default_rng(0).normal(size=(8, 1, CELL_H, CELL_W)).astype(np.float32)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    model = build_model()
    load_init(model, path)
    model.train()
    freeze_norms(model)  # training mode with frozen norms: only dropout differs
    model[-2].p = 0.0
    with torch.no_grad():
        got = model(torch.from_numpy(x)).numpy()
    assert np.abs(got - want).max() < 1e-4 * max(1.0, float(np.abs(want).max()))
