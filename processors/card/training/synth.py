"""Seeded synthetic card photos: card faces composited by random homographies onto backgrounds.

Sources (all free to use): scikit-image's bundled sample images (public domain / CC0 per
``skimage.data``: ``astronaut`` portrait, ``coffee``, ``chelsea``, ``rocket``,
``hubble_deep_field``, ``immunohistochemistry``, ``brick``, ``grass``, ``gravel``, ``moon``,
``camera``, ``horse``, ``coins``, ``clock``, ``text``, ``page``), and procedurally generated
gradients, guilloche, text and noise. No real identity document is used.

Card faces follow ISO/IEC 7810 sizes: ID-1 85.60 x 53.98 mm (corner radius 3.18 mm) and ID-3
125 x 88 mm (passport data page, ICAO 9303 TD3, with a two-line MRZ at the bottom). The portrait
sits on the left of the face, upright, as on ID-1 cards and TD3 pages.

Command line (writes images + ``manifest.json`` in the ``shared/cases`` format)::

    python -m processors.card.training.synth --out DIR --n 500 --seed 20261129
    # with the classes of issue 44 after the 500 (the 500 unchanged):
    python -m processors.card.training.synth --out DIR --n 500 --seed 20261129 \
        --scans 80 --handhelds 80 --frame-negatives 40
    # the hand-held card held up to a camera, a person behind it (session 63)
    python -m processors.card.training.synth --out DIR --n 0 --seed 20261129 --webcam-handhelds 80
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import cv2
import numpy as np

from processors.logs import configure_logging

ID1_MM = (85.60, 53.98)
"""ISO/IEC 7810 ID-1 width x height (mm)."""
ID3_MM = (125.0, 88.0)
"""ISO/IEC 7810 ID-3 width x height (mm)."""
ID1_CORNER_MM = 3.18
"""ISO/IEC 7810 ID-1 corner radius (mm)."""

_TEXTURES = ("brick", "grass", "gravel", "moon", "camera", "coins", "text", "page", "clock")
_PHOTOS = ("coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry",
           "astronaut", "horse")


@cache
def _skimage(name: str) -> np.ndarray:
    """A bundled scikit-image sample as ``(H, W, 3) uint8`` BGR."""
    import skimage.data

    im = getattr(skimage.data, name)()
    if im.dtype != np.uint8:
        im = (255 * (im.astype(np.float64) / max(float(im.max()), 1e-9))).astype(np.uint8)
    if im.ndim == 2:
        im = cv2.cvtColor(im, cv2.COLOR_GRAY2BGR)
    elif im.shape[2] == 4:
        im = im[:, :, :3]
        im = cv2.cvtColor(im, cv2.COLOR_RGB2BGR)
    else:
        im = cv2.cvtColor(im, cv2.COLOR_RGB2BGR)
    return np.ascontiguousarray(im)


@cache
def _portrait() -> np.ndarray:
    """The astronaut's head and shoulders (skimage ``astronaut``, public domain), BGR."""
    return _skimage("astronaut")[10:290, 110:330].copy()


def _words(rng: np.random.Generator, n: int, upper: bool = True) -> str:
    letters = string.ascii_uppercase if upper else string.ascii_letters
    return " ".join("".join(rng.choice(list(letters), size=int(rng.integers(2, 9))))
                    for _ in range(n))


def _guilloche(face: np.ndarray, rng: np.random.Generator) -> None:
    h, w = face.shape[:2]
    colour = tuple(int(c) for c in rng.integers(90, 220, 3))
    x = np.linspace(0, w, 400)
    for k in range(int(rng.integers(4, 12))):
        f1, f2 = rng.uniform(2, 9), rng.uniform(5, 20)
        ph = rng.uniform(0, 2 * np.pi)
        y = h * (0.5 + 0.35 * np.sin(2 * np.pi * f1 * x / w + ph)
                 * np.cos(2 * np.pi * f2 * x / w + k))
        pts = np.stack([x, y], 1).astype(np.int32)
        cv2.polylines(face, [pts], False, colour, 1, cv2.LINE_AA)


def render_face(rng: np.random.Generator, doc_type: str = "id_card",
                width: int = 856, portrait: str | None = None,
                blank: bool | None = None,
                band_bgr: tuple[int, int, int] | None = None,
                fake_mrz: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Render a fictitious card face.

    Args:
        rng: random generator.
        doc_type: ``id_card`` (ID-1 aspect 85.60:53.98) or ``passport`` (ID-3 aspect 125:88).
        width: face width (px).
        portrait: ``photo`` (the astronaut), ``drawn`` (a silhouette), ``none`` (no portrait,
            e.g. the back of an ID card) or None (85 % photo).
        blank: an unprinted card (plain, light; no band, text or portrait); None draws it
            (6 %) from ``rng``, a bool forces it without drawing.
        band_bgr: colour of the header band when one is drawn (default: random), e.g. close to
            the background's so the band's edge is hard to tell from the scene's.
        fake_mrz: a passport page gets two lines of random MRZ-like characters at the bottom
            (off: the bottom is left for a real zone, :mod:`processors.card.training.documents`).

    Returns:
        ``(face, alpha)``: ``(h, width, 3) uint8`` BGR and ``(h, width) uint8`` alpha (255 on
        the card, 0 outside its rounded corners).
    """
    mm = ID1_MM if doc_type == "id_card" else ID3_MM
    h = int(round(width * mm[1] / mm[0]))
    base = rng.integers(120, 236, 3).astype(np.float32)
    tint = rng.integers(-40, 40, 3).astype(np.float32)
    gy, gx = np.mgrid[0:h, 0:width].astype(np.float32)
    a = rng.uniform(0, 2 * np.pi)
    ramp = (np.cos(a) * gx / width + np.sin(a) * gy / h)[..., None]
    face = np.clip(base + tint * ramp, 0, 240).astype(np.uint8)
    if blank is None:
        blank = bool(rng.random() < 0.06)
    if blank:
        face = np.clip(rng.integers(190, 250) + tint * 0.3 * ramp, 0, 255).astype(np.uint8)
    elif rng.random() < 0.7:  # faint texture
        tex = _skimage(str(rng.choice(_TEXTURES)))
        tex = cv2.resize(tex, (width, h)).astype(np.float32)
        alpha_t = rng.uniform(0.05, 0.25)
        face = np.clip(face * (1 - alpha_t) + tex * alpha_t, 0, 240).astype(np.uint8)
    if blank:
        return face, _rounded_alpha(width, h, doc_type)
    _guilloche(face, rng)
    # header band
    band_h = int(h * rng.uniform(0.10, 0.18))
    if rng.random() < 0.8:
        colour = tuple(int(c) for c in rng.integers(30, 200, 3))
        if band_bgr is not None:
            colour = band_bgr
        cv2.rectangle(face, (0, 0), (width, band_h), colour, -1)
        cv2.putText(face, _words(rng, int(rng.integers(1, 4))),
                    (int(0.04 * width), int(band_h * 0.72)), cv2.FONT_HERSHEY_DUPLEX,
                    band_h / 45.0, (245, 245, 245), 2, cv2.LINE_AA)
    # coloured stripe along one short side (many ID-1 cards have one)
    stripe = 0
    if rng.random() < 0.3:
        stripe = int(width * rng.uniform(0.06, 0.2))
        colour = tuple(int(c) for c in rng.integers(20, 200, 3))
        if rng.random() < 0.5:
            cv2.rectangle(face, (width - stripe, 0), (width, h), colour, -1)
            stripe = 0
        else:
            cv2.rectangle(face, (0, 0), (stripe, h), colour, -1)
    # portrait on the left
    px0, py0 = stripe + int(0.05 * width), int(band_h + 0.06 * h)
    ph = int(h * (0.52 if doc_type == "id_card" else 0.5))
    pw = int(ph * 0.78)
    photo = rng.random() < 0.85
    if portrait is not None:
        photo = portrait == "photo"
    if portrait == "none":
        pass
    elif photo:
        por = cv2.resize(_portrait(), (pw, ph), interpolation=cv2.INTER_AREA)
        if rng.random() < 0.3:
            por = cv2.cvtColor(cv2.cvtColor(por, cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)
        face[py0:py0 + ph, px0:px0 + pw] = por
    else:  # drawn silhouette
        cv2.rectangle(face, (px0, py0), (px0 + pw, py0 + ph), (200, 200, 200), -1)
        cv2.ellipse(face, (px0 + pw // 2, py0 + int(ph * 0.38)), (pw // 4, ph // 5), 0, 0, 360,
                    (90, 110, 150), -1)
        cv2.ellipse(face, (px0 + pw // 2, py0 + ph), (pw // 2, ph // 3), 0, 180, 360,
                    (60, 60, 90), -1)
    # text lines on the right
    tx = px0 + pw + int(0.05 * width)
    y = py0 + int(0.05 * h)
    dark = tuple(int(c) for c in rng.integers(0, 70, 3))
    while y < h * (0.78 if doc_type == "passport" else 0.92):
        scale = h / rng.uniform(380, 600)
        cv2.putText(face, _words(rng, int(rng.integers(1, 4)), bool(rng.random() < 0.7)), (tx, y),
                    cv2.FONT_HERSHEY_SIMPLEX, scale, dark, 1 + int(rng.random() < 0.5), cv2.LINE_AA)
        y += int(h * rng.uniform(0.07, 0.12))
    if doc_type == "passport" and fake_mrz:  # ICAO 9303 TD3 machine-readable zone: 2 x 44
        fs = width / 1150.0
        for k, yy in enumerate((0.86, 0.95)):
            line = "".join(rng.choice(list(string.ascii_uppercase + "<<<<0123456789"), 44))
            if k == 0:
                line = "P<" + line[2:]
            cv2.putText(face, line, (int(0.03 * width), int(h * yy)), cv2.FONT_HERSHEY_PLAIN,
                        fs * 2.2, (20, 20, 20), 2, cv2.LINE_AA)
    if rng.random() < 0.4:  # hologram: translucent rainbow ellipse
        holo = face.copy()
        cx, cy = int(rng.uniform(0.55, 0.9) * width), int(rng.uniform(0.3, 0.8) * h)
        for k in range(6):
            col = cv2.cvtColor(np.array([[[k * 30, 160, 230]]], np.uint8), cv2.COLOR_HSV2BGR)[0, 0]
            cv2.ellipse(holo, (cx, cy), (int(0.09 * width) - 6 * k, int(0.09 * width) - 6 * k),
                        0, 0, 360, tuple(int(c) for c in col), 4)
        face = cv2.addWeighted(face, 0.7, holo, 0.3, 0)
    return face, _rounded_alpha(width, h, doc_type)


def _rounded_alpha(width: int, h: int, doc_type: str) -> np.ndarray:
    """``(h, width) uint8`` card alpha: 255 inside, 0 outside the rounded corners (ID-1: 3.18 mm
    radius per ISO/IEC 7810; passport page: 2 % of the width)."""
    mm = ID1_MM if doc_type == "id_card" else ID3_MM
    alpha = np.full((h, width), 255, np.uint8)
    r = int(round(width * ID1_CORNER_MM / mm[0])) if doc_type == "id_card" else int(0.02 * width)
    if r > 0:
        alpha[:r, :r] = 0
        alpha[:r, -r:] = 0
        alpha[-r:, :r] = 0
        alpha[-r:, -r:] = 0
        for cx, cy in ((r, r), (width - r - 1, r), (r, h - r - 1), (width - r - 1, h - r - 1)):
            cv2.circle(alpha, (cx, cy), r, 255, -1, cv2.LINE_AA)
    return alpha


def background(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """A random background ``(height, width, 3) uint8`` BGR: a photo crop, a tinted texture,
    a wood-like stripe pattern or a flat gradient."""
    kind = rng.random()
    if kind < 0.4:
        src = _skimage(str(rng.choice(_PHOTOS)))
    elif kind < 0.7:
        src = _skimage(str(rng.choice(_TEXTURES)))
        tint = rng.uniform(0.5, 1.2, 3)
        src = np.clip(src.astype(np.float32) * tint, 0, 255).astype(np.uint8)
    elif kind < 0.85:
        gy, gx = np.mgrid[0:256, 0:256].astype(np.float32)
        f = rng.uniform(0.05, 0.3)
        v = np.sin(gx * f + 3 * np.sin(gy * 0.02 + rng.uniform(0, 6))) * 0.5 + 0.5
        c1, c2 = rng.integers(20, 200, 3), rng.integers(20, 200, 3)
        src = (c1 * v[..., None] + c2 * (1 - v[..., None])).astype(np.uint8)
    else:
        c1, c2 = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
        t = np.linspace(0, 1, 256, dtype=np.float32)[None, :, None]
        src = np.repeat((c1 * (1 - t) + c2 * t), 256, axis=0).astype(np.uint8)
    sh, sw = src.shape[:2]
    # random crop with the target aspect, then resize
    ar = width / height
    cw = int(min(sw, sh * ar) * rng.uniform(0.6, 1.0))
    ch = max(8, int(cw / ar))
    cw = max(8, min(cw, sw))
    ch = min(ch, sh)
    x0 = int(rng.integers(0, sw - cw + 1))
    y0 = int(rng.integers(0, sh - ch + 1))
    out = cv2.resize(src[y0:y0 + ch, x0:x0 + cw], (width, height), interpolation=cv2.INTER_LINEAR)
    if rng.random() < 0.5:
        out = cv2.flip(out, int(rng.integers(-1, 2)))
    return out


_SKIN_BGR = ((120, 160, 220), (90, 130, 190), (60, 90, 140), (150, 180, 230), (100, 150, 205))
"""Skin tones (BGR) for drawn hands and faces."""


def _shade(img: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> None:
    """Multiply ``img`` inside ``mask`` by a soft light gradient (in place; float32 image)."""
    H, W = mask.shape
    gy, gx = np.mgrid[0:H, 0:W].astype(np.float32)
    a = rng.uniform(0, 2 * np.pi)
    g = 1 + 0.25 * (np.cos(a) * (gx / W - 0.5) + np.sin(a) * (gy / H - 0.5))
    m = cv2.GaussianBlur(mask.astype(np.float32), (0, 0), 1.2)[..., None]
    img *= 1 - m + m * g[..., None]


def person_backdrop(bg: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draw a person's torso (shirt, shoulders, chin/neck) behind where a card will be held.

    Real card photos are often taken by someone holding the card in front of their chest; the
    torso is then as salient as the card. Args: ``bg`` ``(H, W, 3) uint8`` BGR. Returns a new
    ``uint8`` image.
    """
    H, W = bg.shape[:2]
    out = bg.astype(np.float32)
    shirt = rng.integers(0, 90, 3) if rng.random() < 0.5 else rng.integers(0, 256, 3)
    cx = W * rng.uniform(0.3, 0.7)
    top = H * rng.uniform(-0.05, 0.35)
    mask = np.zeros((H, W), np.uint8)
    sh_w = W * rng.uniform(0.35, 0.6)
    pts = np.array([[cx - sh_w * 0.45, top], [cx + sh_w * 0.45, top],
                    [cx + sh_w * rng.uniform(0.9, 1.6), H * 1.05],
                    [cx - sh_w * rng.uniform(0.9, 1.6), H * 1.05]], np.int32)
    cv2.fillConvexPoly(mask, pts, 1, cv2.LINE_AA)
    for sx in (-1, 1):  # shoulders
        cv2.ellipse(mask, (int(cx + sx * sh_w * 0.55), int(top + 0.12 * H)),
                    (int(sh_w * 0.45), int(0.15 * H)), 0, 0, 360, 1, -1)
    out[mask > 0] = shirt
    if rng.random() < 0.7:  # neck and chin above the collar
        skin = np.array(_SKIN_BGR[int(rng.integers(0, len(_SKIN_BGR)))], np.float32)
        neck = np.zeros((H, W), np.uint8)
        cv2.ellipse(neck, (int(cx), int(top)), (int(sh_w * 0.18), int(0.14 * H)), 0, 0, 360, 1, -1)
        cv2.ellipse(neck, (int(cx), int(top - 0.12 * H)), (int(sh_w * 0.25), int(0.16 * H)),
                    0, 0, 360, 1, -1)
        out[neck > 0] = skin
        mask |= neck
    _shade(out, mask, rng)
    return np.clip(out, 0, 255).astype(np.uint8)


def holding_hand(img: np.ndarray, quad: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draw a hand holding the card: a thumb over one side and the palm/fingers reaching
    off-frame from there. ``img`` ``(H, W, 3) uint8`` BGR, ``quad`` ``(4, 2)`` TL, TR, BR, BL (px).
    Returns a new ``uint8`` image."""
    H, W = img.shape[:2]
    out = img.astype(np.float32)
    q = np.asarray(quad, np.float64)
    i = int(rng.integers(0, 4))
    a, b = q[i], q[(i + 1) % 4]
    t = rng.uniform(0.25, 0.75)
    p = a * (1 - t) + b * t
    centre = q.mean(axis=0)
    inward = centre - p
    inward /= max(float(np.linalg.norm(inward)), 1e-6)
    short = float(min(np.linalg.norm(q[1] - q[0]), np.linalg.norm(q[2] - q[1])))
    skin = np.array(_SKIN_BGR[int(rng.integers(0, len(_SKIN_BGR)))], np.float32)
    mask = np.zeros((H, W), np.uint8)
    depth = short * rng.uniform(0.08, 0.3)
    tip = p + inward * depth
    ang = float(np.degrees(np.arctan2(inward[1], inward[0])))
    w_th = short * rng.uniform(0.08, 0.14)
    base = p - inward * short * 0.4
    cv2.ellipse(mask, (int((tip[0] + base[0]) / 2), int((tip[1] + base[1]) / 2)),
                (int(np.linalg.norm(tip - base) / 2), int(w_th)), ang, 0, 360, 1, -1)
    far = p - inward * max(W, H)  # palm: from behind the thumb to beyond the frame
    side = np.array([-inward[1], inward[0]]) * short * rng.uniform(0.3, 0.6)
    palm = np.array([base + side, base - side, far - side * 1.5, far + side * 1.5], np.int32)
    cv2.fillConvexPoly(mask, palm, 1, cv2.LINE_AA)
    out[mask > 0] = skin
    edge = cv2.morphologyEx(mask, cv2.MORPH_GRADIENT, np.ones((3, 3), np.uint8))
    out[edge > 0] *= 0.7
    _shade(out, mask, rng)
    return np.clip(out, 0, 255).astype(np.uint8)


def touching_object(img: np.ndarray, quad: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draw an object that touches the card from behind: a saucer-like ellipse, a bar (a leg, a
    pen, a table edge) or a blob, reaching from outside the card to under one of its sides, in a
    colour near the card's own so it is as salient as the card. The card is drawn over it by the
    caller (the object is on the background). ``img`` ``(H, W, 3) uint8`` BGR background,
    ``quad`` ``(4, 2)`` TL, TR, BR, BL of the card (px). Returns a new ``uint8`` image."""
    H, W = img.shape[:2]
    out = img.astype(np.float32)
    q = np.asarray(quad, np.float64)
    i = int(rng.integers(0, 4))
    a, b = q[i], q[(i + 1) % 4]
    p = a + (b - a) * rng.uniform(0.1, 0.9)
    centre = q.mean(axis=0)
    outward = p - centre
    outward /= max(float(np.linalg.norm(outward)), 1e-6)
    short = float(min(np.linalg.norm(q[1] - q[0]), np.linalg.norm(q[2] - q[1])))
    mask = np.zeros((H, W), np.uint8)
    kind = rng.random()
    if kind < 0.4:  # saucer / plate: an ellipse centred just outside the side
        r = short * rng.uniform(0.3, 0.8)
        r2 = r * rng.uniform(0.5, 1.0)
        c = p + outward * r2 * rng.uniform(0.5, 0.9)  # nearer than its shorter radius: it touches
        cv2.ellipse(mask, (int(c[0]), int(c[1])), (int(r), int(r2)),
                    float(rng.uniform(0, 180)), 0, 360, 1, -1, cv2.LINE_AA)
    elif kind < 0.75:  # bar: from under the side to beyond the frame, any angle outwards
        ang = np.arctan2(outward[1], outward[0]) + rng.uniform(-0.8, 0.8)
        d = np.array([np.cos(ang), np.sin(ang)])
        n = np.array([-d[1], d[0]]) * short * rng.uniform(0.05, 0.2)
        p0, p1 = p - d * short * 0.15, p + d * max(W, H)
        cv2.fillConvexPoly(mask, np.array([p0 + n, p0 - n, p1 - n, p1 + n], np.int32), 1,
                           cv2.LINE_AA)
    else:  # blob: a few overlapping ellipses, the first one on the side
        c = p
        for _ in range(int(rng.integers(2, 5))):
            cv2.ellipse(mask, (int(c[0]), int(c[1])),
                        (int(short * rng.uniform(0.1, 0.35)), int(short * rng.uniform(0.1, 0.35))),
                        float(rng.uniform(0, 180)), 0, 360, 1, -1)
            c = c + outward * short * rng.uniform(0.1, 0.3) + rng.normal(0, 0.1 * short, 2)
    colour = rng.integers(150, 250, 3) if rng.random() < 0.6 else rng.integers(20, 250, 3)
    out[mask > 0] = colour
    edge = cv2.morphologyEx(mask, cv2.MORPH_GRADIENT, np.ones((3, 3), np.uint8))
    out[edge > 0] *= rng.uniform(0.6, 1.0)
    _shade(out, mask, rng)
    return np.clip(out, 0, 255).astype(np.uint8)


def random_quad(rng: np.random.Generator, width: int, height: int, aspect: float,
                rotation_deg: float | None = None, margin: float = 0.03) -> np.ndarray:
    """Random card corners ``(4, 2) float64`` (TL, TR, BR, BL of the face) fully inside a
    ``width x height`` frame with ``margin`` (share of the shorter side) to the border.

    The card covers 25-75 % of the frame's shorter side (its long side), is rotated (mostly
    within +-25 degrees, sometimes any angle) and tilted by a random perspective.
    """
    if rotation_deg is None:
        rotation_deg = rng.uniform(-25, 25) if rng.random() < 0.75 else rng.uniform(-180, 180)
    short = min(width, height)
    for _ in range(100):
        cw = short * rng.uniform(0.45, 0.95)
        ch = cw / aspect
        rect = np.array([[-cw / 2, -ch / 2], [cw / 2, -ch / 2], [cw / 2, ch / 2],
                         [-cw / 2, ch / 2]])
        # perspective: shrink one side (tilt), jitter corners
        tilt = rng.uniform(0.0, 0.18)
        side = int(rng.integers(0, 4))
        i, j = side, (side + 1) % 4
        centre_side = (rect[i] + rect[j]) / 2
        rect[i] = centre_side + (rect[i] - centre_side) * (1 - tilt)
        rect[j] = centre_side + (rect[j] - centre_side) * (1 - tilt)
        rect += rng.normal(0, 0.015 * cw, rect.shape)
        a = np.radians(rotation_deg)
        rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
        rect = rect @ rot.T
        lo = rect.min(axis=0)
        hi = rect.max(axis=0)
        m = margin * short
        span_x = width - 2 * m - (hi[0] - lo[0])
        span_y = height - 2 * m - (hi[1] - lo[1])
        if span_x <= 0 or span_y <= 0:
            continue
        cx = m - lo[0] + rng.uniform(0, span_x)
        cy = m - lo[1] + rng.uniform(0, span_y)
        return rect + [cx, cy]
    raise RuntimeError("could not place the card")


def composite(bg: np.ndarray, face: np.ndarray, alpha: np.ndarray, quad: np.ndarray) -> np.ndarray:
    """Warp ``face`` (with ``alpha``) onto ``bg`` so its corners land on ``quad``.

    Args:
        bg: ``(H, W, 3) uint8`` background.
        face: ``(h, w, 3) uint8`` card face.
        alpha: ``(h, w) uint8`` card alpha.
        quad: ``(4, 2)`` destination of the face's TL, TR, BR, BL corners (px).

    Returns:
        ``(H, W, 3) uint8`` composite.
    """
    h, w = face.shape[:2]
    H, W = bg.shape[:2]
    src = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float32)
    M = cv2.getPerspectiveTransform(src, np.asarray(quad, np.float32))
    # warp at 2x then downsample for anti-aliased edges
    S = np.diag([2.0, 2.0, 1.0]) @ M
    fw = cv2.warpPerspective(face, S, (2 * W, 2 * H), flags=cv2.INTER_LINEAR)
    aw = cv2.warpPerspective(alpha, S, (2 * W, 2 * H), flags=cv2.INTER_LINEAR)
    fw = cv2.resize(fw, (W, H), interpolation=cv2.INTER_AREA).astype(np.float32)
    aw = cv2.resize(aw, (W, H), interpolation=cv2.INTER_AREA).astype(np.float32)[..., None] / 255.0
    return np.clip(fw * aw + bg.astype(np.float32) * (1 - aw), 0, 255).astype(np.uint8)


def degrade(img: np.ndarray, rng: np.random.Generator, quad: np.ndarray | None = None,
            glare: bool = False, strong_blur: bool = False) -> np.ndarray:
    """Photo effects: lighting gradient, shadow, glare (when ``glare``), a finger occluding an
    edge, blur, noise and JPEG compression. ``strong_blur`` adds an out-of-focus (Gaussian
    sigma 2-7 px) or motion (9-31 px line) blur. Returns a new ``uint8`` BGR image."""
    H, W = img.shape[:2]
    out: np.ndarray = img.astype(np.float32)
    gy, gx = np.mgrid[0:H, 0:W].astype(np.float32)
    a = rng.uniform(0, 2 * np.pi)
    light = 1 + rng.uniform(-0.25, 0.15) * (np.cos(a) * (gx / W - 0.5) + np.sin(a) * (gy / H - 0.5))
    out *= light[..., None]
    if rng.random() < 0.3:  # soft shadow
        b = rng.uniform(0, 2 * np.pi)
        d = np.cos(b) * (gx - W * rng.random()) + np.sin(b) * (gy - H * rng.random())
        out *= (1 - 0.35 * (1 / (1 + np.exp(-d / (0.03 * W)))))[..., None]
    if glare and quad is not None:
        c = quad.mean(axis=0) + rng.normal(0, 0.1, 2) * (quad.max(0) - quad.min(0))
        r = 0.18 * float(np.min(quad.max(0) - quad.min(0)))
        g = np.exp(-(((gx - c[0]) ** 2 + (gy - c[1]) ** 2) / (2 * r * r)))
        out += 400 * g[..., None]
    if quad is not None and rng.random() < 0.15:  # finger over an edge midpoint
        i = int(rng.integers(0, 4))
        t = rng.uniform(0.2, 0.8)
        p = quad[i] * (1 - t) + quad[(i + 1) % 4] * t
        size = 0.06 * float(np.min(quad.max(0) - quad.min(0)))
        skin = rng.choice([(120, 160, 220), (90, 130, 190), (60, 90, 140), (150, 180, 230)])
        ang = float(rng.uniform(0, 180))
        cv2.ellipse(out, (int(p[0]), int(p[1])), (int(size), int(2.5 * size)), ang, 0, 360,
                    tuple(float(s) for s in skin), -1, cv2.LINE_AA)
    out = np.clip(out, 0, 255).astype(np.uint8)
    if rng.random() < 0.6:
        out = cv2.GaussianBlur(out, (0, 0), rng.uniform(0.3, 1.4))
    if strong_blur:
        if rng.random() < 0.6:
            out = cv2.GaussianBlur(out, (0, 0), rng.uniform(2.0, 7.0))
        else:
            n = int(rng.integers(9, 32))
            k = np.zeros((n, n), np.float32)
            k[n // 2, :] = 1.0 / n
            rot = cv2.getRotationMatrix2D(((n - 1) / 2, (n - 1) / 2), float(rng.uniform(0, 180)),
                                          1.0)
            line = cv2.warpAffine(k, rot, (n, n))
            kernel = (line / max(float(line.sum()), 1e-6)).astype(np.float32)
            out = cv2.filter2D(out, -1, kernel)
    if rng.random() < 0.6:
        out = np.clip(out + rng.normal(0, rng.uniform(1, 6), out.shape), 0, 255).astype(np.uint8)
    return jpeg_round_trip(out, int(rng.integers(55, 96)))


def jpeg_round_trip(image: np.ndarray, quality: int, flags: int = cv2.IMREAD_COLOR) -> np.ndarray:
    """``image`` (uint8 BGR or grey) after JPEG compression at ``quality`` (0-100), decoded
    with ``flags`` (``cv2.IMREAD_*``).

    Raises:
        ValueError: OpenCV could not encode or decode it (an empty or non-uint8 image).
    """
    ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
    back = cv2.imdecode(buf, flags) if ok else None
    if back is None:
        raise ValueError(f"JPEG round trip of a {image.dtype} {image.shape} image failed")
    return back


def card_on_texture(rng: np.random.Generator, quad: np.ndarray, size: tuple[int, int],
                    doc_type: str = "id_card", texture: str = "gravel",
                    portrait: str | None = "photo") -> tuple[np.ndarray, np.ndarray]:
    """A card at known corners on a tinted skimage texture, without photo effects (fixtures).

    Args:
        rng: random generator (face content and tint).
        quad: ``(4, 2)`` destination of the face's TL, TR, BR, BL (px).
        size: ``(width, height)`` of the photo (px).
        doc_type: ``id_card`` or ``passport``.
        texture: a scikit-image sample name used as background.
        portrait: as in :func:`render_face` (default: the photo, so Haar can orient it).

    Returns:
        ``(image, face)``: ``(height, width, 3) uint8`` photo and the upright face rendered.
    """
    face, alpha = render_face(rng, doc_type, width=856, portrait=portrait, blank=False)
    tint = rng.uniform(0.4, 0.9, 3)
    bg = cv2.resize((_skimage(texture) * tint).astype(np.uint8), size)
    return composite(bg, face, alpha, np.asarray(quad, np.float64)), face


@dataclass(frozen=True)
class Sample:
    """One synthetic photo.

    Attributes:
        image: ``(H, W, 3) uint8`` BGR.
        quad: ``(4, 2) float64`` card corners TL, TR, BR, BL of the face (None for negatives).
        kind: ``id_card``, ``passport`` or ``none``; ``scan`` or ``handheld`` for the classes
            of :func:`scan_sample` and :func:`handheld_sample`.
        rotation_deg: in-plane rotation applied to the face (0: upright).
        doc_type: ``id_card`` or ``passport`` where ``kind`` does not say it, else None.
    """

    image: np.ndarray
    quad: np.ndarray | None
    kind: str
    rotation_deg: float = 0.0
    doc_type: str | None = None


_SIZES = ((640, 480), (960, 720), (1280, 960), (480, 640), (720, 960), (800, 600))


def sample(rng: np.random.Generator, negative: bool = False, doc_type: str | None = None,
           size: tuple[int, int] | None = None, rotation_deg: float | None = None,
           effects: bool = True, scenes: bool = True, cut: bool = False,
           strong_blur: bool = False, portrait: str | None = None, hard: bool = False) -> Sample:
    """Draw one synthetic photo.

    Args:
        rng: random generator (the only source of randomness).
        negative: no card (background only, often a natural photo with a salient object).
        doc_type: ``id_card`` / ``passport`` (None: 75 % / 25 %).
        size: ``(width, height)`` px (None: random from a few phone-like sizes).
        rotation_deg: in-plane rotation of the card (None: random).
        effects: apply :func:`degrade`.
        scenes: sometimes (30 %) put a person's torso behind the card and (35 %) a hand
            holding it (:func:`person_backdrop`, :func:`holding_hand`).
        cut: let the card run past the frame (corners up to 30 % of the frame's shorter side
            outside it; the quad keeps the true corners).
        strong_blur: out-of-focus or motion blur (see :func:`degrade`).
        portrait: force the card's portrait (``photo`` or ``drawn``, see :func:`render_face`);
            the random stream is the same either way.
        hard: the two scenes the tuning sets' failures showed (MODEL.md): an object touching
            the card from behind (:func:`touching_object`, 70 %) and a header band coloured
            like the background around the card (50 %). Off by default: with ``hard`` False no
            extra random draws are made, so every earlier set keeps its stream.
    """
    W, H = size or _SIZES[int(rng.integers(0, len(_SIZES)))]
    bg = background(rng, W, H)
    if negative:
        if scenes and rng.random() < 0.3:
            bg = person_backdrop(bg, rng)
        return Sample(image=degrade(bg, rng) if effects else bg, quad=None, kind="none")
    doc_type = doc_type or ("id_card" if rng.random() < 0.75 else "passport")
    band: tuple[int, int, int] | None = None
    touch = False
    if hard:
        touch = bool(rng.random() < 0.7)
        if rng.random() < 0.5:
            near = np.median(bg.reshape(-1, 3), axis=0) + rng.normal(0, 12, 3)
            b, g, r = (int(c) for c in np.clip(near, 0, 255))
            band = (b, g, r)
    face, alpha = render_face(rng, doc_type, width=int(rng.choice([700, 856, 1100])),
                              portrait=portrait, blank=None if scenes else False, band_bgr=band)
    aspect = face.shape[1] / face.shape[0]
    if rotation_deg is None:
        rotation_deg = float(rng.uniform(-25, 25) if rng.random() < 0.8 else rng.uniform(-180, 180))
    quad = random_quad(rng, W, H, aspect, rotation_deg, margin=-0.3 if cut else 0.03)
    if scenes and rng.random() < 0.3:
        bg = person_backdrop(bg, rng)
    if touch:
        bg = touching_object(bg, quad, rng)
    img = composite(bg, face, alpha, quad)
    if scenes and rng.random() < 0.35:
        img = holding_hand(img, quad, rng)
    if effects:
        img = degrade(img, rng, quad, strong_blur=strong_blur)
    return Sample(image=img, quad=quad, kind=doc_type, rotation_deg=rotation_deg)


_SCAN_MODES = ("flatbed", "cropped")
"""How an upload that is already the document was made (:func:`scan_sample`)."""


def _paper(face: np.ndarray, rng: np.random.Generator, share: float) -> np.ndarray:
    """``face`` printed on light paper: blended towards a near-white paper tone by ``share``
    (0: unchanged, 0.7: a pale page, as a passport data page or a photocopy on white paper)."""
    tone = rng.integers(236, 256, 3).astype(np.float32)
    return np.clip(face.astype(np.float32) * (1 - share) + tone * share, 0, 255).astype(np.uint8)


def _soften(img: np.ndarray, rng: np.random.Generator, blur: tuple[float, float],
            noise: tuple[float, float, float]) -> np.ndarray:
    """A scanner's or a phone's softness: with probability ``blur[0]`` a Gaussian blur of
    sigma 0.3 to ``blur[1]`` px, then with probability ``noise[0]`` Gaussian noise of sigma
    ``noise[1]`` to ``noise[2]`` grey levels. ``img`` ``(H, W, 3) uint8``; returns a new one."""
    if rng.random() < blur[0]:
        img = cv2.GaussianBlur(img, (0, 0), rng.uniform(0.3, blur[1]))
    if rng.random() < noise[0]:
        img = np.clip(img + rng.normal(0, rng.uniform(noise[1], noise[2]), img.shape), 0,
                      255).astype(np.uint8)
    return img


def scan_sample(rng: np.random.Generator, doc_type: str | None = None,
                mode: str | None = None) -> Sample:
    """An upload that is already the document: a flatbed scan or a crop made by a phone app.

    ``flatbed`` (60 %): the document lies square on a scanner lid (white 55 %, grey or black
    otherwise), rotated by at most 2 degrees, with a thin border of 0.5-8 % of its size on each
    side (0 on a side 25 % of the time: the scan cut there), at 150-300 dpi; often printed on
    pale paper (white paper on a white lid), a faint shadow along one edge, no perspective,
    slight blur, JPEG 70-95. ``cropped`` (40 %): the frame is the document, cut up to 1.5 % inside
    its edges or with up to 1.5 % of the background left (a phone's document crop), its corners
    off by up to 1 % (the crop's own perspective residue), lighting and JPEG as a photo.

    Args:
        rng: random generator (the only source of randomness).
        doc_type: ``id_card`` / ``passport`` (None: 50 / 50).
        mode: ``flatbed`` / ``cropped`` (None: drawn).

    Returns:
        A :class:`Sample` of kind ``scan``; ``quad`` is the document's true corners (TL, TR,
        BR, BL), which may lie up to 1.5 % outside a cropped frame.
    """
    doc_type = doc_type or ("id_card" if rng.random() < 0.5 else "passport")
    mode = mode or ("flatbed" if rng.random() < 0.6 else "cropped")
    if mode not in _SCAN_MODES:
        raise ValueError(f"scan_sample: mode must be one of {_SCAN_MODES}, not {mode!r}")
    mm = ID1_MM if doc_type == "id_card" else ID3_MM
    if mode == "flatbed":
        dpi = float(rng.uniform(150, 300))
        fw = int(round(mm[0] / 25.4 * dpi))
    else:
        fw = int(rng.choice([640, 800, 1000, 1200]))
    face, alpha = render_face(rng, doc_type, width=fw, blank=False)
    if rng.random() < (0.6 if doc_type == "passport" else 0.3):
        face = _paper(face, rng, float(rng.uniform(0.35, 0.75)))
    img, quad = scan_of(rng, face, alpha, mode)
    return Sample(image=img, quad=quad, kind="scan", doc_type=doc_type)


def scan_of(rng: np.random.Generator, face: np.ndarray, alpha: np.ndarray,
            mode: str) -> tuple[np.ndarray, np.ndarray]:
    """A document face as a flatbed scan or a phone app's crop (see :func:`scan_sample`; the
    face's size is the scan's resolution).

    Args:
        rng: random generator.
        face: ``(h, w, 3) uint8`` BGR document face, at the scan's resolution.
        alpha: ``(h, w) uint8`` its alpha.
        mode: ``flatbed`` or ``cropped``.

    Returns:
        ``(image, quad)``: the upload ``(H, W, 3) uint8`` BGR (JPEG-compressed once) and the
        document's corners TL, TR, BR, BL (px).

    Raises:
        ValueError: an unknown ``mode``.
    """
    if mode not in _SCAN_MODES:
        raise ValueError(f"scan_of: mode must be one of {_SCAN_MODES}, not {mode!r}")
    fw = face.shape[1]
    fh = face.shape[0]
    if mode == "flatbed":
        border = [0.0 if rng.random() < 0.25 else float(rng.uniform(0.005, 0.08))
                  for _ in range(4)]  # left, top, right, bottom (share of the face's size)
        left, top = int(border[0] * fw), int(border[1] * fh)
        W, H = fw + left + int(border[2] * fw), fh + top + int(border[3] * fh)
        lid = rng.random()
        level = (rng.uniform(232, 255) if lid < 0.55 else rng.uniform(90, 200) if lid < 0.8
                 else rng.uniform(5, 40))
        bg = np.full((H, W, 3), level, np.float32) + rng.normal(0, 1.5, (H, W, 3))
        bg = np.clip(bg + rng.uniform(-4, 4, 3), 0, 255).astype(np.uint8)
        a = np.radians(rng.uniform(-2, 2))
        c = np.array([left + fw / 2, top + fh / 2])
        rect = np.array([[-fw, -fh], [fw, -fh], [fw, fh], [-fw, fh]]) / 2
        rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
        quad = rect @ rot.T + c
        img = composite(bg, face, alpha, quad)
        if rng.random() < 0.5:  # the lid's shadow along one edge of the document
            i = int(rng.integers(0, 4))
            p, r = quad[i], quad[(i + 1) % 4]
            out = img.astype(np.float32)
            line = np.zeros((H, W), np.float32)
            cv2.line(line, tuple(int(v) for v in p), tuple(int(v) for v in r), 1.0,
                     int(rng.integers(2, 6)), cv2.LINE_AA)
            line = cv2.GaussianBlur(line, (0, 0), 2.0)
            out *= (1 - 0.4 * line)[..., None]
            img = np.clip(out, 0, 255).astype(np.uint8)
        img = _soften(img, rng, (0.6, 0.8), (0.5, 0.5, 2.5))
        q = int(rng.integers(70, 96))
    else:
        margin = rng.uniform(-0.015, 0.015, 4)  # > 0: background left; < 0: cut inside
        W = int(round(fw * (1 + margin[0] + margin[2])))
        H = int(round(fh * (1 + margin[1] + margin[3])))
        quad = np.array([[0, 0], [fw, 0], [fw, fh], [0, fh]], np.float64)
        quad += [margin[0] * fw, margin[1] * fh]
        quad += rng.normal(0, 0.004 * fw, quad.shape)
        bg = background(rng, W, H)
        img = composite(bg, face, alpha, quad)
        out = img.astype(np.float32)
        gy, gx = np.mgrid[0:H, 0:W].astype(np.float32)
        a = rng.uniform(0, 2 * np.pi)
        out *= (1 + rng.uniform(-0.2, 0.1) * (np.cos(a) * (gx / W - 0.5)
                                               + np.sin(a) * (gy / H - 0.5)))[..., None]
        img = _soften(np.clip(out, 0, 255).astype(np.uint8), rng, (0.6, 1.0), (0.6, 1.0, 4.0))
        q = int(rng.integers(60, 96))
    return jpeg_round_trip(img, q), quad


def table_texture(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """A table top ``(height, width, 3) uint8`` BGR: wood grain (generated rings and fibres in
    brown tones, 45 %), stone (scikit-image's ``gravel`` tinted and speckled, 25 %), woven
    cloth (a fine two-colour weave, 15 %) or a light laminate with fine noise (15 %)."""
    gy, gx = np.mgrid[0:height, 0:width].astype(np.float32)
    kind = rng.random()
    if kind < 0.45:
        a = rng.uniform(0, np.pi)
        u = np.cos(a) * gx + np.sin(a) * gy
        v = -np.sin(a) * gx + np.cos(a) * gy
        warp = 6 * np.sin(v * rng.uniform(0.004, 0.012) + rng.uniform(0, 6))
        period = rng.uniform(6, 22)
        rings = 0.5 + 0.5 * np.sin((u + warp + 3 * np.sin(v * 0.05)) * 2 * np.pi / period)
        fibre = cv2.GaussianBlur(rng.normal(0, 1, (height, width)).astype(np.float32), (0, 0), 0.8)
        t = np.clip(0.65 * rings + 0.12 * fibre, 0, 1)[..., None]
        dark = np.array([rng.uniform(15, 50), rng.uniform(40, 80), rng.uniform(70, 130)])
        light = dark + np.array([rng.uniform(30, 70), rng.uniform(50, 90), rng.uniform(60, 110)])
        out = dark * t + light * (1 - t)
    elif kind < 0.7:
        src = cv2.resize(_skimage("gravel"), (width, height), interpolation=cv2.INTER_LINEAR)
        out = src.astype(np.float32) * rng.uniform(0.5, 1.2, 3)
        out += rng.normal(0, 8, (height, width, 1))
    elif kind < 0.85:
        p = rng.uniform(3, 7)
        weave = (np.sin(gx * 2 * np.pi / p) * np.sin(gy * 2 * np.pi / p) > 0)[..., None]
        c1, c2 = rng.integers(30, 220, 3), rng.integers(30, 220, 3)
        out = np.where(weave, c1, c2).astype(np.float32)
        out = cv2.GaussianBlur(out, (0, 0), 0.7) + rng.normal(0, 6, (height, width, 1))
    else:
        out = np.full((height, width, 3), rng.uniform(170, 235), np.float32)
        out += rng.uniform(-15, 15, 3) + rng.normal(0, 5, (height, width, 1))
    return np.clip(out, 0, 255).astype(np.uint8)


def _finger(mask: np.ndarray, base: np.ndarray, tip: np.ndarray, width: float) -> None:
    """Draw one finger into ``mask`` (in place): a capsule from ``base`` to ``tip`` (px) of
    ``width`` px, its tip rounded."""
    d = tip - base
    n = np.array([-d[1], d[0]]) / max(float(np.linalg.norm(d)), 1e-6) * width / 2
    cv2.fillConvexPoly(mask, np.array([base + n, tip + n, tip - n, base - n], np.int32), 1,
                       cv2.LINE_AA)
    cv2.circle(mask, (int(tip[0]), int(tip[1])), int(width / 2), 1, -1, cv2.LINE_AA)


def _paint_skin(img: np.ndarray, mask: np.ndarray, rng: np.random.Generator,
                tips: list[np.ndarray], width: float) -> np.ndarray:
    """``img`` with skin painted where ``mask`` is set: a skin tone, a soft light gradient, a
    darker outline and a lighter nail near each of ``tips`` (px). Returns a new ``uint8`` image."""
    out = img.astype(np.float32)
    skin = np.array(_SKIN_BGR[int(rng.integers(0, len(_SKIN_BGR)))], np.float32)
    skin = skin * rng.uniform(0.85, 1.1)
    soft = cv2.GaussianBlur(mask.astype(np.float32), (0, 0), 0.8)[..., None]
    out = out * (1 - soft) + skin * soft
    for tip in tips:
        if rng.random() < 0.7:
            nail = np.zeros(mask.shape, np.uint8)
            cv2.circle(nail, (int(tip[0]), int(tip[1])), max(1, int(width * 0.3)), 1, -1)
            nail &= mask
            out[nail > 0] = np.minimum(out[nail > 0] * 1.15 + 12, 255)
    edge = cv2.morphologyEx(mask, cv2.MORPH_GRADIENT, np.ones((3, 3), np.uint8))
    out[edge > 0] *= 0.75
    _shade(out, mask, rng)
    return np.clip(out, 0, 255).astype(np.uint8)


def handheld_sample(rng: np.random.Generator, doc_type: str | None = None,
                    size: tuple[int, int] | None = None, effects: bool = True,
                    webcam: bool = False) -> Sample:
    """A document held in a hand over a textured table, with the hand's fingers over its edges
    and often a second document partly in view.

    The scene, back to front: a table top (:func:`table_texture`); a second document (55 %),
    placed so that 35-75 % of it lies outside the frame, under or beside the held one; the palm
    and the fingers behind the card, reaching past the edge it is held by (visible outside the
    card); the card (25-75 % of the frame's shorter side, tilted and rotated as in
    :func:`random_quad`); in front, the thumb over that edge and, 60 % of the time, one to three
    fingers over a neighbouring edge (skin-toned capsules 12-20 mm wide reaching 3-18 mm over
    the card, with nails and shading; ID-1's short side is 53.98 mm). Then :func:`degrade`.

    ``webcam`` draws the other common capture instead of the table top: the card held up to a
    webcam or a phone's front camera, with the person behind it (:func:`background` under
    :func:`person_backdrop`, a desk's edge across the bottom 60 % of the time), and the card's
    header band coloured like what lies around the card 60 % of the time (the median of a ring
    around the quad, +-12 grey levels), so that the band's edge against a shirt of its own
    colour is no edge. The hand and the second document follow as above.

    Args:
        rng: random generator (the only source of randomness).
        doc_type: ``id_card`` / ``passport`` (None: 70 / 30).
        size: ``(width, height)`` px (None: one of the phone-like sizes).
        effects: apply :func:`degrade` (off: the drawn scene, e.g. to test it).
        webcam: the person behind the card instead of a table top (above). Off: the random
            stream is the one the held-out sets of kind ``handheld`` were drawn from.

    Returns:
        A :class:`Sample` of kind ``handheld`` (``webcam_handheld`` with ``webcam``); ``quad`` is
        the held card's corners (amodal: the fingers over it are still card).
    """
    W, H = size or _SIZES[int(rng.integers(0, len(_SIZES)))]
    doc_type = doc_type or ("id_card" if rng.random() < 0.7 else "passport")
    if webcam:
        img, face, alpha, rot, quad = _webcam_scene(rng, W, H, doc_type)
    else:
        img = table_texture(rng, W, H)
        face, alpha = render_face(rng, doc_type, width=int(rng.choice([700, 856, 1100])),
                                  blank=False)
        aspect = face.shape[1] / face.shape[0]
        rot = float(rng.uniform(-30, 30) if rng.random() < 0.85 else rng.uniform(-180, 180))
        quad = random_quad(rng, W, H, aspect, rot, margin=0.05)
    short_px = float(min(np.linalg.norm(quad[1] - quad[0]), np.linalg.norm(quad[2] - quad[1])))
    px_per_mm = short_px / (ID1_MM[1] if doc_type == "id_card" else ID3_MM[1])
    if rng.random() < 0.55:  # a second document, partly outside the frame
        other = "passport" if rng.random() < 0.4 else "id_card"
        f2, a2 = render_face(rng, other, width=856, blank=bool(rng.random() < 0.1))
        s = short_px * rng.uniform(0.8, 1.3)
        w2, h2 = s * f2.shape[1] / f2.shape[0], s
        ang = np.radians(rng.uniform(-40, 40))
        rect = np.array([[-w2, -h2], [w2, -h2], [w2, h2], [-w2, h2]]) / 2
        rect = rect @ np.array([[np.cos(ang), -np.sin(ang)], [np.sin(ang), np.cos(ang)]]).T
        border = int(rng.integers(0, 4))  # which frame border it runs off
        out_share = rng.uniform(0.35, 0.75)
        span = rect.max(0) - rect.min(0)
        along = rng.uniform(0.1, 0.9)
        cx = {0: -span[0] * (out_share - 0.5), 2: W + span[0] * (out_share - 0.5)}.get(
            border, along * W)
        cy = {1: -span[1] * (out_share - 0.5), 3: H + span[1] * (out_share - 0.5)}.get(
            border, along * H)
        img = composite(img, f2, a2, rect + [cx, cy])
    # the edge the card is held by, and where along it
    i = int(rng.integers(0, 4))
    a, b = quad[i], quad[(i + 1) % 4]
    centre = quad.mean(axis=0)
    t = rng.uniform(0.3, 0.7)
    p = a * (1 - t) + b * t
    inward = centre - p
    inward /= max(float(np.linalg.norm(inward)), 1e-6)
    along_dir = (b - a) / max(float(np.linalg.norm(b - a)), 1e-6)
    finger_w = px_per_mm * rng.uniform(12, 20)
    behind = np.zeros((H, W), np.uint8)
    # the palm: from under the held edge to beyond the frame
    far = p - inward * max(W, H)
    side = along_dir * finger_w * rng.uniform(1.5, 2.5)
    palm = np.array([p + inward * finger_w * 0.5 + side, p + inward * finger_w * 0.5 - side,
                     far - side * 1.4, far + side * 1.4], np.int32)
    cv2.fillConvexPoly(behind, palm, 1, cv2.LINE_AA)
    tips_behind = []
    for _ in range(int(rng.integers(0, 4))):  # fingers behind the card showing past its edges
        j = (i + 1 + int(rng.integers(0, 3))) % 4
        c0, c1 = quad[j], quad[(j + 1) % 4]
        q0 = c0 + (c1 - c0) * rng.uniform(0.2, 0.8)
        out_dir = q0 - centre
        out_dir /= max(float(np.linalg.norm(out_dir)), 1e-6)
        tip = q0 + out_dir * px_per_mm * rng.uniform(5, 18)
        _finger(behind, q0 - out_dir * px_per_mm * 10, tip, finger_w * rng.uniform(0.85, 1.05))
        tips_behind.append(tip)
    img = _paint_skin(img, behind, rng, tips_behind, finger_w)
    img = composite(img, face, alpha, quad)
    front = np.zeros((H, W), np.uint8)
    tips = [p + inward * px_per_mm * rng.uniform(6, 18)]  # the thumb over the held edge
    _finger(front, p - inward * finger_w * 2.5, tips[0], finger_w * rng.uniform(1.0, 1.2))
    if rng.random() < 0.6:  # fingers over a neighbouring edge
        j = (i + (1 if rng.random() < 0.5 else 3)) % 4
        c0, c1 = quad[j], quad[(j + 1) % 4]
        e_in = centre - (c0 + c1) / 2
        e_in /= max(float(np.linalg.norm(e_in)), 1e-6)
        t0 = rng.uniform(0.15, 0.6)
        step = finger_w * 1.05 / max(float(np.linalg.norm(c1 - c0)), 1e-6)
        for k in range(int(rng.integers(1, 4))):
            q0 = c0 + (c1 - c0) * min(t0 + k * step, 0.95)
            tip = q0 + e_in * px_per_mm * rng.uniform(3, 18)
            _finger(front, q0 - e_in * finger_w * 3, tip, finger_w * rng.uniform(0.85, 1.0))
            tips.append(tip)
    img = _paint_skin(img, front, rng, tips, finger_w)
    if effects:
        img = degrade(img, rng, quad)
    return Sample(image=img, quad=quad, kind="webcam_handheld" if webcam else "handheld",
                  rotation_deg=rot, doc_type=doc_type)


def _webcam_scene(rng: np.random.Generator, W: int, H: int, doc_type: str
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, np.ndarray]:
    """The scene behind a card held up to a camera (:func:`handheld_sample` with ``webcam``):
    ``(backdrop (H, W, 3) uint8, face, alpha, rotation_deg, quad (4, 2) float64 px)``, the face
    not yet composited. The card's rotation stays within +-20 degrees 90 % of the time (held
    up, not lying about)."""
    img = person_backdrop(background(rng, W, H), rng)
    if rng.random() < 0.6:  # a desk's edge across the bottom
        y0 = H * rng.uniform(0.6, 0.9)
        slope = rng.uniform(-0.08, 0.08)
        ys = y0 + slope * (np.arange(W, dtype=np.float32) - W / 2)
        desk = np.arange(H, dtype=np.float32)[:, None] > ys[None, :]
        img[desk] = table_texture(rng, W, H)[desk]
    width = int(rng.choice([700, 856, 1100]))
    mm = ID1_MM if doc_type == "id_card" else ID3_MM
    aspect = width / int(round(width * mm[1] / mm[0]))  # render_face's face shape
    rot = float(rng.uniform(-20, 20) if rng.random() < 0.9 else rng.uniform(-180, 180))
    quad = random_quad(rng, W, H, aspect, rot, margin=0.05)
    band: tuple[int, int, int] | None = None
    if rng.random() < 0.6:
        inside = np.zeros((H, W), np.uint8)
        cv2.fillConvexPoly(inside, np.round(quad).astype(np.int32), 1)
        reach = max(3, int(0.08 * min(W, H)))
        ring = cv2.dilate(inside, np.ones((2 * reach + 1, 2 * reach + 1), np.uint8)) > inside
        near = np.median(img[ring], axis=0) + rng.normal(0, 12, 3)
        b, g, r = (int(c) for c in np.clip(near, 0, 255))
        band = (b, g, r)
    face, alpha = render_face(rng, doc_type, width=width, blank=False, band_bgr=band)
    return img, face, alpha, rot, quad


def frame_negative(rng: np.random.Generator) -> Sample:
    """A photo without a document whose frame has an ID-1 or ID-3 aspect ratio (a crop of a
    scene, a texture or a table top, 1.586 or 1.420, landscape or portrait): what the scan path
    must not take for a document that fills the frame. Kind ``none``."""
    aspect = float(rng.choice([ID1_MM[0] / ID1_MM[1], ID3_MM[0] / ID3_MM[1]]))
    w = int(rng.choice([640, 856, 1011, 1200]))
    W, H = w, int(round(w / aspect))
    if rng.random() < 0.3:
        W, H = H, W
    if rng.random() < 0.3:
        bg = table_texture(rng, W, H)
    else:
        bg = background(rng, W, H)
        if rng.random() < 0.3:
            bg = person_backdrop(bg, rng)
    return Sample(image=degrade(bg, rng), quad=None, kind="none")


def webcam_handheld_sample(rng: np.random.Generator) -> Sample:
    """:func:`handheld_sample` with ``webcam``: a card held up to the camera, a person behind."""
    return handheld_sample(rng, webcam=True)


EXTRA_KINDS: dict[str, Callable[[np.random.Generator], Sample]] = {
    "scan": scan_sample, "handheld": handheld_sample, "frame_negative": frame_negative,
    "webcam_handheld": webcam_handheld_sample}
"""The classes :func:`write_set` can add after its ``n`` photos (issue 44), each drawn by its
function from the set's second stream, in the order of their names (``webcam_handheld`` sorts
last, so a set drawn without it keeps every image it had)."""


def write_set(out: Path, n: int, seed: int, negative_share: float = 0.1,
              extra: dict[str, int] | None = None) -> Path:
    """Write ``n`` samples (``negative_share`` of them negatives) as JPEG + ``manifest.json``,
    then ``extra[kind]`` samples of each of :data:`EXTRA_KINDS` (``scan``, ``handheld``,
    ``frame_negative``), drawn from a second stream ``default_rng([seed, 44])`` so that the
    first ``n`` are the same with or without them (the held-out draws stay what they were).

    The manifest follows ``shared/cases``: ``images[]`` with ``file`` and ``expect``
    (``quad_approx`` + ``iou_min`` + ``kind`` for cards, ``kind`` ``scan`` / ``handheld`` for
    the extra classes; ``reason: NO_CARD`` + ``kind: none``).

    Returns:
        The manifest path.

    Raises:
        ValueError: an ``extra`` kind that :data:`EXTRA_KINDS` does not name.
    """
    unknown = set(extra or {}) - set(EXTRA_KINDS)
    if unknown:
        raise ValueError(f"write_set: unknown extra kinds {sorted(unknown)}; "
                         f"known: {sorted(EXTRA_KINDS)}")
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    images = []

    def add(s: Sample, name: str, why: str) -> None:
        cv2.imwrite(str(out / name), s.image, [cv2.IMWRITE_JPEG_QUALITY, 95])
        expect: dict[str, object]
        if s.quad is None:
            expect = {"kind": "none", "reason": "NO_CARD"}
        else:
            expect = {"kind": s.kind, "quad_approx": np.round(s.quad, 2).tolist(), "iou_min": 0.9}
            if s.doc_type is not None:
                expect["doc_type"] = s.doc_type
        images.append({"file": name, "expect": expect, "why": why})

    for i in range(n):
        s = sample(rng, negative=bool(rng.random() < negative_share))
        add(s, f"synth_{seed}_{i:04d}.jpg",
            f"synthetic (seed {seed}, index {i}, rotation {s.rotation_deg:.1f} deg)")
    rng2 = np.random.default_rng([seed, 44])
    for kind, count in sorted((extra or {}).items()):
        for i in range(count):
            add(EXTRA_KINDS[kind](rng2), f"{kind}_{seed}_{i:04d}.jpg",
                f"synthetic {kind} (seed [{seed}, 44], index {i})")
    path = out / "manifest.json"
    path.write_text(json.dumps({"images": images, "events": []}, indent=1))
    return path


def main() -> None:
    """CLI entry: ``python -m processors.card.training.synth --out DIR --n N --seed S``."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--negative-share", type=float, default=0.1)
    for kind in EXTRA_KINDS:
        ap.add_argument(f"--{kind.replace('_', '-')}s", type=int, default=0, dest=kind,
                        help=f"also write this many {kind} samples (a second stream)")
    a = ap.parse_args()
    extra = {k: getattr(a, k) for k in EXTRA_KINDS if getattr(a, k)}
    print(write_set(a.out, a.n, a.seed, a.negative_share, extra))


if __name__ == "__main__":
    configure_logging()  # JSON lines on stderr, INFO and above, before anything logs
    main()
