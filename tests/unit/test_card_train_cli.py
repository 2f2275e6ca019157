"""``train --recipe shipped``: the four runs of the shipped card model chained in one command.

The training itself needs torch (the ``train`` extra) and hours; these tests replace the run
(``train._train``) with a recorder and check what each stage is given.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from processors.card.training import train

STAGE_KEYS = ("steps", "side", "lr", "seed", "frozen_convs", "cut_share", "blur_share",
              "hard_share", "grey_share", "batch", "workers", "threads", "val_every")
"""The options of a stage two recipes are compared on."""


def _options(stage, *but: str) -> list:
    """A stage's :data:`STAGE_KEYS` values, leaving out the keys in ``but``."""
    return [getattr(stage, k) for k in STAGE_KEYS if k not in but]


def _two_recipes(stages, tmp_path, first: str, second: str) -> tuple[list, list]:
    """The recorded stages of ``--recipe first`` and of ``--recipe second``, run in that order."""
    train.main(["--recipe", first, "--out", str(tmp_path / "a.onnx")])
    n = len(stages)
    train.main(["--recipe", second, "--out", str(tmp_path / "b.onnx")])
    return stages[:n], stages[n:]


@pytest.fixture
def stages(monkeypatch):
    seen = []
    monkeypatch.setattr(train, "_train", lambda a: seen.append(a))
    return seen


def test_recipe_chains_the_four_shipped_runs(stages, tmp_path):
    out, log = tmp_path / "card.onnx", tmp_path / "log.jsonl"
    train.main(["--recipe", "shipped", "--out", str(out), "--log", str(log)])
    assert [s.seed for s in stages] == [20261130, 20261201, 20261203, 20261205]
    assert [s.steps for s in stages] == [450, 150, 200, 200]
    assert [s.side for s in stages] == [256, 256, 320, 320]
    assert [s.frozen_convs for s in stages] == [44, 44, 44, 36]
    assert [s.lr for s in stages] == [1e-4, 1e-4, 1e-4, 5e-5]
    assert [(s.cut_share,
             s.blur_share) for s in stages] == [(0.0, 0.0), (0.2, 0.2), (0.1, 0.1), (0.1, 0.1)]
    assert [s.hard_share for s in stages] == [0.0] * 4
    # each stage starts from the one before; the first from the pinned u2netp
    assert stages[0].init is None
    assert [s.init for s in stages[1:]] == [s.out for s in stages[:-1]]
    assert stages[-1].out == out
    assert [s.out for s in stages[:-1]] == [tmp_path / f"card.stage{k}.onnx" for k in (1, 2, 3)]
    assert [s.log for s in stages] == [tmp_path / f"log.stage{k}.jsonl" for k in (1, 2, 3, 4)]


def test_three_stage_starts_with_two_stage_first_run(stages, tmp_path):
    # MODEL.md's 112.9 min adds the two_stage run's first stage to this chain's stages 2-3:
    # valid only while both recipes give stage 1 the same options and seed
    two, three = _two_recipes(stages, tmp_path, "two_stage", "three_stage")
    assert _options(three[0]) == _options(two[0])
    assert [(s.steps, s.side, s.frozen_convs, s.lr) for s in three] == [
        (450, 224, 44, 1e-4), (130, 320, 44, 1e-4), (180, 320, 36, 5e-5)]
    assert [s.init for s in three[1:]] == [s.out for s in three[:-1]]


def test_stage1d_frozen_is_run4_with_decoder_stage_1_frozen(stages, tmp_path):
    run4, frozen = _two_recipes(stages, tmp_path, "run4", "stage1d_frozen")
    assert [_options(s) for s in frozen] == [_options(s) for s in run4]
    assert [s.freeze_stage1d for s in run4] == [None] * 4
    assert [s.freeze_stage1d for s in frozen] == ["all"] * 4
    assert [s.init for s in frozen[1:]] == [s.out for s in frozen[:-1]]


def test_stage1d_late_trains_decoder_stage_1_in_the_last_run_only(stages, tmp_path):
    frozen, late = _two_recipes(stages, tmp_path, "stage1d_frozen", "stage1d_late")
    assert [_options(s) for s in late] == [_options(s) for s in frozen]
    assert [s.freeze_stage1d for s in late] == ["all", "all", "all", "input"]
    assert [s.init for s in late[1:]] == [s.out for s in late[:-1]]


def test_stage1d_224_moves_the_256_px_runs_to_224_and_lengthens_the_320_px_runs(stages, tmp_path):
    frozen, s224 = _two_recipes(stages, tmp_path, "stage1d_frozen", "stage1d_224")
    assert [_options(s, "steps", "side") for s in s224] == [_options(s, "steps", "side")
                                                            for s in frozen]
    assert [(s.steps, s.side) for s in s224] == [(450, 224), (150, 224), (250, 320), (250, 320)]
    assert [s.freeze_stage1d for s in s224] == ["all"] * 4
    assert [s.init for s in s224[1:]] == [s.out for s in s224[:-1]]


def test_stage1d_long_lengthens_only_the_last_run(stages, tmp_path):
    # its first three runs must stay stage1d_frozen's: their files were reused bit for bit
    frozen, long_ = _two_recipes(stages, tmp_path, "stage1d_frozen", "stage1d_long")
    assert [_options(s) for s in long_[:3]] == [_options(s) for s in frozen[:3]]
    assert _options(long_[3], "steps") == _options(frozen[3], "steps")
    assert [s.steps for s in long_] == [450, 150, 200, 250]
    assert [s.freeze_stage1d for s in long_] == ["all"] * 4
    assert [s.init for s in long_[1:]] == [s.out for s in long_[:-1]]


def test_run4_swa_is_run4_with_its_last_run_averaged_over_the_second_half(stages, tmp_path):
    # the same trajectory as run4, so OUT.last.onnx is run4's model bit for bit
    run4, swa = _two_recipes(stages, tmp_path, "run4", "run4_swa")
    assert [_options(s) for s in swa] == [_options(s) for s in run4]
    assert [s.memory_format for s in swa] == [s.memory_format for s in run4]
    assert [s.average_from for s in run4] == [None] * 4
    assert [s.average_from for s in swa] == [None, None, None, 0.5]
    assert [s.init for s in swa[1:]] == [s.out for s in swa[:-1]]
    assert swa[-1].out == tmp_path / "b.onnx"


def test_steps_scale_shortens_every_stage(stages, tmp_path, capsys):
    train.main(["--recipe", "shipped", "--out", str(tmp_path / "c.onnx"), "--steps-scale", "0.005"])
    assert [s.steps for s in stages] == [2, 1, 1, 1]
    assert all(s.log is None for s in stages)
    last = json.loads(capsys.readouterr().out.splitlines()[-1])  # the chain's summary line
    assert (last["recipe"], last["stages"], last["out"]) == ("shipped", 4, str(tmp_path / "c.onnx"))
    assert 0 <= last["elapsed_min"] < 1


@pytest.mark.parametrize("extra", [["--steps", "10"], ["--lr", "1e-3"], ["--hard-share", "0.3"],
                                   ["--freeze-stage1d"], ["--freeze-stage1d", "input"],
                                   ["--init", "x.onnx"]])
def test_recipe_refuses_options_it_sets_itself(stages, tmp_path, extra, capsys):
    with pytest.raises(SystemExit) as e:
        train.main(["--recipe", "shipped", "--out", str(tmp_path / "c.onnx"), *extra])
    assert e.value.code == 2
    assert "--recipe" in capsys.readouterr().err
    assert stages == []


def test_one_run_without_recipe_keeps_its_own_options(stages, tmp_path):
    train.main(["--out", str(tmp_path / "c.onnx"), "--steps", "10", "--seed", "5"])
    assert len(stages) == 1 and stages[0].steps == 10 and stages[0].seed == 5
    assert stages[0].init is None and stages[0].out == Path(tmp_path / "c.onnx")
    with pytest.raises(SystemExit):
        train.main(["--out", str(tmp_path / "c.onnx"), "--steps-scale", "0.5"])


def test_grey_share_turns_photos_grey():
    import numpy as np

    from processors.card.detect import IMAGENET_MEAN, IMAGENET_STD

    def rgb(x):  # undo preprocess's per-channel normalisation: (N, 3, S, S) in [0, 1]
        return x * IMAGENET_STD[None, :, None, None] + IMAGENET_MEAN[None, :, None, None]

    grey, _ = train.draw_batch(np.random.default_rng(3), 4, 64, grey_share=1.0)
    colour, _ = train.draw_batch(np.random.default_rng(3), 4, 64)
    g, c = rgb(grey), rgb(colour)
    assert np.abs(g[:, 0] - g[:, 1]).max() < 1e-4 and np.abs(g[:, 1] - g[:, 2]).max() < 1e-4
    assert np.abs(c[:, 0] - c[:, 2]).mean() > 0.02  # the generator's photos are in colour


def test_handheld_ft_continues_the_shipped_model_with_hand_held_scenes(stages, tmp_path):
    from processors.models import model_path

    train.main(["--recipe", "handheld_ft", "--out", str(tmp_path / "ft.onnx")])
    (s,) = stages
    assert s.init == model_path("card_u2netp")  # the shipped weights, not the pinned u2netp
    assert (s.steps, s.side, s.lr, s.frozen_convs, s.freeze_stage1d) == (60, 320, 4e-5, 36, "all")
    assert (s.handheld_share, s.cut_share, s.blur_share, s.val_every) == (0.35, 0.1, 0.1, 20)
    assert s.out == tmp_path / "ft.onnx"


def test_handheld_share_draws_hand_held_scenes_with_the_card_as_target():
    import numpy as np

    x, y = train.draw_batch(np.random.default_rng(5), 3, 64, handheld_share=1.0)
    assert x.shape == (3, 3, 64, 64) and y.shape == (3, 1, 64, 64)
    # every target is one card of 3-60 % of the frame (random_quad: 45-95 % of the short side)
    share = y.reshape(3, -1).mean(axis=1)
    assert ((share > 0.03) & (share < 0.6)).all()
    # the stream differs from the plain one (the hand-held scenes were drawn)
    x0, _ = train.draw_batch(np.random.default_rng(5), 3, 64)
    assert not np.allclose(x, x0)


def test_handheld_webcam_ft_is_handheld_ft_with_half_its_hand_held_scenes_held_up(stages,
                                                                                 tmp_path):
    first, second = _two_recipes(stages, tmp_path, "handheld_ft", "handheld_webcam_ft")
    (plain,), (webcam,) = first, second
    assert webcam.webcam_share == 0.5 and plain.webcam_share == 0.0
    same = ("init", "steps", "side", "lr", "frozen_convs", "freeze_stage1d", "handheld_share",
            "cut_share", "blur_share", "seed")
    assert [getattr(webcam, k) for k in same] == [getattr(plain, k) for k in same]


def test_webcam_share_changes_only_the_hand_held_scenes():
    import numpy as np

    # with no hand-held scenes the share draws nothing: the stream is the plain one
    x0, _ = train.draw_batch(np.random.default_rng(8), 3, 64)
    x1, _ = train.draw_batch(np.random.default_rng(8), 3, 64, webcam_share=1.0)
    assert np.array_equal(x0, x1)
    h0, y0 = train.draw_batch(np.random.default_rng(8), 3, 64, handheld_share=1.0)
    h1, y1 = train.draw_batch(np.random.default_rng(8), 3, 64, handheld_share=1.0,
                              webcam_share=1.0)
    assert not np.allclose(h0, h1)
    share = y1.reshape(3, -1).mean(axis=1)  # still one held card per scene
    assert ((share > 0.03) & (share < 0.6)).all()
