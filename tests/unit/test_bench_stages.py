"""benchmarks.stages: exclusive CPU per stage, stages that add up to the pass, patches put back."""

from __future__ import annotations

import time

import processors.decode
from benchmarks.stages import StageClock, stage_cpu_ms, timed_stages
from tests.unit.test_bench_cpu_outside import Toy, _jpegs, _model


def _spin(seconds: float) -> None:
    t0 = time.process_time()
    while time.process_time() - t0 < seconds:
        pass


def test_a_stage_is_timed_without_the_stages_it_calls() -> None:
    clock = StageClock()
    inner = clock.wrap(lambda: _spin(0.03), "inner")
    outer = clock.wrap(lambda: (_spin(0.02), inner()), "outer")
    t0 = time.process_time()
    outer()
    total = time.process_time() - t0
    assert clock.calls == {"inner": 1, "outer": 1}
    assert 0.03 <= clock.seconds["inner"] < 0.045
    assert 0.02 <= clock.seconds["outer"] < 0.035  # its own 20 ms, not the inner 30
    assert abs(clock.seconds["inner"] + clock.seconds["outer"] - total) < 0.005


def test_stages_and_rest_add_up_to_the_pass_and_are_put_back(tmp_path) -> None:
    real = processors.decode.decode_probed
    toy = Toy(_model(tmp_path))
    blobs = _jpegs(4)
    stages = [("processors.decode", "decode_probed", "decode"),
              ("processors.decode", "probe_image", "probe")]
    r = stage_cpu_ms(toy, blobs, stages, batch=2, rounds=2)
    assert r["model_calls"] == 2
    assert r["calls_per_image"] == {"decode": 1.0, "probe": 1.0}
    assert r["stages_ms"]["decode"] > 0
    assert abs(sum(r["stages_ms"].values()) - r["cpu_ms_per_image"]) < 0.05
    assert processors.decode.decode_probed is real  # put back in its module
    import tests.unit.test_bench_cpu_outside as imported_by_name
    assert imported_by_name.decode_probed is real  # and where it was imported by name
    assert toy.model.stats.calls == 2  # only the recording pass ran the session


def test_timed_stages_patch_a_method_on_its_class() -> None:
    from processors.pixels import CpuPixels

    real = CpuPixels.__dict__["to_host"]
    clock = StageClock()
    with timed_stages(clock, [("processors.pixels", "CpuPixels.to_host", "to host")]):
        assert CpuPixels(processors.decode.DecodeSettings()).to_host([1, 2]) == [1, 2]
    assert clock.calls == {"to host": 1}
    assert CpuPixels.__dict__["to_host"] is real


def test_every_shipped_stage_names_a_function_of_the_processors() -> None:
    import importlib

    from benchmarks.stages import STAGES

    for task, stages in STAGES.items():
        assert len({label for _, _, label in stages}) == len(stages), task
        for mod, path, _ in stages:
            owner = importlib.import_module(mod)
            for part in path.split("."):
                owner = getattr(owner, part)
            assert callable(owner), (task, mod, path)
