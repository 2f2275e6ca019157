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
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import cv2
import numpy as np

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
        kind: ``id_card``, ``passport`` or ``none``.
        rotation_deg: in-plane rotation applied to the face (0: upright).
    """

    image: np.ndarray
    quad: np.ndarray | None
    kind: str
    rotation_deg: float = 0.0


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


def write_set(out: Path, n: int, seed: int, negative_share: float = 0.1) -> Path:
    """Write ``n`` samples (``negative_share`` of them negatives) as JPEG + ``manifest.json``.

    The manifest follows ``shared/cases``: ``images[]`` with ``file`` and ``expect``
    (``quad_approx`` + ``iou_min`` + ``kind`` for cards; ``reason: NO_CARD`` + ``kind: none``).

    Returns:
        The manifest path.
    """
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    images = []
    for i in range(n):
        s = sample(rng, negative=bool(rng.random() < negative_share))
        name = f"synth_{seed}_{i:04d}.jpg"
        cv2.imwrite(str(out / name), s.image, [cv2.IMWRITE_JPEG_QUALITY, 95])
        expect: dict[str, object]
        if s.quad is None:
            expect = {"kind": "none", "reason": "NO_CARD"}
        else:
            expect = {"kind": s.kind, "quad_approx": np.round(s.quad, 2).tolist(), "iou_min": 0.9}
        images.append({"file": name, "expect": expect,
                       "why": f"synthetic (seed {seed}, index {i}, "
                              f"rotation {s.rotation_deg:.1f} deg)"})
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
    a = ap.parse_args()
    print(write_set(a.out, a.n, a.seed, a.negative_share))


if __name__ == "__main__":
    main()
