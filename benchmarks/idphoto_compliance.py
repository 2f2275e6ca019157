"""CPU cost of the ID-photo compliance report beyond the matte (issue 39).

For phone-like 2 MP (1600x1200) and 12 MP (4032x3024) selfies
(``processors.idphoto.portraits``): the person matte and the face search run untimed; then,
timed per photo with the process's CPU clock (all threads) and the wall clock: the Face Mesh
step (the rotated 192 px crop and the model call), the chin from the mesh, and the report's
checks on the framed photo (``us_passport``, ``validate`` mode: the heaviest, the background
measured on the upload's own px).

Run: ``python -m benchmarks.idphoto_compliance [--photos N] [--passes P]``; prints medians.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import cv2
import numpy as np

from processors.idphoto.portraits import phone_portrait


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn(*args)
    return out, (time.process_time() - c0) * 1000.0, (time.perf_counter() - w0) * 1000.0


def measure(w: int, h: int, photos: int, passes: int) -> dict[str, float]:
    """Median CPU and wall ms per photo of the mesh step and of the checks."""
    from processors.idphoto.evaluation import Analyser, _decoded
    from processors.idphoto.framing import cut, head_geometry, matte_sampler, plan_frame, warp
    from processors.idphoto.inspection import fit_inside, head_with_mesh_chin, meshes, report
    from processors.idphoto.specs import get_spec

    an = Analyser.get()
    spec = get_spec("us_passport")
    mesh_cpu, mesh_wall, rep_cpu, rep_wall = [], [], [], []
    for seed in range(photos):
        img = phone_portrait(w, h, seed)
        # no Item: decoded at full resolution (scale 1.0), so person_mattes never reads it
        views, mattes = an.proc.person_mattes([None], [_decoded(img)])  # type: ignore[list-item]
        found, _ = an.proc._faces(views, mattes)
        face, matte = found[0].faces[0], found[0].matte
        head0 = head_geometry(face, matte, an.settings.matte_threshold,
                              resolution=spec.target_head_px / face.h)
        for _ in range(passes):
            ms, c, wl = _timed(meshes, an.facemesh, [(views[0].image, views[0].factor)],
                               [(face, 0)])
            m = ms[0]
            head, c2, w2 = _timed(head_with_mesh_chin, head0, m, matte.source_hw)
            mesh_cpu.append(c + c2)
            mesh_wall.append(wl + w2)
            frame = fit_inside(plan_frame(head, spec), head, matte.source_hw)
            photo = cv2.cvtColor(warp(img, frame), cv2.COLOR_BGR2RGB)
            alpha = cut(matte_sampler(matte), matte.source_hw, frame)
            _, c, wl = _timed(report, photo, alpha, m, head.crown_y, frame, spec, "validate",
                              an.compliance, matte.source_hw)
            rep_cpu.append(c)
            rep_wall.append(wl)
    med = statistics.median
    return {"mesh_cpu_ms": med(mesh_cpu), "mesh_wall_ms": med(mesh_wall),
            "checks_cpu_ms": med(rep_cpu), "checks_wall_ms": med(rep_wall),
            "total_cpu_ms": med(np.add(mesh_cpu, rep_cpu).tolist())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=int, default=3)
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args(argv)
    print("| input | mesh step CPU ms | checks CPU ms | report total CPU ms | mesh wall ms "
          "| checks wall ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, (w, h) in (("2 MP", (1600, 1200)), ("12 MP", (4032, 3024))):
        r = measure(w, h, args.photos, args.passes)
        print(f"| {name} | {r['mesh_cpu_ms']:.1f} | {r['checks_cpu_ms']:.1f} | "
              f"{r['total_cpu_ms']:.1f} | {r['mesh_wall_ms']:.1f} | {r['checks_wall_ms']:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
