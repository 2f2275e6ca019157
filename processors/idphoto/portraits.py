"""Portrait inputs made by the project's own code from scikit-image's public-domain astronaut.

``phone_portrait`` is a phone-like selfie scene at a given size (the benchmarks' 2 MP 1600x1200
and 12 MP 4032x3024 inputs); ``framing_set`` is the set of scaled, placed, turned and mirrored
variants on which ``benchmarks.idphoto_framing`` compares two versions of the framing.
"""

from __future__ import annotations

import cv2
import numpy as np


def astronaut_bgr() -> np.ndarray:
    """scikit-image's astronaut portrait, ``(512, 512, 3) uint8`` BGR."""
    from skimage import data

    return np.ascontiguousarray(data.astronaut()[..., ::-1])


def _backdrop(w: int, h: int, rng: np.random.Generator, cell: int = 40) -> np.ndarray:
    """A smooth, textured wall ``(h, w, 3) uint8`` BGR (random colours upscaled, light noise)."""
    low = rng.integers(70, 200, (h // cell + 2, w // cell + 2, 3), dtype=np.uint8)
    wall = cv2.resize(low, (w, h), interpolation=cv2.INTER_CUBIC)
    noise = rng.normal(0.0, 4.0, (h, w, 1)).astype(np.float32)
    return np.clip(wall.astype(np.float32) + noise, 0, 255).astype(np.uint8)


def place(person: np.ndarray, w: int, h: int, height_share: float, x_share: float,
          angle_deg: float, rng: np.random.Generator) -> np.ndarray:
    """``person`` (BGR) scaled to ``height_share`` of an ``(h, w)`` wall, its bottom on the
    bottom edge, its centre at ``x_share`` of the width, turned by ``angle_deg`` (counter-
    clockwise, about its centre); the portrait's own backdrop comes with it (as in a photo).

    Returns:
        ``(h, w, 3) uint8`` BGR.
    """
    side = max(16, int(round(h * height_share)))
    interp = cv2.INTER_AREA if side < person.shape[0] else cv2.INTER_CUBIC
    p = cv2.resize(person, (side, side), interpolation=interp)
    if angle_deg:
        m = cv2.getRotationMatrix2D((side / 2, side / 2), angle_deg, 1.0)
        p = cv2.warpAffine(p, m, (side, side), flags=cv2.INTER_LINEAR,
                           borderMode=cv2.BORDER_REFLECT)
    out = _backdrop(w, h, rng)
    x0 = int(round(x_share * w - side / 2))
    xa, xb = max(0, x0), min(w, x0 + side)
    ya = max(0, h - side)
    out[ya:, xa:xb] = p[side - (h - ya):, xa - x0 : xb - x0]
    return out


def phone_portrait(w: int, h: int, seed: int = 0) -> np.ndarray:
    """A selfie-like scene: the astronaut filling 90 % of the height of a ``w x h`` frame.

    Args:
        w, h: frame size (px), e.g. 1600x1200 (2 MP) or 4032x3024 (12 MP).
        seed: the backdrop's random seed.

    Returns:
        ``(h, w, 3) uint8`` BGR.
    """
    return place(astronaut_bgr(), w, h, 0.9, 0.5, 0.0, np.random.default_rng(seed))


def framing_set(seed: int = 7) -> list[tuple[str, np.ndarray]]:
    """Named portraits for framing comparisons (BGR): the astronaut as is, mirrored and at
    eight scales; placed on walls of 1024x768, 1600x1200 and 4032x3024 at several heights,
    positions and small turns (-4..4 degrees); 37 images in all, deterministic."""
    rng = np.random.default_rng(seed)
    astro = astronaut_bgr()
    out: list[tuple[str, np.ndarray]] = [("astronaut", astro),
                                         ("astronaut_mirrored",
                                          np.ascontiguousarray(astro[:, ::-1]))]
    for s in (0.75, 0.9, 1.1, 1.3, 1.6, 2.0, 2.5, 3.0):
        interp = cv2.INTER_AREA if s < 1 else cv2.INTER_CUBIC
        out.append((f"scaled_{s:g}", cv2.resize(astro, None, fx=s, fy=s, interpolation=interp)))
    for w, h in ((1024, 768), (1600, 1200), (4032, 3024)):
        for i in range(9):
            share = float(rng.uniform(0.55, 1.0))
            xs = float(rng.uniform(0.35, 0.65))
            ang = float(rng.uniform(-4.0, 4.0))
            person = astro[:, ::-1] if i % 2 else astro
            out.append((f"scene_{w}x{h}_{i}", place(np.ascontiguousarray(person), w, h, share, xs,
                                                    ang, rng)))
    return out
