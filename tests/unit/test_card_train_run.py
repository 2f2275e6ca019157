"""A real (tiny) training run of ``processors.card.training.train`` in two data-parallel workers.

Needs the ``train`` extra (torch, onnx2torch), which ``make test`` does not install: the module
skips without it and says so. Run it with ``pip install -e '.[cpu,train]'`` (about 1 min on 2
cores: two steps at 64 px, the two workers' start-up included).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch", reason="needs the train extra: pip install -e '.[cpu,train]'")
pytest.importorskip("onnx2torch", reason="needs the train extra: pip install -e '.[cpu,train]'")

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from processors.card.training import train  # noqa: E402
from processors.models import model_path  # noqa: E402


def _conv_weights(path) -> list[np.ndarray]:
    """The Conv nodes' weight arrays in graph order."""
    m = onnx.load(str(path))
    inits = {i.name: i for i in m.graph.initializer}
    return [numpy_helper.to_array(inits[n.input[1]]) for n in m.graph.node if n.op_type == "Conv"]


def test_two_workers_train_the_unfrozen_convs_only(tmp_path):
    out, log = tmp_path / "card.onnx", tmp_path / "log.jsonl"
    train.main(["--out", str(out), "--log", str(log), "--steps", "2", "--side", "64",
                "--batch", "4", "--workers", "2", "--val-every", "1", "--frozen-convs", "36"])
    base, trained = _conv_weights(model_path("u2netp")), _conv_weights(out)
    assert len(base) == len(trained) == 119
    # the frozen encoder stages 1-3 are the pretrained weights bit for bit
    assert all(np.array_equal(b, t) for b, t in zip(base[:36], trained[:36], strict=True))
    changed = [not np.array_equal(b, t) for b, t in zip(base[36:], trained[36:], strict=True)]
    assert sum(changed) == len(changed)  # every trained conv moved
    # the same graph: node names, op types and I/O names unchanged
    gb, gt = onnx.load(str(model_path("u2netp"))).graph, onnx.load(str(out)).graph
    assert [(n.name, n.op_type) for n in gb.node] == [(n.name, n.op_type) for n in gt.node]
    assert [i.name for i in gt.input] == [i.name for i in gb.input]
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in recs] == [0, 1, 2]  # written once (rank 0), not once per worker
    assert all(0.0 <= r["val_mask_iou"] <= 1.0 for r in recs)
    assert all(r["loss"] > 0 for r in recs[1:])
    # strict JSON: null, no step yet
    assert recs[0]["loss"] is None and "NaN" not in log.read_text()


def test_batch_must_split_evenly_between_the_workers(tmp_path):
    with pytest.raises(SystemExit, match="multiple of --workers"):
        train.main(["--out", str(tmp_path / "c.onnx"), "--steps", "1", "--batch", "5",
                    "--workers", "2"])


def _converted_convs():
    """The pinned u2netp as a PyTorch module and its ``(name, Conv2d)`` in graph order."""
    return train.to_torch(model_path("u2netp").read_bytes())


def test_cut_stage1d_stops_every_gradient_through_decoder_stage_1():
    import torch

    x = torch.from_numpy(np.random.default_rng(0).normal(size=(1, 3, 64, 64)).astype(np.float32))

    def grad_into_stage2d(cut: bool) -> float:
        """Gradient (sum of |dL/dw|) reaching decoder stage 2 (convs 86-97, RSU-6, which feeds
        stage 1d) from a loss on side output 1 alone (stage 1d -> side conv 1)."""
        net, convs = _converted_convs()
        if cut:
            train._cut_stage1d(convs)
        net(x)[1].sum().backward()
        return sum(float(m.weight.grad.abs().sum()) for _, m in convs[86:98]
                   if m.weight.grad is not None)

    assert grad_into_stage2d(cut=False) > 0
    assert grad_into_stage2d(cut=True) == 0.0


def test_cut_stage1d_refuses_another_layout():
    _, convs = _converted_convs()
    with pytest.raises(ValueError, match="u2netp"):
        train._cut_stage1d(convs[:112])


@pytest.mark.parametrize(("flag", "kept"), [([], list(train.STAGE1D_CONVS)),  # bare: all
                                            (["all"], list(train.STAGE1D_CONVS)),
                                            (["input"], [98])])
def test_freeze_stage1d_run_keeps_decoder_stage_1_pretrained(tmp_path, flag, kept):
    out = tmp_path / "card.onnx"
    train.main(["--out", str(out), "--steps", "1", "--side", "64", "--batch", "2",
                "--workers", "1", "--val-every", "1", "--freeze-stage1d", *flag])
    base, trained = _conv_weights(model_path("u2netp")), _conv_weights(out)
    moved = [k for k in range(119) if not np.array_equal(base[k], trained[k])]
    assert moved == [k for k in range(44, 119) if k not in kept]


def test_channels_last_trains_the_same_model_as_contiguous_up_to_float_rounding(tmp_path):
    weights = {}
    for fmt in ("contiguous", "channels_last"):
        out = tmp_path / f"{fmt}.onnx"
        train.main(["--out", str(out), "--steps", "2", "--side", "64", "--batch", "2",
                    "--workers", "1", "--threads", "1", "--val-every", "2",
                    "--memory-format", fmt])
        weights[fmt] = _conv_weights(out)
    base = np.concatenate([w.ravel() for w in _conv_weights(model_path("u2netp"))])
    cont, last = (np.concatenate([w.ravel() for w in weights[f]])
                  for f in ("contiguous", "channels_last"))
    # the ONNX file holds the weights in (O, I, kH, kW) order either way, and the two layouts
    # differ only by float rounding: far less than what the two Adam steps moved the weights
    # (Adam's first steps are about +-lr per weight, so a weight whose gradient is near 0 may
    # flip sign between them: compared as whole-vector L2 norms, not weight by weight)
    moved = float(np.linalg.norm(cont - base))
    assert moved > 1e-3
    assert float(np.linalg.norm(cont - last)) < moved / 10



@pytest.mark.parametrize(("fraction", "averaged"), [("0.5", 2), ("0.9", 1)])
def test_average_from_writes_the_mean_of_the_last_steps_and_the_last_step_apart(
        tmp_path, capsys, fraction, averaged):
    out, log = tmp_path / "card.onnx", tmp_path / "log.jsonl"
    train.main(["--out", str(out), "--log", str(log), "--steps", "3", "--side", "64",
                "--batch", "2", "--workers", "1", "--threads", "1", "--val-every", "3",
                "--average-from", fraction])
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    # steps ceil(fraction * 3) to 3 are averaged: 2 and 3 for 0.5, only 3 for 0.9
    assert summary["averaged_steps"] == averaged
    assert summary["last"] == str(tmp_path / "card.last.onnx")
    base = _conv_weights(model_path("u2netp"))
    mean, last = _conv_weights(out), _conv_weights(tmp_path / "card.last.onnx")
    # the frozen encoder stages 1-4 are the pretrained weights in both files
    assert all(np.array_equal(b, m) and np.array_equal(b, w)
               for b, m, w in zip(base[:44], mean[:44], last[:44], strict=True))
    same = [np.array_equal(m, w) for m, w in zip(mean[44:], last[44:], strict=True)]
    if averaged == 1:
        assert all(same)  # the mean of one step is that step's weights, bit for bit
    else:
        assert not any(same)  # every trained conv moved between steps 2 and 3
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in recs] == [0, 3, 3]
    assert "val_mask_iou" in recs[1] and 0.0 <= recs[2]["val_mask_iou_averaged"] <= 1.0


@pytest.mark.parametrize("fraction", ["1", "-0.1"])
def test_average_from_must_be_a_fraction_below_one(tmp_path, fraction):
    with pytest.raises(SystemExit, match="average-from"):
        train.main(["--out", str(tmp_path / "c.onnx"), "--steps", "1", "--average-from",
                    fraction])
