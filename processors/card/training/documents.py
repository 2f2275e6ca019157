"""Seeded synthetic travel documents with a real ICAO 9303 MRZ, photographed, with their truth.

Each document gets random but valid fields (some made invalid or expired on purpose), its MRZ
(:func:`processors.card.mrz.icao.compose`) printed in OCR-B (:mod:`processors.card.mrz.font`)
at the Doc 9303 pitch of 2.54 mm on one of the project's card templates
(:func:`processors.card.training.synth.render_face`), and is then photographed: a pinhole
camera at a drawn tilt and distance (so the effective resolution and the tilt are known),
the scene generator's backgrounds, then light (low light, over-exposure), glare, blur, noise and
JPEG. Some documents are grey photocopies. The truth (fields, lines, check digits as printed,
expiry, the DPI and tilt rendered, the grey-copy flag, glare over the MRZ) is stored beside
the images in ``manifest.json``.

Formats and sizes: TD3 on an ID-3 page (125 x 88 mm), TD2 on ID-2 (105 x 74 mm, ICAO 9303
part 6), TD1 on the back of an ID-1 card (85.60 x 53.98 mm, part 5; no portrait there). On
request only (``--formats``), the visas of part 7: MRV-A photographed as the passport page it
fills (ID-3), MRV-B on ID-2.

Command line::

    python -m processors.card.training.documents --out DIR --n 600 --seed 20261204
    python -m processors.card.training.documents --out DIR --n 60 --formats MRVA,MRVB
"""

from __future__ import annotations

import datetime as dt
import json
import string
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

import cv2
import numpy as np

from processors.card.mrz.icao import Format, compose, parse
from processors.card.quality import effective_dpi
from processors.card.training.synth import (
    background,
    composite,
    holding_hand,
    jpeg_round_trip,
    render_face,
    scan_of,
)
from processors.logs import configure_logging

DOC_MM: dict[Format, tuple[float, float]] = {Format.TD1: (85.60, 53.98),
                                             Format.TD2: (105.0, 74.0),
                                             Format.TD3: (125.0, 88.0),
                                             Format.MRVA: (125.0, 88.0),
                                             Format.MRVB: (105.0, 74.0)}
"""Document size (mm) per MRZ format: ID-1, ID-2, ID-3 (ISO/IEC 7810); a visa is the passport
page it sits on (MRV-A fills an ID-3 page), or ID-2 (MRV-B)."""
DOC_TYPE: dict[Format, str] = {Format.TD1: "id_card", Format.TD2: "passport",
                               Format.TD3: "passport", Format.MRVA: "passport",
                               Format.MRVB: "passport"}
"""The card task's ``doc_type`` the rectified document takes (ID-2 has ID-3's aspect ratio)."""
PITCH_MM = 2.54
"""Character pitch (mm): 10 characters per inch (Doc 9303 part 3)."""
CHAR_HEIGHT_MM = 2.4
"""Cap height of OCR-B size 1 as printed here (mm)."""
LINE_CENTRES_MM: dict[Format, tuple[float, ...]] = {
    Format.TD1: (13.6, 9.3, 5.0), Format.TD2: (10.5, 6.0), Format.TD3: (11.0, 6.3),
    Format.MRVA: (11.0, 6.3), Format.MRVB: (10.5, 6.0)}
"""Centre of each MRZ line above the document's bottom edge (mm), approximately where Doc 9303
parts 4-6 place them (the zone sits at the bottom, lines about 4.2-4.7 mm apart)."""
MRZ_BAND_MM: dict[Format, float] = {Format.TD1: 17.5, Format.TD2: 14.0, Format.TD3: 14.5,
                                    Format.MRVA: 14.5, Format.MRVB: 14.0}
"""Height (mm) of the clear zone printed at the bottom (no other print there)."""
FACE_PX_PER_MM = 14.0
"""Resolution the document face is rendered at (about 356 dpi) before it is photographed."""
REFERENCE_DATE = dt.date(2026, 12, 4)
"""Default date a set's expiry truth is judged at (``--today``)."""


HIDDEN_INK_SHARE = 0.5
"""A character's print is lost to glare (:attr:`DocTruth.mrz_chars_hidden`) where at least this
share of its ink is saturated in the photo (all three channels at 250 or more, as
``glare_on_mrz`` counts): a saturated pixel holds nothing of what was under it. On the 600
evaluation photos (seed 20261204) any share from 0.1 to 0.5 finds the same documents."""
HIDDEN_HAND_SHARE = 0.3
"""A character's print is lost to the holding thumb where it covers at least this share of the
character's cell (0.1 to 0.5 finds the same documents of that set but one)."""
HAND_ON_MRZ_SHARE = 0.03
"""Share of the MRZ band a hand must cover for ``hand_on_mrz``: a thumb across the band's
height over 3 % of its width hides one or two characters of each line of a TD3 zone (44 across)."""

@dataclass
class DocTruth:
    """What was printed and how it was photographed (``manifest.json``, one per image).

    Attributes:
        format: TD1, TD2 or TD3.
        lines: the MRZ lines printed.
        fields: the printed values (:meth:`processors.card.mrz.icao.Mrz.values`).
        checks: each check digit as printed (valid or not; ``optional_data`` None where none).
        all_valid: every printed check digit is valid.
        expired: the expiry date lies before ``today`` of the set.
        doc_type: the card task's ``doc_type`` (``id_card`` / ``passport``).
        doc_mm: the document's width and height (mm).
        dpi: effective resolution of the document in the photo: sqrt(quad area px^2 / document
            area in^2).
        tilt_deg: angle between the document's normal and the camera's optical axis (degrees).
        rotation_deg: in-plane rotation (degrees, 0 upright).
        focal_px: the camera's focal length (px).
        quad: the document's corners TL, TR, BR, BL in the photo (px).
        grey_copy: a black-and-white photocopy was photographed.
        glare_on_mrz: a glare spot saturates at least 10 % of the MRZ band.
        hand_on_mrz: the hand holding the document (:func:`synth.holding_hand`) covers at
            least :data:`HAND_ON_MRZ_SHARE` of the MRZ band.
        low_light: the light was scaled by this factor (1 = normal).
        has_portrait: the face carries a portrait photo.
        mrz_chars_hidden: MRZ characters whose print the photo lost, before blur, noise and
            JPEG: at least :data:`HIDDEN_INK_SHARE` of the character's ink saturated by the
            glare spot, or at least :data:`HIDDEN_HAND_SHARE` of its cell under the thumb. No
            reader can read such a character; a zone with one reads exactly only where the
            format fixes what was lost (a filler at a line's end) or by chance.
            None: not measured (scans, and sets written before 2026-12-06).
        capture: ``photo`` (:func:`photograph`) or ``scan`` (:func:`scan`: a flatbed scan or a
            phone app's crop, issue 44).
        booklet: the data page was captured in its open booklet, the facing page above it
            (:func:`booklet_face`); ``quad``, ``dpi`` and the MRZ truth are the data page's.
    """

    format: str
    lines: list[str]
    fields: dict[str, str]
    checks: dict[str, bool | None]
    all_valid: bool
    expired: bool
    doc_type: str
    doc_mm: tuple[float, float]
    dpi: float = 0.0
    tilt_deg: float = 0.0
    rotation_deg: float = 0.0
    focal_px: float = 0.0
    quad: list[list[float]] = field(default_factory=list)
    grey_copy: bool = False
    glare_on_mrz: bool = False
    hand_on_mrz: bool = False
    low_light: float = 1.0
    has_portrait: bool = False
    capture: str = "photo"
    mrz_chars_hidden: int | None = None
    booklet: bool = False


def _word(rng: np.random.Generator, lo: int, hi: int) -> str:
    return "".join(rng.choice(list(string.ascii_uppercase), size=int(rng.integers(lo, hi + 1))))


def _alnum(rng: np.random.Generator, n: int) -> str:
    return "".join(rng.choice(list(string.ascii_uppercase + string.digits), size=n))


def _yymmdd(d: dt.date) -> str:
    return d.strftime("%y%m%d")


def random_fields(rng: np.random.Generator, fmt: Format, today: dt.date,
                  expired_share: float = 0.2) -> dict[str, str]:
    """Random but valid fields of a ``fmt`` document (``compose``'s keyword arguments).

    Issuing state and nationality are random three-letter codes (sometimes ``D<<``-style one
    letter, or ``UTO``, Doc 9303's specimen state); names 1-2 primary and 1-3 secondary words;
    birth dates 1930-2012; expiry within 10 years after ``today``, or (``expired_share``) up
    to 5 years before it; TD1/TD2 document numbers of 10-12 characters in 5 %.
    """
    state = _word(rng, 3, 3) if rng.random() < 0.85 else str(rng.choice(["UTO", "D"]))
    nat = state if rng.random() < 0.8 else _word(rng, 3, 3)
    birth = dt.date(1930, 1, 1) + dt.timedelta(days=int(rng.integers(0, 82 * 365)))
    if rng.random() < expired_share:
        expiry = today - dt.timedelta(days=int(rng.integers(1, 5 * 365)))
    else:
        expiry = today + dt.timedelta(days=int(rng.integers(0, 10 * 365)))
    n_len = 9 if rng.random() < 0.85 else int(rng.integers(6, 9))
    if fmt in (Format.TD1, Format.TD2) and rng.random() < 0.05:
        n_len = int(rng.integers(10, 13))
    code = {Format.TD3: ["P", "P", "P", "PN", "PD"], Format.TD2: ["I", "ID", "AC", "IR"],
            Format.TD1: ["I", "ID", "AC", "IP", "C"], Format.MRVA: ["V", "VC", "VT"],
            Format.MRVB: ["V", "VC", "VT"]}[fmt]
    opt_len = {Format.TD3: 14, Format.TD2: 7, Format.TD1: 15, Format.MRVA: 16,
               Format.MRVB: 8}[fmt]
    if n_len > 9:
        opt_len -= n_len - 9 + 2
    opt = _alnum(rng, int(rng.integers(1, opt_len + 1))) if rng.random() < 0.5 else ""
    out = {"document_code": str(rng.choice(code)), "issuing_state": state,
           "document_number": _alnum(rng, n_len), "nationality": nat,
           "birth_date": _yymmdd(birth), "sex": str(rng.choice(["M", "F", "F", "M", "X", "<"])),
           "expiry_date": _yymmdd(expiry),
           "primary_name": " ".join(_word(rng, 2, 12) for _ in range(int(rng.integers(1, 3)))),
           "secondary_name": " ".join(_word(rng, 2, 10) for _ in range(int(rng.integers(1, 4)))),
           "optional_data": opt}
    if fmt is Format.TD1 and rng.random() < 0.3:
        out["optional_data_2"] = _alnum(rng, int(rng.integers(1, 12)))
    return out


def spoil_check_digit(rng: np.random.Generator, lines: tuple[str, ...]) -> tuple[str, ...]:
    """The same lines with one check digit (document number, birth, expiry or composite)
    replaced by another digit: an invalid document."""
    fmt = Format(parse(lines).format)
    pos = {Format.TD1: [(0, 14), (1, 6), (1, 14), (1, 29)],
           Format.TD2: [(1, 9), (1, 19), (1, 27), (1, 35)],
           Format.TD3: [(1, 9), (1, 19), (1, 27), (1, 43)],
           Format.MRVA: [(1, 9), (1, 19), (1, 27)], Format.MRVB: [(1, 9), (1, 19), (1, 27)]}[fmt]
    li, ci = pos[int(rng.integers(0, len(pos)))]
    old = lines[li][ci]
    new = str((int(old) + int(rng.integers(1, 10))) % 10) if old.isdigit() else "7"
    out = list(lines)
    out[li] = out[li][:ci] + new + out[li][ci + 1:]
    return tuple(out)


@cache
def _font(px: int):  # noqa: ANN202 - PIL's font type
    from PIL import ImageFont

    from processors.card.mrz.font import ocrb_path

    return ImageFont.truetype(str(ocrb_path()), px)


def draw_mrz(face: np.ndarray, lines: tuple[str, ...], fmt: Format, rng: np.random.Generator,
             px_per_mm: float, clear: bool = True) -> list[list[float]]:
    """Print ``lines`` in OCR-B on ``face`` (in place) where Doc 9303 puts the zone.

    Args:
        face: ``(h, w, 3) uint8`` BGR document face, ``px_per_mm`` px per mm.
        lines: the MRZ lines (any length: bad-input documents print other shapes too).
        fmt: the layout whose line positions are used.
        rng: random generator (ink, small offsets of the zone, print blur).
        px_per_mm: face resolution.
        clear: paint the clear zone behind the lines first (a light plain band).

    Returns:
        Each line's box ``[x0, y0, x1, y1]`` (face px).
    """
    from PIL import Image, ImageDraw

    h, w = face.shape[:2]
    if clear:
        top = int(h - MRZ_BAND_MM[fmt] * px_per_mm)
        tone = np.clip(np.median(face[: top].reshape(-1, 3), axis=0) * 0.3 + 175, 0, 245)
        band = np.clip(tone + rng.normal(0, 3, (h - top, w, 3)), 0, 255)
        face[top:] = band.astype(np.uint8)
    n = len(lines[0]) if lines else 0
    pitch = PITCH_MM * px_per_mm * rng.uniform(0.985, 1.015)
    size = int(round(CHAR_HEIGHT_MM * px_per_mm * rng.uniform(0.92, 1.08) / 0.75))
    font = _font(size)
    x0 = (w - pitch * n) / 2 + rng.normal(0, 0.6) * px_per_mm
    dy = rng.normal(0, 0.5) * px_per_mm
    ink = int(rng.integers(0, 60))
    layer = Image.new("L", (w, h), 0)
    draw = ImageDraw.Draw(layer)
    boxes = []
    for k, line in enumerate(lines):
        centres = LINE_CENTRES_MM[fmt]
        cy = h - centres[min(k, len(centres) - 1)] * px_per_mm + dy
        top = cy - 0.75 * size / 2 - 0.3 * size  # OCR-B caps start ~0.22 em below the origin
        for i, ch in enumerate(line):
            draw.text((x0 + i * pitch + rng.normal(0, 0.03) * px_per_mm, top), ch, font=font,
                      fill=255)
        boxes.append([float(x0), float(cy - 0.375 * size), float(x0 + pitch * len(line)),
                      float(cy + 0.375 * size)])
    y0 = max(0, int(min(b[1] for b in boxes) - px_per_mm * 3)) if boxes else h
    printed = np.asarray(layer, np.float32)[y0:] / 255.0  # only the rows printed on
    mask = cv2.GaussianBlur(printed, (0, 0), rng.uniform(0.3, 0.8))[..., None]
    face[y0:] = np.clip(face[y0:] * (1 - mask) + ink * mask, 0, 255).astype(np.uint8)
    return boxes


def render_document(rng: np.random.Generator, fmt: Format, lines: tuple[str, ...],
                    px_per_mm: float = FACE_PX_PER_MM, portrait: str | None = None
                    ) -> tuple[np.ndarray, np.ndarray, list[list[float]], bool]:
    """A document face with its MRZ: ``(face BGR, alpha, line boxes, has_portrait)``.

    TD1 is the back of an ID-1 card (no portrait); TD2 and TD3 data pages carry one (85 % a
    photo, else a drawn silhouette, as :func:`render_face` draws them).
    """
    w_mm, _ = DOC_MM[fmt]
    width = int(round(w_mm * px_per_mm))
    if fmt is Format.TD1:
        portrait = "none"
    face, alpha = render_face(rng, "id_card" if fmt is Format.TD1 else "passport", width,
                              portrait=portrait, blank=False, fake_mrz=False)
    if DOC_MM[fmt] == DOC_MM[Format.TD2]:  # ID-2 is 105 x 74 mm, ID-3's aspect within 0.1 %
        face = cv2.resize(face, (width, int(round(DOC_MM[fmt][1] * px_per_mm))))
        alpha = cv2.resize(alpha, (face.shape[1], face.shape[0]))
    boxes = draw_mrz(face, lines, fmt, rng, px_per_mm)
    return face, alpha, boxes, portrait != "none"


BOOKLET_COVER_MM = (1.0, 3.0)
"""How far an open booklet's cover shows beyond its pages (mm), where it shows
(:func:`booklet_face`)."""


def booklet_face(rng: np.random.Generator, face: np.ndarray, alpha: np.ndarray,
                 px_per_mm: float = FACE_PX_PER_MM
                 ) -> tuple[np.ndarray, np.ndarray, tuple[int, int, int, int], tuple[float, float]]:
    """An ID-3 data page (``face``, ``alpha``: ``(h, w, 3)`` BGR and ``(h, w)`` uint8) in its
    open booklet: the facing page above it (a page of the same size with print and tint, no
    portrait and no zone, as :func:`synth.render_face` draws one), the fold between them
    shaded, and 60 % of the time the cover showing beyond the pages
    (:data:`BOOKLET_COVER_MM`, a dark cloth colour). ICAO Doc 9303 part 4: the data page is an
    ID-3 page (125 x 88 mm), so the open booklet is 125 x 176 mm.

    Returns:
        ``(face, alpha, page_box, face_mm)``: the spread ``(H, W, 3) uint8`` BGR and its alpha,
        the data page's box ``(x0, y0, x1, y1)`` in the spread's px, and the spread's size (mm).
    """
    h, w = face.shape[:2]
    facing, facing_alpha = render_face(rng, "passport", w, portrait="none", blank=False,
                                       fake_mrz=False)
    facing = cv2.resize(facing, (w, h), interpolation=cv2.INTER_AREA)
    facing_alpha = cv2.resize(facing_alpha, (w, h), interpolation=cv2.INTER_NEAREST)
    spread = np.concatenate([facing, face]).astype(np.float32)
    spread_alpha = np.concatenate([facing_alpha, alpha])
    # the fold: a soft shadow a few mm either side of the pages' join
    ys = np.arange(2 * h, dtype=np.float32)
    width = rng.uniform(1.5, 5.0) * px_per_mm
    spread *= (1.0 - rng.uniform(0.1, 0.35) * np.exp(-((ys - h) / width) ** 2))[:, None, None]
    spread_alpha[h - 2:h + 2] = 255  # the pages' rounded corners meet at the fold
    spread = np.clip(spread, 0, 255).astype(np.uint8)
    cover = int(round(rng.uniform(*BOOKLET_COVER_MM) * px_per_mm)) if rng.random() < 0.6 else 0
    if cover:
        colour = rng.integers(10, 90, 3).astype(np.uint8)
        big = np.empty((2 * h + 2 * cover, w + 2 * cover, 3), np.uint8)
        big[:] = colour
        inside = big[cover:cover + 2 * h, cover:cover + w]
        m = (spread_alpha > 127)[..., None]
        inside[:] = np.where(m, spread, inside)
        spread, spread_alpha = big, np.full(big.shape[:2], 255, np.uint8)
    box = (cover, cover + h, cover + w, cover + 2 * h)
    mm = (spread.shape[1] / px_per_mm, spread.shape[0] / px_per_mm)
    return spread, spread_alpha, box, mm


def camera_quad(rng: np.random.Generator, size: tuple[int, int], doc_mm: tuple[float, float],
                fill: float, tilt_deg: float, rotation_deg: float, focal_px: float,
                margin: float = 0.02) -> np.ndarray | None:
    """Corners TL, TR, BR, BL (px) of a ``doc_mm`` document seen by a pinhole camera.

    The document is rotated by ``rotation_deg`` in its plane, tilted by ``tilt_deg`` about a
    random axis in its plane, and placed at the distance where its long side spans ``fill`` of
    the frame's long side (fronto-parallel), at a random position that keeps every corner
    ``margin`` of the shorter side inside the frame; principal point at the frame's centre.

    Returns:
        ``(4, 2) float64``, or None when no placement fits (try other draws).
    """
    W, H = size
    w, h = doc_mm
    corners = np.array([[-w / 2, -h / 2, 0], [w / 2, -h / 2, 0], [w / 2, h / 2, 0],
                        [-w / 2, h / 2, 0]], np.float64)
    a = np.radians(rotation_deg)
    rz = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
    axis_angle = rng.uniform(0, 2 * np.pi)
    axis = np.array([np.cos(axis_angle), np.sin(axis_angle), 0.0])
    rt, _ = cv2.Rodrigues(axis * np.radians(tilt_deg))
    r = rt @ rz
    z = focal_px * w / (fill * max(W, H))  # mm: the long side spans fill * max(W, H) px
    m = margin * min(W, H)
    for _ in range(50):
        u, v = rng.uniform(0.3, 0.7) * W, rng.uniform(0.3, 0.7) * H
        t = np.array([(u - W / 2) * z / focal_px, (v - H / 2) * z / focal_px, z])
        p = corners @ r.T + t
        if np.any(p[:, 2] <= 1.0):
            return None
        q = np.stack([focal_px * p[:, 0] / p[:, 2] + W / 2, focal_px * p[:, 1] / p[:, 2] + H / 2],
                     axis=1)
        if q[:, 0].min() >= m and q[:, 1].min() >= m and q[:, 0].max() <= W - 1 - m \
                and q[:, 1].max() <= H - 1 - m:
            return q
    return None


_SIZES = ((1600, 1200), (1200, 1600), (1920, 1080), (1280, 960))


def photograph(rng: np.random.Generator, face: np.ndarray, alpha: np.ndarray, truth: DocTruth,
               band_px: float, size: tuple[int, int] | None = None,
               glare_share: float = 0.15, grey_share: float = 0.1,
               hand_share: float = 0.15,
               lines: Sequence[tuple[Sequence[float], str]] = (),
               page: tuple[tuple[int, int, int, int], tuple[float, float]] | None = None
               ) -> np.ndarray:
    """Photograph a document face (``truth`` is filled in: quad, DPI, tilt, light, glare, and
    with ``lines`` the MRZ characters the photo lost).

    Args:
        face, alpha: the face (BGR) and its alpha.
        truth: the document's truth; its photo fields are set here.
        band_px: height of the MRZ band at the face's bottom (face px), for ``glare_on_mrz``.
        size: ``(width, height)`` px of the photo (None: one of a few phone-like sizes).
        glare_share: share of photos with a glare spot on the document (40 % of them over the
            MRZ band).
        grey_share: share of grey photocopies.
        hand_share: share of photos with the document held in a hand
            (:func:`processors.card.training.synth.holding_hand`).
        lines: each MRZ line's box ``[x0, y0, x1, y1]`` (face px, :func:`draw_mrz`) and its
            text, for :attr:`DocTruth.mrz_chars_hidden` (empty: not measured).
            Measuring draws nothing from ``rng``: the photo is the same either way.
        page: where ``face`` is more than the document (an open booklet, :func:`booklet_face`):
            the document's box in face px and the face's size (mm); ``truth``'s quad and DPI
            are then the document's, and ``band_px`` is measured from the box's bottom.

    Returns:
        The photo, ``(H, W, 3) uint8`` BGR (JPEG-compressed once).
    """
    W, H = size or _SIZES[int(rng.integers(0, len(_SIZES)))]
    doc_mm = page[1] if page is not None else truth.doc_mm
    if rng.random() < grey_share:
        g = cv2.cvtColor(face, cv2.COLOR_BGR2GRAY).astype(np.float32)
        g = np.clip((g - 128) * rng.uniform(1.1, 1.5) + 140, 0, 255)  # copier contrast
        face = cv2.cvtColor(g.astype(np.uint8), cv2.COLOR_GRAY2BGR)
        truth.grey_copy = True
    quad = None
    while quad is None:
        rot = float(rng.uniform(-20, 20) if rng.random() < 0.9 else rng.uniform(-180, 180))
        tilt = float(rng.uniform(0, 35) if rng.random() < 0.85 else rng.uniform(0, 10))
        focal = float(np.hypot(W, H) * rng.uniform(0.55, 0.95))
        fill = float(rng.uniform(0.5, 0.92) if rng.random() < 0.95 else rng.uniform(0.3, 0.5))
        quad = camera_quad(rng, (W, H), doc_mm, fill, tilt, rot, focal)
    truth.quad, truth.tilt_deg, truth.rotation_deg, truth.focal_px = (
        np.round(quad, 2).tolist(), round(tilt, 3), round(rot, 3), round(focal, 1))
    fh, fw = face.shape[:2]
    hom = cv2.getPerspectiveTransform(np.array([[0, 0], [fw, 0], [fw, fh], [0, fh]], np.float32),
                                      quad.astype(np.float32))
    x0, y0, x1, y1 = page[0] if page is not None else (0, 0, fw, fh)
    doc_quad = quad
    if page is not None:  # the document's own corners
        corners = np.array([[[x0, y0], [x1, y0], [x1, y1], [x0, y1]]], np.float32)
        doc_quad = cv2.perspectiveTransform(corners, hom)[0].astype(np.float64)
        truth.quad = np.round(doc_quad, 2).tolist()
    truth.dpi = round(effective_dpi(doc_quad, truth.doc_mm), 2)
    bg = background(rng, W, H)
    img = composite(bg, face, alpha, quad)
    hand = None
    if rng.random() < hand_share:
        held = holding_hand(img, quad, rng)
        hand = np.any(held != img, axis=2).astype(np.uint8)
        img = held
    out: np.ndarray = img.astype(np.float32)
    gy, gx = np.mgrid[0:H, 0:W].astype(np.float32)
    a = rng.uniform(0, 2 * np.pi)
    out *= (1 + rng.uniform(-0.25, 0.15) * (np.cos(a) * (gx / W - 0.5)
                                            + np.sin(a) * (gy / H - 0.5)))[..., None]
    light = 1.0
    if rng.random() < 0.1:
        light = float(rng.uniform(0.3, 0.55))
    elif rng.random() < 0.05:
        light = float(rng.uniform(1.25, 1.5))
    out *= light
    truth.low_light = round(light, 3)
    lit = out.copy() if lines else None  # before the glare, for mrz_chars_hidden
    if rng.random() < glare_share:
        on_mrz = rng.random() < 0.4
        fx = x0 + rng.uniform(0.15, 0.85) * (x1 - x0)
        fy = (rng.uniform(y1 - band_px, y1 - 0.2 * band_px) if on_mrz
              else y0 + rng.uniform(0.1, 0.6) * (y1 - y0))
        c = cv2.perspectiveTransform(np.array([[[fx, fy]]], np.float32), hom)[0, 0]
        r = rng.uniform(0.06, 0.16) * float(np.min(quad.max(0) - quad.min(0)))
        out += rng.uniform(250, 450) * np.exp(-(((gx - c[0]) ** 2 + (gy - c[1]) ** 2)
                                                / (2 * r * r)))[..., None]
    out = np.clip(out, 0, 255).astype(np.uint8)
    band = np.zeros((H, W), np.uint8)
    poly = cv2.perspectiveTransform(np.array([[[x0, y1 - band_px], [x1, y1 - band_px],
                                               [x1, y1], [x0, y1]]], np.float32), hom)
    cv2.fillPoly(band, [np.round(poly[0]).astype(np.int32)], 1)
    sat = cv2.inRange(out, (250, 250, 250), (255, 255, 255))
    n_band = max(cv2.countNonZero(band), 1)
    truth.glare_on_mrz = cv2.countNonZero(cv2.bitwise_and(sat, sat, mask=band)) / n_band >= 0.1
    truth.hand_on_mrz = (hand is not None and cv2.countNonZero(hand & band) / n_band
                         >= HAND_ON_MRZ_SHARE)
    if lit is not None:
        truth.mrz_chars_hidden = chars_hidden(lit, sat, hand, hom, lines)
    if rng.random() < 0.6:
        out = cv2.GaussianBlur(out, (0, 0), rng.uniform(0.3, 1.2))
    noise = rng.uniform(1, 5) * (2.0 if light < 0.6 else 1.0)
    if rng.random() < 0.7:
        out = np.clip(out + rng.normal(0, noise, out.shape), 0, 255).astype(np.uint8)
    return jpeg_round_trip(out, int(rng.integers(60, 96)))


def chars_hidden(lit: np.ndarray, sat: np.ndarray, hand: np.ndarray | None, hom: np.ndarray,
                 lines: Sequence[tuple[Sequence[float], str]]) -> int:
    """How many MRZ characters a photo lost (:attr:`DocTruth.mrz_chars_hidden`).

    Args:
        lit: ``(H, W, 3) float32`` the photo before the glare spot (after light and the hand).
        sat: ``(H, W) uint8`` the photo's saturated pixels after the glare (non-zero: saturated).
        hand: ``(H, W) uint8`` the thumb's pixels (non-zero), or None.
        hom: ``(3, 3)`` face px -> photo px.
        lines: each line's box ``[x0, y0, x1, y1]`` (face px) and text; character ``j``'s cell
            is the box's ``j``-th of ``len(text)`` equal parts.

    Returns:
        The characters whose cell is at least :data:`HIDDEN_HAND_SHARE` under the thumb, or
        whose ink is at least :data:`HIDDEN_INK_SHARE` saturated; a cell's ink: its pixels
        darker, before the glare, than the middle of its 5th and 95th grey percentiles (than
        the lowest quarter of that range for a filler ``<``, whose chevron is thin).
    """
    grey = cv2.cvtColor(np.clip(lit, 0, 255).astype(np.uint8), cv2.COLOR_BGR2GRAY)
    H, W = grey.shape
    lost = 0
    for (x0, y0, x1, y1), text in lines:
        p = (x1 - x0) / max(len(text), 1)
        for j, ch in enumerate(text):
            cell = np.array([[[x0 + j * p, y0], [x0 + (j + 1) * p, y0],
                              [x0 + (j + 1) * p, y1], [x0 + j * p, y1]]], np.float32)
            poly = np.round(cv2.perspectiveTransform(cell, hom)[0]).astype(np.int32)
            bx, by, bw, bh = cv2.boundingRect(poly)
            bx0, by0 = max(bx, 0), max(by, 0)
            bx1, by1 = min(bx + bw, W), min(by + bh, H)
            if bx1 - bx0 < 2 or by1 - by0 < 2:
                continue  # outside the photo: the card's quad is always inside it
            m = np.zeros((by1 - by0, bx1 - bx0), np.uint8)
            cv2.fillPoly(m, [poly - [bx0, by0]], 1)
            inside = m.astype(bool)
            if inside.sum() < 4:
                continue
            if hand is not None and (
                    float((hand[by0:by1, bx0:bx1][inside] > 0).mean()) >= HIDDEN_HAND_SHARE):
                lost += 1  # under the thumb, whose skin may leave no ink to find below
                continue
            g = grey[by0:by1, bx0:bx1][inside].astype(np.float32)
            lo, hi = np.percentile(g, 5), np.percentile(g, 95)
            ink = g < (lo + (hi - lo) * (0.25 if ch == "<" else 0.5))
            if ink.any():
                lost += float((sat[by0:by1, bx0:bx1][inside][ink] > 0).mean()) >= HIDDEN_INK_SHARE
    return lost


def scan(rng: np.random.Generator, face: np.ndarray, alpha: np.ndarray,
         truth: DocTruth,
         page: tuple[tuple[int, int, int, int], tuple[float, float]] | None = None
         ) -> np.ndarray:
    """Scan a document face (``truth`` is filled in: quad, DPI, rotation): a flatbed scan at
    150-300 dpi (60 %) or a phone app's crop 640-1200 px wide (40 %), as
    :func:`processors.card.training.synth.scan_of` makes them (thin plain margins or none, no
    perspective, no glare); ``page`` as :func:`photograph`'s (an open booklet: the quad and
    DPI are the data page's). Returns the upload, ``(H, W, 3) uint8`` BGR."""
    flatbed = rng.random() < 0.6
    face_mm = page[1] if page is not None else truth.doc_mm
    width = (face_mm[0] / 25.4 * rng.uniform(150, 300) if flatbed
             else float(rng.choice([640, 800, 1000, 1200])))
    fh, fw = face.shape[:2]
    h = int(round(fh * width / fw))
    face = cv2.resize(face, (int(round(width)), h), interpolation=cv2.INTER_AREA)
    alpha = cv2.resize(alpha, (face.shape[1], h), interpolation=cv2.INTER_AREA)
    img, quad = scan_of(rng, face, alpha, "flatbed" if flatbed else "cropped")
    if page is not None:  # the document's corners: the scan maps the face affinely
        x0, y0, x1, y1 = page[0]
        tl, tr, _, bl = quad
        at = lambda u, v: tl + (tr - tl) * u / fw + (bl - tl) * v / fh  # noqa: E731
        quad = np.array([at(x0, y0), at(x1, y0), at(x1, y1), at(x0, y1)], np.float64)
    top = quad[1] - quad[0]
    truth.quad, truth.rotation_deg = (np.round(quad, 2).tolist(),
                                      round(float(np.degrees(np.arctan2(top[1], top[0]))), 3))
    truth.dpi = round(effective_dpi(quad, truth.doc_mm), 2)
    truth.capture = "scan"
    return img


def document(rng: np.random.Generator, fmt: Format | None = None,
             today: dt.date = REFERENCE_DATE, invalid_share: float = 0.05,
             expired_share: float = 0.2, size: tuple[int, int] | None = None,
             glare_share: float = 0.15, grey_share: float = 0.1, capture: str = "photo",
             hand_share: float = 0.15, fields: dict[str, str] | None = None,
             booklet: bool = False) -> tuple[np.ndarray, DocTruth]:
    """One photographed (``capture`` ``photo``) or scanned (``scan``, :func:`scan`) document
    and its truth (``fmt`` None: TD3 45 %, TD1 35 %, TD2 20 %), with ``fields``
    (:func:`processors.card.mrz.icao.compose`'s keyword arguments) or random ones
    (:func:`random_fields`); with ``booklet``, a TD3 data page in its open booklet
    (:func:`booklet_face`)."""
    if booklet:
        fmt = Format.TD3
    if fmt is None:
        u = rng.random()
        fmt = Format.TD3 if u < 0.45 else Format.TD1 if u < 0.8 else Format.TD2
    lines = compose(fmt, **(fields or random_fields(rng, fmt, today, expired_share)))
    if rng.random() < invalid_share:
        lines = spoil_check_digit(rng, lines)
    mrz = parse(lines)
    truth = DocTruth(format=fmt.value, lines=list(lines), fields=mrz.values(),
                     checks=mrz.checks.as_dict(), all_valid=mrz.checks.all_valid,
                     expired=bool(mrz.expired(today)), doc_type=DOC_TYPE[fmt],
                     doc_mm=DOC_MM[fmt])
    face, alpha, boxes, has_portrait = render_document(rng, fmt, lines)
    truth.has_portrait = has_portrait
    page = None
    if booklet:
        face, alpha, box, face_mm = booklet_face(rng, face, alpha)
        boxes = [[b[0] + box[0], b[1] + box[1], b[2] + box[0], b[3] + box[1]] for b in boxes]
        page, truth.booklet = (box, face_mm), True
    if capture == "scan":
        return scan(rng, face, alpha, truth, page), truth
    img = photograph(rng, face, alpha, truth, MRZ_BAND_MM[fmt] * FACE_PX_PER_MM, size,
                     glare_share, grey_share, hand_share,
                     lines=list(zip(boxes, lines, strict=True)), page=page)
    return img, truth


def write_set(out: Path, n: int, seed: int, today: dt.date = REFERENCE_DATE,
              scans: int = 0, formats: tuple[Format, ...] | None = None,
              booklets: int = 0) -> Path:
    """Write ``n`` photographed documents (JPEG quality 95) and ``manifest.json``, then
    ``scans`` scanned ones (:func:`scan`) from a second stream ``default_rng([seed, 44])``,
    then ``booklets`` TD3 data pages in their open booklets (:func:`booklet_face`), photographed
    and scanned in turn, from a third stream ``default_rng([seed, 45])``, so the first ``n``
    (and the scans) are the same with or without the later ones. ``formats``: the documents'
    formats in turn (None: :func:`document`'s mix).

    The manifest: ``{"seed", "today", "documents": [{"file", "truth": DocTruth}]}``; the
    ``images`` list of the ``shared/cases`` format is included too (``quad_approx``, ``kind``),
    so ``cardstream eval card`` reads the set as it is.

    Returns:
        The manifest path.
    """
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    docs, images = [], []
    rng2 = np.random.default_rng([seed, 44])
    rng3 = np.random.default_rng([seed, 45])
    for i in range(n + scans + booklets):
        scanned, opened = n <= i < n + scans, i >= n + scans
        b = i - n - scans
        img, truth = document(rng3 if opened else rng2 if scanned else rng,
                              formats[i % len(formats)] if formats else None, today=today,
                              capture="scan" if scanned or (opened and b % 2) else "photo",
                              booklet=opened)
        name = (f"booklet_doc_{seed}_{b:04d}.jpg" if opened
                else f"scan_doc_{seed}_{i - n:04d}.jpg" if scanned else f"doc_{seed}_{i:04d}.jpg")
        cv2.imwrite(str(out / name), img, [cv2.IMWRITE_JPEG_QUALITY, 95])
        docs.append({"file": name, "truth": asdict(truth)})
        images.append({"file": name, "expect": {"kind": truth.doc_type, "quad_approx": truth.quad,
                                                 "iou_min": 0.9},
                       "why": f"synthetic {truth.format} document, {truth.capture} "
                              f"(seed {seed}, index {i})"})
    path = out / "manifest.json"
    path.write_text(json.dumps({"seed": seed, "today": today.isoformat(), "documents": docs,
                                "images": images, "events": []}, indent=1))
    return path


def _count(text: str) -> int:
    """``--n``: a whole number of documents, at least 1 (0 or -1 wrote an empty set).

    Raises:
        argparse.ArgumentTypeError: anything else (argparse's usage error, exit 2).
    """
    import argparse

    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return n


def main() -> None:
    """CLI entry: ``python -m processors.card.training.documents --out DIR --n N --seed S``."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--n", type=_count, default=600, help="documents to write (at least 1)")
    ap.add_argument("--seed", type=int, default=20261204)
    ap.add_argument("--today", type=dt.date.fromisoformat, default=REFERENCE_DATE)
    ap.add_argument("--scans", type=int, default=0,
                    help="also write this many scanned documents (a second stream)")
    ap.add_argument("--formats", type=lambda v: tuple(Format(x) for x in v.split(",")),
                    default=None, help="comma-separated formats in turn, e.g. MRVA,MRVB "
                                       "(default: TD3 45 %%, TD1 35 %%, TD2 20 %%)")
    ap.add_argument("--booklets", type=int, default=0,
                    help="also write this many TD3 data pages in their open booklets, "
                         "photographed and scanned in turn (a third stream)")
    a = ap.parse_args()
    print(write_set(a.out, a.n, a.seed, a.today, a.scans, a.formats, a.booklets))


if __name__ == "__main__":
    configure_logging()  # JSON lines on stderr, INFO and above, before anything logs
    main()
