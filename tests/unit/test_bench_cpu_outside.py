"""benchmarks.cpu_outside: model calls recorded once, replayed exactly, divergence refused."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from benchmarks.common import BenchError
from benchmarks.cpu_outside import (
    bare_model_images_per_s,
    cpu_ms_outside_model,
    replayed_models,
)
from processors.base import Item, Outcome
from processors.decode import DecodeSettings, decode_probed
from processors.runtime import BatchedModel, ModelCall, RuntimeSettings, recorded_calls
from schemas.reasons import Status


def _model(tmp: Path) -> BatchedModel:
    """A one-node ONNX graph ``y = relu(x)``, ``x`` ``(N, 1, 8, 8) float32``."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1, 8, 8])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    path = tmp / "relu.onnx"
    onnx.save(m, str(path))
    return BatchedModel(path, None, RuntimeSettings(device="cpu", buckets=(1, 2, 4)), "relu")


class Toy:
    """Decodes, runs the model once per batch on 8x8 grey thumbnails, counts the calls."""

    task = "toy"

    def __init__(self, model: BatchedModel) -> None:
        self.model = model
        self.seen: list[np.ndarray] = []

    def process_batch(self, items):
        thumbs = []
        for it in items:
            bgr, _ = decode_probed(it.image, DecodeSettings())
            g = cv2.resize(cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY), (8, 8),
                           interpolation=cv2.INTER_AREA)
            thumbs.append(g.astype(np.float32)[None] / 255.0 - 0.5)
        (y,) = self.model.run(np.stack(thumbs))
        self.seen.append(y)
        return [Outcome(it.upload_id, Status.ACCEPTED) for it in items]


def _jpegs(n: int) -> list[bytes]:
    rng = np.random.default_rng(0)
    return [cv2.imencode(".jpg", rng.integers(0, 256, (64, 80, 3), dtype=np.uint8))[1].tobytes()
            for _ in range(n)]


def test_replay_gives_the_recorded_outputs_without_running(tmp_path) -> None:
    toy = Toy(_model(tmp_path))
    blobs = _jpegs(5)
    calls: list[ModelCall] = []
    r = cpu_ms_outside_model(toy, blobs, batch=2, rounds=2, calls=calls)
    assert r["model_calls"] == 3 and r["images"] == 5 and len(calls) == 3  # batches 2, 2, 1
    assert r["cpu_ms_per_image"] > 0 and r["wall_ms_per_image"] > 0
    # the replayed passes saw exactly what the recorded pass computed
    first, *replays = [toy.seen[k:k + 3] for k in range(0, len(toy.seen), 3)]
    for rep in replays:
        for a, b in zip(first, rep, strict=True):
            assert np.array_equal(a, b)
    assert np.array_equal(calls[0].outputs[0], np.maximum(calls[0].x, 0))
    assert toy.model.stats.calls == 3  # replays never reached the session
    assert BatchedModel.run.__name__ == "run"  # put back
    assert bare_model_images_per_s(calls, 5) > 0


def test_a_replay_that_diverges_is_refused(tmp_path) -> None:
    toy = Toy(_model(tmp_path))
    calls: list[ModelCall] = []
    with recorded_calls(calls):
        toy.process_batch([Item.from_array("a", np.zeros((40, 40, 3), np.uint8))])
    with replayed_models(calls), pytest.raises(BenchError, match="diverged"):
        toy.model.run(np.zeros((2, 1, 8, 8), np.float32))  # 2 images where 1 was recorded
    with replayed_models([]), pytest.raises(BenchError, match="more than recorded"):
        toy.model.run(np.zeros((1, 1, 8, 8), np.float32))
