"""CPU ms per image of each stage of a processor's work around its model (issue 29).

The model calls are replayed from a recording (:mod:`benchmarks.cpu_outside`), so what is timed
is exactly the work around the model; each stage is a function or method of the processors,
timed with ``time.process_time`` (CPU of every thread of the process) and counted *exclusive*
of the stages it calls, so the stages and the rest add up to the pass's total. Run it with one
post-processing thread (``--threads 1``, the default) to read the figures as one thread's work.

    python -m benchmarks.stages --task card --size 2mp --images 8 --bucket 1
    python -m benchmarks.stages --task id_photo --size 12mp --images 8 --bucket 4

prints one JSON object as its last line: ``cpu_ms_per_image`` (the pass's total), ``stages_ms``
(stage -> ms per image, ``rest`` = total minus the stages: Python glue, outcomes, logging),
``calls_per_image`` and the load average at start and end. The model's own time (u2netp, the card's
orientation classifier, MTCNN's three nets) is not in any of them: it is
``bare_model_images_per_s``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from statistics import median
from typing import Any

from benchmarks.cpu_outside import _items, replayed_models
from processors.base import Processor
from processors.decode import DecodeSettings
from processors.runtime import ModelCall, recorded_calls

#: A stage: (module, attribute path in it, label). A dotted path names a method of a class.
Stage = tuple[str, str, str]


def parse_stages(table: str) -> tuple[Stage, ...]:
    """Stages from lines ``module attribute.path | label`` (blank lines skipped)."""
    out = []
    for line in filter(str.strip, table.splitlines()):
        where, label = line.split("|", 1)
        mod, path = where.split()
        out.append((mod, path, label.strip()))
    return tuple(out)


COMMON = """
processors.decode probe_image | header probe
processors.decode decode_probed | decode (libjpeg-turbo, DCT scaling)
processors.pixels warp_host | warps
"""
#: The card processor's stages (``processors.card``).
CARD = parse_stages(COMMON + """
processors.pixels CpuPixels.model_input | model input (shrink + normalise)
processors.pixels CpuPixels.working_grey | grey working copy
processors.card.detect detect_from_mask | mask -> quad (side search, line fits)
processors.pixels CpuPixels.sample_grey | full-resolution edge samples
processors.card.scan judge | scan path (the frame judged as the document)
processors.card.orient thumb_input | orientation classifier input
processors.card.rectify laplacian_variance | blur verdict
processors.card.rectify direction_detail_ratio | blur direction verdict
processors.card.rectify saturated_fraction | glare verdict
processors.card.verify Verifier.views | MRZ bands (grey; their warps are in warps)
processors.card.mrz.read locate_zones | MRZ locate (black-hat, components) + line crops
processors.card.mrz.read MrzReader.read | MRZ reading glue (cells, check digits)
processors.card.quality measure | quality measures
processors.card.verify Verifier._portraits | portrait zone canvases
processors.mtcnn Mtcnn.detect | portrait MTCNN glue
processors.pixels CpuPixels.encode_jpeg | JPEG encode
""")
#: The ID-photo processor's stages (``processors.idphoto``, ``processors.mtcnn``).
ID_PHOTO = parse_stages(COMMON + """
processors.idphoto.processor work_view | working copy (shrink)
processors.idphoto.matting preprocess | matting input (rembg's PIL LANCZOS)
processors.idphoto.matting normalise | matte min-max
processors.idphoto.processor IdPhotoProcessor._canvases | MTCNN canvases
processors.mtcnn Mtcnn.mosaic | MTCNN mosaic
processors.mtcnn crops | MTCNN crops
processors.mtcnn _nms | MTCNN NMS
processors.mtcnn Mtcnn._proposals | MTCNN proposals
processors.mtcnn Mtcnn.detect | MTCNN other glue
processors.idphoto.framing head_geometry | head geometry
processors.idphoto.framing cut | photo alpha from the matte
processors.idphoto.framing alpha_matting_rgba | alpha matting
processors.idphoto.framing composite | compositing
processors.idphoto.output encode | JPEG encode (JFIF dpi)
processors.idphoto.facemesh FaceMesh.landmarks | Face Mesh crops and glue
processors.idphoto.compliance measure | compliance checks
""")
STAGES: dict[str, tuple[Stage, ...]] = {"card": CARD, "id_photo": ID_PHOTO}


class StageClock:
    """Exclusive process CPU seconds and calls per stage label (see :func:`timed_stages`)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._open: list[float] = []  # CPU of the stages called inside each open stage

    def wrap(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        """``fn`` timed under ``label``."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.process_time()
            self._open.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                inner = self._open.pop()
                dt = time.process_time() - t0
                self.seconds[label] += dt - inner
                self.calls[label] += 1
                if self._open:
                    self._open[-1] += dt

        timed.__wrapped__ = fn  # type: ignore[attr-defined]  # inspect.unwrap finds the original
        return timed


@contextmanager
def timed_stages(clock: StageClock, stages: Sequence[Stage]) -> Iterator[None]:
    """Inside: every stage's function is replaced by ``clock``'s timed wrapper, in its own module
    and in every loaded module that imported it by name; a method is replaced on its class.
    Everything is put back on exit."""
    undo: list[tuple[object, str, object]] = []
    try:
        for mod_name, path, label in stages:
            owner: object = importlib.import_module(mod_name)
            *outer, name = path.split(".")
            for part in outer:
                owner = getattr(owner, part)
            raw = vars(owner)[name]
            if isinstance(raw, staticmethod):
                new: object = staticmethod(clock.wrap(raw.__func__, label))
            else:
                new = clock.wrap(raw, label)
            holders = [owner] if outer else [m for m in list(sys.modules.values())
                                             if m is not None and vars(m).get(name) is raw]
            for h in holders:
                undo.append((h, name, raw))
                setattr(h, name, new)
        yield
    finally:
        for h, name, raw in reversed(undo):
            setattr(h, name, raw)


def stage_cpu_ms(proc: Processor, blobs: Sequence[bytes], stages: Sequence[Stage], batch: int = 1,
                 rounds: int = 3, dec: DecodeSettings | None = None) -> dict[str, Any]:
    """Per-stage CPU ms per image of ``proc`` on ``blobs``, model calls replayed.

    Args:
        proc: a warmed-up processor (its ``postprocess_threads`` decide the threads).
        blobs: encoded uploads.
        stages: what to time (:data:`CARD`, :data:`ID_PHOTO` or any :data:`Stage` list).
        batch: items per ``process_batch`` call (the bucket).
        rounds: replayed passes timed (each stage summed over them).
        dec: probe limits (default :class:`DecodeSettings`).

    Returns:
        ``{"cpu_ms_per_image", "per_round_ms", "stages_ms", "calls_per_image", "model_calls"}``:
        ``stages_ms`` maps each label to exclusive CPU ms per image, plus ``rest``.

    Raises:
        benchmarks.common.BenchError: a replayed pass diverged from the recording.
    """
    dec = dec or DecodeSettings()

    def one_pass() -> None:
        items = _items(blobs, dec, {})
        for k in range(0, len(items), batch):
            proc.process_batch(items[k:k + batch])

    calls: list[ModelCall] = []
    with recorded_calls(calls):
        one_pass()
    clock, totals = StageClock(), []
    with timed_stages(clock, stages):
        for _ in range(rounds):
            with replayed_models(calls):
                c0 = time.process_time()
                one_pass()
                totals.append(time.process_time() - c0)
    per = len(blobs) * rounds
    ms = {k: round(v * 1000.0 / per, 2) for k, v in sorted(clock.seconds.items(),
                                                            key=lambda kv: -kv[1])}
    total = sum(totals) * 1000.0 / per
    ms["rest"] = round(total - sum(clock.seconds.values()) * 1000.0 / per, 2)
    return {"cpu_ms_per_image": round(total, 2),
            "per_round_ms": [round(t * 1000.0 / len(blobs), 2) for t in totals],
            "median_round_ms": round(median(totals) * 1000.0 / len(blobs), 2),
            "stages_ms": ms, "calls_per_image": {k: round(v / per,
                                                          2) for k, v in clock.calls.items()},
            "model_calls": len(calls)}


def main(argv: list[str] | None = None) -> int:
    """CLI: see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", choices=sorted(STAGES), default="card")
    ap.add_argument("--size", default="2mp", help="benchmarks.phone.SIZES key (2mp, 12mp)")
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--bucket", type=int, default=1, help="model bucket = items per process_batch")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="post-processing threads")
    a = ap.parse_args(argv)
    from benchmarks.phone import SIZES, scenes
    from benchmarks.run import build
    from streams.logs import configure_logging
    from streams.settings import load_settings

    configure_logging("WARNING")  # as benchmarks.run: per-item debug lines are not the work
    load0 = os.getloadavg()[0]
    base = load_settings()
    proc = build(base, a.task, [a.bucket], "cpu", threads=a.threads)
    res = stage_cpu_ms(proc, scenes(a.task, SIZES[a.size], a.images), STAGES[a.task], a.bucket,
                       a.rounds, base.decode)
    print(json.dumps({"task": a.task, "size": a.size, "images": a.images, "bucket": a.bucket,
                      "threads": a.threads, **res,
                      "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
