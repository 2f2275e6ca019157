"""Verify the found documents of a batch: capture quality, portrait, machine-readable zone.

Runs after the card processor has found, judged and turned upright each card, on what it already
has: the decoded photo, the homography of the upright card, its ``quality_width`` thumbnail.
For the whole batch it makes one warp call for the MRZ bands (two per card, the bottom as
rectified and the top turned), one recogniser call for all their lines
(:class:`processors.card.mrz.read.MrzReader`) and one face-detector call for the portrait
zones (:class:`processors.mtcnn.Mtcnn`, the ID-photo task's batched MTCNN); the measures
(:mod:`processors.card.quality`) are plain array arithmetic on the thumbnail.

Personal data: the MRZ's values stay inside :class:`Verification` (``mrz.mrz``) and reach the
result only through :meth:`Verification.payload` with ``values=True`` (an upload that asks,
with a setting that allows it); nothing here logs.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from processors.card.mrz.icao import Format
from processors.card.mrz.locate import band_maps
from processors.card.mrz.read import MrzRead, MrzReader, View, locate_zones
from processors.card.mrz.recognise import Recogniser
from processors.card.policy import Profile, VerifySettings
from processors.card.quality import (
    PORTRAIT_ZONE,
    PORTRAIT_ZONE_RIGHT,
    Quality,
    measure,
    portrait_crop,
)
from processors.pixels import Decoded, PixelBackend
from processors.runtime import RuntimeSettings
from schemas.reasons import ReasonCode

ID2_MM = (105.0, 74.0)
"""ISO/IEC 7810 ID-2 (mm): a TD2 document (ICAO Doc 9303 part 6) or an MRV-B visa (part 7),
rectified with ID-3's shape."""
ID2_FORMATS = (Format.TD2, Format.MRVB)
"""MRZ formats printed on ID-2 documents (:data:`ID2_MM`)."""
DOC_MM = {"id_card": (85.60, 53.98), "passport": (125.0, 88.0)}
Zone = tuple[float, float, float, float]
PORTRAIT_PLACES: tuple[tuple[bool, Zone], ...] = (
    (False, PORTRAIT_ZONE_RIGHT), (True, PORTRAIT_ZONE), (True, PORTRAIT_ZONE_RIGHT))
"""Where else a document's portrait is searched, in order, when the portrait zone of its upright
card holds no face and no machine-readable zone was found to fix its orientation: ``(half turn,
zone)`` pairs. An ID-1 card may carry its portrait on the right (:data:`PORTRAIT_ZONE_RIGHT`),
and a card the orientation classifier read the wrong way up shows its face turned, which MTCNN
does not find: a face found only after a half turn turns the card. The right comes first: an ID-3
data page (ICAO Doc 9303 part 4) and many ID-1 fronts print a ghost image of the portrait on the
right, which, where the portrait itself is not found (glare, a thumb), counts as the document's
portrait and keeps the card as it is, where searched on the half turn first it would turn it."""
PORTRAIT_CANVAS = 160
"""Side (px) of the face detector's canvas for a portrait zone (the zone of a 512 px wide
thumbnail is about 185 x 250 px; a portrait's face spans 60-100 px of it)."""
PORTRAIT_MIN_FACE = 20.0
"""Smallest face searched in the portrait zone (canvas px)."""
PORTRAIT_CLAHE = (4.0, 4)
"""Contrast-limited histogram equalisation of the portrait zone's lightness before the face
detector (clip limit, tiles per side): a webcam's washed-out photo of a card left the
portrait's face below MTCNN's R-Net threshold (the three real ID cards of ``../shared/cases``:
0 of 3 found, NO_PORTRAIT; equalised at clip 2.0: 3 of 3). Measured over the 600-document MRZ
set (seed 20261204): 314 of 401 pages with a portrait found against 311 (the rest are drawn
silhouettes and glare over the face), 0 of 194 TD1 backs, and 0 of 201 generated card faces
without a portrait (seed 20261207), as before (MODEL.md, *The portrait check, session 63*).
Clip 4.0 since session 64: the three real cards darkened (0.45, 0.35), noised (sigma 20),
washed out (0.5, 0.4) or blurred (sigma 2) had their portrait found in 13 of 20 zones at clip
2.0 and in 20 of 20 at 4.0, with the same 323 of 413 zones of the MRZ set's portrait pages,
and 0 of 231 generated card faces without a portrait (1 at 2.0) (MODEL.md, *The portrait
check on degraded copies, session 64*)."""


def portrait_canvas(zone_bgr: np.ndarray) -> np.ndarray:
    """The face detector's input for a portrait zone: scaled so its longer side is
    :data:`PORTRAIT_CANVAS` px, lightness equalised (:data:`PORTRAIT_CLAHE`), RGB.

    Args:
        zone_bgr: ``(h, w, 3) uint8`` BGR, the zone of a rectified card
            (:func:`processors.card.quality.portrait_crop`).

    Returns:
        ``(h', w', 3) uint8`` RGB with ``max(h', w') == PORTRAIT_CANVAS``.
    """
    f = PORTRAIT_CANVAS / max(zone_bgr.shape[:2])
    z = cv2.resize(zone_bgr, (max(1, round(zone_bgr.shape[1] * f)),
                              max(1, round(zone_bgr.shape[0] * f))), interpolation=cv2.INTER_AREA)
    lab = cv2.cvtColor(z, cv2.COLOR_BGR2LAB)
    clip, tiles = PORTRAIT_CLAHE
    lab[..., 0] = cv2.createCLAHE(clip, (tiles, tiles)).apply(np.ascontiguousarray(lab[..., 0]))
    return cv2.cvtColor(lab, cv2.COLOR_LAB2RGB)


@dataclass(frozen=True, slots=True)
class CardView:
    """One found card as the verifier reads it.

    Attributes:
        image: the decoded photo.
        homography: ``(3, 3)`` map from px of the upright card at ``size`` to the decoded px.
        size: ``(width, height)`` px of the upright card (the canonical ISO/IEC 7810 size).
        doc_type: ``id_card`` or ``passport``.
        quad: ``(4, 2)`` the card's corners in the upload's px, TL first as the rectified card
            reads them (:func:`processors.card.quality.measure`: its first side is the
            document's width).
        upload_size: ``(width, height)`` of the upload (px).
        thumb: the upright card, ``(h, w, 3) uint8`` BGR at ``quality_width``.
        alternative: the other document type's ``(doc_type, homography, size)``: the format
            read decides (a TD1 zone is on an ID-1 card, TD2 and TD3 on ID-2 / ID-3 pages),
            whether the type was ``auto`` or named (a type named wrongly).
        in_doubt: the type is in doubt: the MRZ is searched on both rectifications. Else the
            alternative is a fallback, searched only when the card's own rectification shows
            no zone whose line count fits its type (a passport page whose quad took in some
            background reads as an ID-1 card with a two-line zone).
        any_format: the quad's shape says nothing of the document's format (the whole frame
            of a crop): :attr:`processors.card.mrz.read.View.any_format` on every view.
    """

    image: Decoded
    homography: np.ndarray
    size: tuple[int, int]
    doc_type: str
    quad: np.ndarray
    upload_size: tuple[int, int]
    thumb: np.ndarray
    alternative: tuple[str, np.ndarray, tuple[int, int]] | None = None
    in_doubt: bool = True
    any_format: bool = False


@dataclass(frozen=True, slots=True)
class Verification:
    """What the verification found on one card (before a profile judges it); ``error``: the
    exception this card's own verification raised (the processor fails this card alone,
    ``INTERNAL_ERROR``)."""

    quality: Quality | None
    mrz: MrzRead | None
    error: Exception | None = None
    zone_expected: bool = False
    portrait_turned: bool = False
    """The portrait was found only with the card turned by a half turn (:data:`PORTRAIT_PLACES`):
    the card reads the other way up (the processor turns it unless its ``orient`` setting is
    off), and ``quality`` was measured so."""

    def reasons(self, profile: Profile) -> list[ReasonCode]:
        """The codes this card earns under ``profile`` (quality first, then the MRZ's). Glare
        over the MRZ band counts where a zone was found, or where the document must carry one
        (an ID-3 data page), found or not; such a page on which the reader found no zone earns
        ``MRZ_MISSING``."""
        out: list[ReasonCode] = []
        if self.quality is not None:
            zone = self.zone_expected or (self.mrz is not None and self.mrz.found)
            out += profile.findings(self.quality, zone)
        if self.mrz is not None:
            out += list(self.mrz.reasons)
            if self.zone_expected and not self.mrz.found:
                out.append(ReasonCode.MRZ_MISSING)
        return out

    def payload(self, profile_name: str, profile: Profile, values: bool,
                withheld: bool = False) -> dict[str, Any]:
        """The result's ``quality`` and ``mrz`` objects (absent when not measured / read);
        ``values`` / ``withheld``: :meth:`MrzRead.payload`'s."""
        out: dict[str, Any] = {}
        if self.quality is not None:
            out["quality"] = {**self.quality.as_dict(), "profile": profile_name,
                              "bounds": profile.bounds()}
        if self.mrz is not None:
            out["mrz"] = self.mrz.payload(values, withheld)
        return out


class _LazyBands(Sequence[np.ndarray]):
    """A fallback view's bands (grey ``uint8``), warped by ``make`` on first use and kept."""

    def __init__(self, make: Callable[[], list[np.ndarray]]) -> None:
        self._make = make
        self._bands: list[np.ndarray] | None = None

    def _got(self) -> list[np.ndarray]:
        if self._bands is None:
            self._bands = self._make()
        return self._bands

    def __getitem__(self, i):  # noqa: ANN001, ANN204 - Sequence's int and slice forms
        return self._got()[i]

    def __len__(self) -> int:
        return len(self._got())


class Verifier:
    """The batched verification step (module doc).

    Args:
        settings: what to run (:class:`VerifySettings`).
        runtime: ONNX Runtime settings (the recogniser's and the face detector's sessions).
        glare_level: the card settings' saturation level (GLARE), for the glare measures.
        recogniser_file: another MRZ recogniser ONNX file (tests, a new training run).

    Raises:
        ModelError: a model file is missing or fails its pin.
    """

    def __init__(self, settings: VerifySettings, runtime: RuntimeSettings,
                 glare_level: int = 250, recogniser_file: Path | None = None) -> None:
        self.settings = settings
        self.glare_level = glare_level
        self.reader = MrzReader(Recogniser(runtime, recogniser_file)) if settings.mrz else None
        self.cpu_ms = {"mrz": 0.0, "quality": 0.0, "portrait": 0.0}
        """Process CPU time (ms) spent per step since construction (evals, benchmarks; the
        verify call runs on the batch's thread, so nothing else of this processor overlaps)."""
        self.faces = None
        if settings.portrait and settings.quality:
            from processors.mtcnn import Mtcnn

            self.faces = Mtcnn(runtime, canvas=PORTRAIT_CANVAS, min_face=PORTRAIT_MIN_FACE)

    def warm_up(self) -> None:
        """One recogniser call on a blank line (the face detector needs none)."""
        if self.reader is not None:
            self.reader.recogniser.warm_up()

    @staticmethod
    def views(cards: Sequence[CardView], pixels: PixelBackend) -> list[list[View]]:
        """Per card, the rectifications its MRZ is searched on (its own, then the
        ``alternative``, a fallback view unless the type is ``in_doubt``), each with its two
        bands (grey ``uint8``). The searched views are warped in one call of the card
        processor's pixel backend; a fallback view's bands only when the reader first looks at
        them (:class:`_LazyBands`), which most cards never need."""
        def warp(jobs: Sequence[tuple[CardView, np.ndarray, list]]) -> list[list[np.ndarray]]:
            return _warp_bands([(c.image, h, m) for c, h, m in jobs], pixels)

        plans = []  # per card: (doc_type, card, homography, band maps, fallback) per view
        for c in cards:
            per = [(c.doc_type, c.homography, c.size, False)]
            if c.alternative is not None:
                per.append((*c.alternative, not c.in_doubt))
            plans.append([(t, c, h, band_maps(t, size), f) for t, h, size, f in per])
        now = iter(warp([(c, h, m) for p in plans for _, c, h, m, f in p if not f]))
        def one(c: CardView, h: np.ndarray, m: list) -> list[np.ndarray]:
            return warp([(c, h, m)])[0]

        return [[View(t, _LazyBands(partial(one, c, h, m)) if f else next(now), fallback=f,
                      any_format=c.any_format)
                 for t, c, h, m, f in p] for p in plans]

    @staticmethod
    def zones_located(docs: Sequence[tuple[Decoded, np.ndarray, str, tuple[int, int]]],
                      pixels: PixelBackend) -> list[bool]:
        """Whether the MRZ locator finds a zone (:func:`processors.card.mrz.read.locate_zones`)
        in either band of each document, without reading it: the bands warped in one call of
        the pixel backend, then the locator's morphology alone (a few ms a document, against
        the tens a verification costs).

        Args:
            docs: per document, the decoded image, the ``(3, 3)`` map from px of the upright
                document at ``size`` to the decoded px, its type (``id_card`` or ``passport``)
                and ``size`` (``(width, height)`` px).
            pixels: the pixel backend the images were decoded by.
        """
        bands = _warp_bands([(d, h, band_maps(t, size)) for d, h, t, size in docs], pixels)
        return [bool(locate_zones(b)) for b in bands]

    def verify(self, cards: Sequence[CardView], today: dt.date, pixels: PixelBackend
               ) -> list[Verification]:
        """One :class:`Verification` per card, in order.

        Args:
            cards: the batch's found cards.
            today: the date expiry is judged at.
            pixels: the pixel backend the cards' images were decoded by.

        Raises:
            ModelError: the recogniser's or the face detector's call failed (the whole batch).
        """
        if not cards:
            return []
        s = self.settings
        got: list[MrzRead | Exception | None] = [None] * len(cards)
        t0 = time.process_time()
        if self.reader is not None:
            got = list(self.reader.read(self.views(cards, pixels), today))
        t1 = time.process_time()
        self.cpu_ms["mrz"] += (t1 - t0) * 1000.0
        errors: list[Exception | None] = [g if isinstance(g, Exception) else None for g in got]
        reads = [None if isinstance(g, Exception) else g for g in got]
        # the type the zone's format decided (an alternative read), else the card's
        types = [r.doc_type if r is not None and r.doc_type else c.doc_type
                 for c, r in zip(cards, reads, strict=True)]
        if not s.quality:
            return [Verification(None, r, e) for r, e in zip(reads, errors, strict=True)]
        # a zone found turned: the card reads upside down, and so do its thumbnail's zones
        thumbs = [c.thumb[::-1, ::-1] if r is not None and r.turned else c.thumb
                  for c, r in zip(cards, reads, strict=True)]
        quality: list[Quality | None] = []
        for k, (c, r, t, doc) in enumerate(zip(cards, reads, thumbs, types, strict=True)):
            doc_mm = ID2_MM if r is not None and r.format in ID2_FORMATS else DOC_MM[doc]
            try:
                quality.append(measure(c.quad, c.upload_size, doc_mm, doc, t, self.glare_level))
            except Exception as e:  # noqa: BLE001 - this card fails alone
                quality.append(None)
                errors[k] = errors[k] or e
        t2 = time.process_time()
        self.cpu_ms["quality"] += (t2 - t1) * 1000.0
        turned = [False] * len(cards)
        if self.faces is not None:
            want = [k for k, (r, doc) in enumerate(zip(reads, types, strict=True))
                    if quality[k] is not None and _carries_portrait(doc, r)]
            if want:
                found = self._portraits([thumbs[k] for k in want])
                for k, f in zip(want, found, strict=True):
                    q = quality[k]
                    if q is not None:  # want holds the measured ones
                        quality[k] = q.with_portrait(f)
                # no face in the portrait zone, no zone to tell the card's way up: elsewhere
                missed = [k for k, f in zip(want, found, strict=True)
                          if not f and not _zone_found(reads[k])]
                places = self._portrait_places([thumbs[k] for k in missed])
                for k, place in zip(missed, places, strict=True):
                    if place is None:
                        continue
                    turned[k], zone = place
                    c, doc, r = cards[k], types[k], reads[k]
                    t = thumbs[k][::-1, ::-1] if turned[k] else thumbs[k]
                    doc_mm = ID2_MM if r is not None and r.format in ID2_FORMATS else DOC_MM[doc]
                    quad = np.roll(c.quad, 2, axis=0) if turned[k] else c.quad
                    try:
                        quality[k] = measure(quad, c.upload_size, doc_mm, doc,
                                             np.ascontiguousarray(t), self.glare_level,
                                             zone).with_portrait(True)
                    except Exception as e:  # noqa: BLE001 - this card fails alone
                        quality[k] = None
                        errors[k] = errors[k] or e
            self.cpu_ms["portrait"] += (time.process_time() - t2) * 1000.0
        return [Verification(q, r, e, doc == "passport", turn)
                for q, r, e, doc, turn in zip(quality, reads, errors, types, turned, strict=True)]

    def _portraits(self, thumbs: Sequence[np.ndarray]) -> list[bool]:
        """Whether a face lies in each thumbnail's portrait zone (one detector call)."""
        found = self.faces_in([portrait_crop(t) for t in thumbs])
        assert found is not None
        return found

    def _portrait_places(self, thumbs: Sequence[np.ndarray]) -> list[tuple[bool, Zone] | None]:
        """Where each card's portrait lies other than in its portrait zone, the first of
        :data:`PORTRAIT_PLACES` that holds a face (one detector call for all), or None.

        Args:
            thumbs: upright thumbnails, ``(h, w, 3) uint8`` BGR.
        """
        jobs = [(j, place) for j in range(len(thumbs)) for place in PORTRAIT_PLACES]
        crops = [portrait_crop(thumbs[j][::-1, ::-1] if turn else thumbs[j], zone)
                 for j, (turn, zone) in jobs]
        found = self.faces_in(crops) or []
        out: list[tuple[bool, Zone] | None] = [None] * len(thumbs)
        for (j, place), f in zip(jobs, found, strict=True):
            if f and out[j] is None:
                out[j] = place
        return out

    def faces_in(self, zones: Sequence[np.ndarray]) -> list[bool] | None:
        """Whether the face detector finds a face in each zone, as it searches a portrait zone
        (:func:`portrait_canvas`), in one detector call; None without a face detector
        (``portrait`` or ``quality`` off).

        Args:
            zones: ``(h, w, 3) uint8`` BGR crops of rectified documents.

        Raises:
            ModelError: the face detector's call failed.
        """
        if self.faces is None:
            return None
        if not zones:
            return []
        return [len(f) > 0 for f in self.faces.detect([portrait_canvas(z) for z in zones])]


def _warp_bands(jobs: Sequence[tuple[Decoded, np.ndarray, list]], pixels: PixelBackend
                ) -> list[list[np.ndarray]]:
    """The MRZ bands of each job (the decoded image, the map from its document's upright px to
    decoded px, and the band maps of :func:`processors.card.mrz.locate.band_maps`), grey
    ``uint8``, warped in one call of ``pixels``: one list of bands per job."""
    if not jobs:
        return []
    hs = np.stack([h @ a for _, h, m in jobs for a, _ in m])
    imgs = [d for d, _, m in jobs for _ in m]
    sizes = [s for _, _, m in jobs for _, s in m]
    grey = [cv2.cvtColor(w, cv2.COLOR_BGR2GRAY)
            for w in pixels.to_host(pixels.warp(imgs, hs, sizes))]
    out, k = [], 0
    for _, _, m in jobs:
        out.append(grey[k:k + len(m)])
        k += len(m)
    return out


def _zone_found(read: MrzRead | None) -> bool:
    """A machine-readable zone was located and read (it decides which way is up)."""
    return read is not None and read.found


def _carries_portrait(doc_type: str, read: MrzRead | None) -> bool:
    """An ID-3 (or ID-2) data page carries a portrait; an ID-1 card does on its front, not on
    the back with a TD1 zone."""
    if doc_type == "passport":
        return True
    return read is None or not (read.found and read.format is Format.TD1)
