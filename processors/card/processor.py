"""The card processor: batched localisation, full-resolution refinement, rectification, verdicts."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import cv2
import numpy as np
import structlog

from processors.base import Artifact, Item, ModelInfo, Outcome, map_in_threads, outcomes_per_item
from processors.card import geometry as geo
from processors.card import scan
from processors.card.detect import INPUT_SIZE, RUNNER_UP_IOU, Detection, detect_from_mask
from processors.card.metrics import quad_iou
from processors.card.mrz.icao import Format
from processors.card.mrz.read import FORMATS_FOR
from processors.card.orient import Orienter
from processors.card.rectify import (
    canonical_size,
    choose_doc_type,
    direction_detail_ratio,
    glare_fraction,
    homography,
    laplacian_variance,
    median_grey,
    reading,
)
from processors.card.settings import CardSettings
from processors.card.verify import CardView, Verification, Verifier
from processors.decode import DecodeSettings
from processors.errors import DecodeError, ModelError
from processors.models import pinned_model
from processors.pixels import Decoded, PixelBackend, pixel_backend
from processors.runtime import BatchedModel, BatchStats, RuntimeSettings
from schemas.reasons import ReasonCode, Status

log = structlog.get_logger("cardstream.card")

MODEL_NAME = "u2netp-card"
MODEL_FILE = "card_u2netp"
"""Entry in ``processors/models.json``: u2netp fine-tuned on synthetic card composites by
``processors/card/training/train.py`` (see ``MODEL.md``)."""
POSTPROCESS_REVISION = "geo39"
"""Bumped whenever the post-processing changes the outputs (part of the version), including a
new ``card_orient`` model (``geo7``: the orientation classifier replaced the Haar cascades;
``geo8``: capture quality and the MRZ, whose zone found upside down turns the output;
``geo9``: the scan path, :mod:`processors.card.scan`; ``geo10``: the document type from the
quad's metric aspect ratio, and from the MRZ's format when the quad cannot tell; ``geo11``:
also in doubt when the sides' plain ratio and the metric one lie on either side of the
split; ``geo12``: the scan path asks every document for print, margins or none, made of
strokes rather than solid shapes; ``geo13``: a thin frame border is not taken for the
document's margins, :func:`processors.card.scan.thin_border`; ``geo14``: no GLARE where the
paper itself is saturated, :func:`processors.card.rectify.glare_threshold`, and an upload
the card path finds no card in is searched for a document's outline,
:func:`processors.card.scan.outline`; ``geo15``: the MRZ locator searches the bottom band
denoised before the top band and takes lines 1.2 line heights apart, and the paper is
saturated by its light ground's 10th percentile; ``geo16``: a scanned white page of the
passport type with neither portrait nor zone is NO_CARD, :func:`_no_data_page`; ``geo17``: a
paper at the saturation level, saturated all over the page, is no glare (replaced by
``geo18``);
``geo18``: on a white paper just under or at the saturation level, one narrow band of light,
glare counts from a few levels above the paper,
:func:`processors.card.rectify.glare_threshold`, and colourfulness is also read over the
portrait zone where a face is found there, so a white page around a colour face is no
PHOTOCOPY; ``geo19``: the card path's aspect scored on the metric ratio too, and a zone read
valid vouches for another quad: a suspect card gives way to the scan path's document, a card
too small to a scanned page, and the detector's winner to its runner-up,
:attr:`_Card.rival`, :attr:`_Card.unzoned`; ``geo20``: a card with neither, whose zone is found
and reads no valid zone, asks the scan path late and gives way to its page where the page's
reads valid, :meth:`CardProcessor._late_pages`; ``geo21``: an upload the card path finds no
card in whose frame has a document's shape and print on busy ground is a page only a valid
zone vouches for, :func:`processors.card.scan.busy_page`; ``geo22``: such a page is also the
rival of a suspect card (the portrait taken for the card on a page under security print) and
a late page, and a card whose runner-up does not read asks the late page too); ``geo23``: a
card covering under ``scan.PORTRAIT_SHARE`` of its frame with no zone found asks the late page
too, and a page of the scan path takes the place of a card with no zone found where the page's
zone reads, its check digits valid or not (the portrait taken for the card on a scan printed
with a wrong check digit, scan seed 20261210 #116); ``geo24``: a late page is also looked for
inside the card's own quad, warped upright, :meth:`CardProcessor._inner_page`; ``geo25``: a
zone printed off its pitch's phase is also read with its cells a quarter pitch over, the
shift taken for the whole zone where every line reads surely,
:func:`processors.card.mrz.recognise.phase_variants`; ``geo26``: a page only a zone vouches
for is also vouched for by a zone unreadable only for an unsure unchecked character, every
check digit passing, :func:`_zone_vouches`, a phase shift stands only where every character
reads surely, and a character its position's type forbids is not sure; ``geo27``: the portrait
zone's lightness equalised before the face detector,
:data:`processors.card.verify.PORTRAIT_CLAHE`; ``geo28``: a ``doc_type`` the upload names that
the quad's metric aspect ratio, out of doubt, says is the other type is DOC_TYPE_MISMATCH,
:attr:`_Card.mismatch`; ``geo29``: an open passport booklet, its spread taken whole, read on its
pages, :meth:`CardProcessor._booklet_pages`, :meth:`CardProcessor._frame_pages` and
:meth:`CardProcessor._spread_page`, and a zone above a page's edge line no longer hidden by it,
:func:`processors.card.mrz.locate.find_run`; ``geo30``: the whole frame is the document where
its zone reads valid, whatever format its shape suggests, as the card where the card path found
none and as a rival of the card it found, :meth:`CardProcessor._whole_frame`, and a rare
alternative's probability is kept to 1e-7, :func:`processors.card.mrz.recognise.read_line`;
``geo31``: a zone read valid in the other type's format is DOC_TYPE_MISMATCH where the upload
named the type, :func:`_zone_of_other_type`; ``geo32``: a white page with neither portrait nor
zone is no data page also where the card path found it with no document's edge around it,
:func:`_no_data_page`, :func:`_edgeless`; ``geo33``: a card named a type is read on the other
type's view as well where its own shows no zone, and takes the type of a zone read there,
DOC_TYPE_MISMATCH, :meth:`CardProcessor._verify`; ``geo34``: two cards side by side whose
saliency merged are MULTIPLE_CARDS, not NO_CARD, :func:`processors.card.detect._merged_pair`;
``geo35``: two ID-1 cards one above the other, taken for a booklet's spread whose page reads
TD1, are MULTIPLE_CARDS, :attr:`_Card.stacked`, a spread's pages are read on both types' views,
and are read for a card named ``id_card`` whose shape or frame is the spread's; ``geo36``: a
card whose shape, out of doubt, says the other type than the one named is read on both types'
views, not the other as a fallback; ``geo37``: such a spread is two cards only where its other
half shows one, a portrait or a zone, :meth:`CardProcessor._two_cards`: a card on a closed
passport or in a badge holder is one card; and a spread with no zone whose halves each show a
face is two card fronts; ``geo38``: a card named ``id_card`` with no zone on either view has
its halves' zones located, an open booklet's data page read, :func:`_spread_suspect`;
``geo39``: a card with no face in its portrait zone and no zone found has its portrait searched
on the right and on the half turn, whose face turns the card,
:data:`processors.card.verify.PORTRAIT_PLACES`)."""
BOOKLET_ASPECT = 176.0 / 125.0
"""Long over short side of an open passport booklet's spread: two ID-3 pages (ISO/IEC 7810,
125 x 88 mm) side by side along their long sides (ICAO Doc 9303 part 4)."""
BOOKLET_ASPECT_TOL = 0.04
"""Relative distance from :data:`BOOKLET_ASPECT` within which an upload's frame may be a
booklet's spread cropped edge to edge (:meth:`CardProcessor._frame_pages`): a crop a few mm
off the booklet's edges, or with its cover's edge showing."""
SPREAD_PAGE_IOU = 0.85
"""IoU with a half of the upload's frame from which a card-path quad on the frame is a page of
a booklet's spread cropped edge to edge (:meth:`CardProcessor._spread_page`): the cover
showing 1-3 mm around the pages and the page's rounded corners keep the quad inside the half
(0.9-0.97 on generated crops)."""
MISMATCH_MIN_SHORT_PX = 300.0
"""Shortest card (px, its short side) whose shape may contradict the type an upload names
(DOC_TYPE_MISMATCH). The one real ID card of ``../shared/cases`` (640 x 480 webcam photos, a
short side of 115-260 px) measured 1.25-1.41 for ID-1's 1.586 at scales 0.5-1.0: its corners
under a thumb and rounded, a few px off, move the ratio across the split. (MODEL.md, *The type
the upload names*.)"""
MISMATCH_CORNER_PX = 6.0
"""Corner error (px) allowed for besides: the measured ratio must lie further from
``auto_aspect_split`` than two such errors over the card's short side would move it (at 300 px,
4 %; at 600 px, 2 %)."""
INNER_INSET_PX = 2
""":meth:`CardProcessor._inner_page` judges the card's quad warped upright less this many
working px on each side: the quad's own edge, blurred, is no lid's."""
INNER_MIN_EDGES = 2
"""Sides of the document inside a card's quad that must be margined edges (a lid's or a
holder's; a side on the warp's frame is the quad's own): a document's shape alone, with no
edge inside, is the quad again. Combinations with fewer are not considered
(:func:`processors.card.scan.inner_document`): a scan's dark lid 12 % of the card's width
wide around an ID-1 card has ID-3's shape itself, and won over the card found by its four
edges (a second fresh user's trial, `A17_grey`)."""
INNER_MIN_AREA = 0.4
"""The smallest share of the warped quad the document inside it covers (the scan path's own
``scan_min_area_frac``, 0.6, is for a frame with a thin margin: a fresh user's TD1 cards
scanned on a dark lid cover 0.59 of it). Its sides are searched within ``scan_band_frac``
(16 %) of the shorter side from each side, so a document found by margined edges all round
covers at least 0.54 of an ID-1 frame and 0.53 of an ID-3 one: the bound refuses only a
document found by fewer edges and much smaller than the quad."""
INNER_MIN_PX = 32
"""The smallest warped quad (working px, either side) :meth:`CardProcessor._inner_page`
searches."""


class CardProcessor:
    """Card / passport localisation and rectification (``task = "card"``).

    One ``BatchedModel`` (u2netp with a symbolic batch axis) is created at construction;
    ``process_batch`` makes one model call per chunk of the chosen bucket for the whole batch,
    then post-processes each image: mask -> quad (source px) -> edge refinement ->
    homography to the canonical ISO/IEC 7810 size -> a ``quality_width`` thumbnail of the card
    -> upright (one batched call of the orientation classifier, :mod:`processors.card.orient`,
    for the batch's cards) -> verdicts -> the full-size warp with the turn in its homography ->
    JPEG.

    Verdicts (``rejected`` with reasons, thresholds in :class:`CardSettings`):
        ``NO_CARD``: no mask component, or confidence < ``min_confidence``, area share <
        ``min_area_frac``, rectangularity < ``min_rectangularity``, mask contrast <
        ``min_mask_contrast``, aspect outside ``aspect_range``, a corner angle further than
        ``max_corner_angle_dev_deg`` from 90°, or a non-convex quad.
        ``CARD_TOO_SMALL`` instead of ``NO_CARD`` when the area share is the only rule that fails
        and it is at least a tenth of ``min_area_frac`` (payload ``quad`` set): the model finds
        cards down to ~0.5 % of the frame, and "move closer" is what the user needs to hear.
        ``CARD_TOO_SMALL`` also when the card passes every NO_CARD rule but its long side (mean
        of the two long sides) is shorter than ``min_card_px`` source px, however large its
        share of a small frame: its text cannot be read, and the rectified output would be an
        upscale of a few pixels (``geo5``).
        ``MULTIPLE_CARDS``: a second confident quad of at least ``SECOND_CARD_AREA`` of the
        card's area lies apart from it (``detect.SECOND_CARD_OVERLAP``): which card to verify is
        ambiguous (payload ``quad``: the more confident one).
        ``PARTIAL_CARD``: a corner outside the frame or within the partial margin of its border.
        ``BLURRY``: variance of the Laplacian of the rectified card (its ``quality_width``
        thumbnail) below the threshold, or its detail much weaker in one direction than in
        another (motion blur); also added to NO_CARD when the whole photo fails either measure.
        ``GLARE``: share of saturated pixels in the card's thumbnail above the threshold (none
        where its paper itself is saturated: :func:`~processors.card.rectify.glare_fraction`).
    Scans (``geo9``): a photo the card path judges NO_CARD or PARTIAL_CARD is judged once more
    as an upload that is already the document (a flatbed scan, a phone app's crop;
    :mod:`processors.card.scan`, ``scan_*`` settings); when it is one, its quad (the frame or
    the document within a thin plain margin) is verified like a photographed card, without
    PARTIAL_CARD for the sides on the frame. A suspect card (``scan.inner_suspect``: small and
    unsure or not shaped like a document, or found with a confidence below
    ``scan.MARGINED_CARD_CONFIDENCE``) gives way to the document the scan path finds where
    ``scan.replaces`` says so (the card path took the portrait, a panel or a block of print of
    a scan, or the scan with a corner astray).
    A zone vouches for another quad (``geo19``, ``_Card.rival``, ``_Card.unzoned``): a suspect
    card the scan path's page did not replace, and a card with a runner-up
    (``Detection.runner_up``), give way to it where the card's verification reads no valid
    machine-readable zone (for a runner-up: found, not read) and the other quad's reads one with
    every check digit; a card without the scan path's page whose zone is found and reads no
    valid zone asks the scan path then (``geo20``, :meth:`_late_pages`; a page of busy print
    too since ``geo22``, which is also a suspect card's rival; since ``geo23`` also a card
    covering under ``scan.PORTRAIT_SHARE`` of its frame with no zone found, and a page of the
    scan path takes the place of a card with no zone found where the page's zone reads, valid
    or not: a zone read vouches for the page against a quad showing none); a card path's quad under
    ``min_card_px`` gives way to the scan path's page where the page reads a valid zone, and
    stays CARD_TOO_SMALL otherwise.
    Open booklets (``geo29``): the spread of an open passport booklet has ID-3's shape, so a
    card without a readable zone (typed ``passport``, or by ``auto``) has its two halves as
    rivals (:meth:`_booklet_pages`, read where the locator finds a zone on them), and a frame
    of the spread's shape has its halves as rivals of whatever the card path found, or as the
    card where it found none (:meth:`_frame_pages`); a page of a spread cropped edge to edge is
    PARTIAL_CARD only where its zone does not vouch for it (:meth:`_spread_page`).
    Crops (``geo30``): the whole frame is a document only its zone can vouch for, read with
    every format as fitting its shape (:meth:`_whole_frame`): the card where the card path and
    the scan path found none (a crop that cut the page's header off, or kept a caption strip
    under it), and a rival of the card the card path found, standing where its zone reads
    valid and the card's does not.
    Verification (:mod:`processors.card.verify`, ``settings.verify``) of every card that got
    this far: capture-quality measures, the portrait and the MRZ, one batched call each for the
    batch; their codes (``LOW_RESOLUTION`` ... ``DOCUMENT_EXPIRED``) reject the result when the
    upload's profile (option ``profile``, else ``verify.profile``) says so and annotate it
    otherwise; the payload gets ``quality`` and ``mrz`` (the MRZ's values only when the upload's
    option ``mrz_values`` asks and ``verify.mrz_values_allowed`` allows). A zone found in the
    top band turned (the orientation classifier read the document upside down) turns the
    output by a half turn.
    An accepted outcome carries one artifact ``rectified.jpg``; rejected ones carry none.

    Pixels: each upload is decoded once, at ``decode_side`` (:class:`CardSettings`), by the
    pixel backend (``processors.pixels``, chosen by ``runtime.device``); the geometry runs on its
    grey working copy (long side ``work_max_side``) and grey samples along the card's edges; the
    backend warps the thumbnails (to the host) and the accepted cards (encoded to JPEG there).

    Args:
        settings: card settings.
        runtime: ONNX Runtime settings (device, buckets).
        model_file: override of the model file (tests, ``--model``); None uses the pinned,
            verified ``card_u2netp`` (fine-tuned u2netp, shipped in the package), or its int8
            build where ``runtime``'s precision asks for it
            (:func:`processors.models.pinned_model`).
        decode: decode limits (those the uploads were probed with; default
            :class:`DecodeSettings`).
        orient_file: override of the orientation model (tests, a new training run); None uses
            the pinned ``card_orient`` shipped in the package.
        mrz_file: override of the MRZ recogniser (tests, a new training run); None uses the
            pinned ``mrz_crnn``.
        clock: the current time (UTC) expiry is judged at (tests, evals); None: the system's.

    Raises:
        ModelError: a model file is missing or fails its SHA-256 pin.
        ProviderError: CUDA requested but not active.
    """

    task = "card"

    def __init__(self, settings: CardSettings, runtime: RuntimeSettings,
                 model_file: Path | None = None, decode: DecodeSettings | None = None,
                 orient_file: Path | None = None, mrz_file: Path | None = None,
                 clock: Callable[[], dt.datetime] | None = None) -> None:
        self.settings = settings
        self.threads = runtime.postprocess_threads
        self.pixels: PixelBackend = pixel_backend(runtime, decode or DecodeSettings())
        self.orienter = Orienter(runtime, orient_file) if settings.orient else None
        v = settings.verify
        self.verifier = (Verifier(v, runtime, settings.glare_level, mrz_file)
                         if v.quality or v.mrz else None)
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        path, sha = pinned_model(MODEL_FILE, model_file, runtime)
        self._model = BatchedModel.shared(path, sha, runtime, MODEL_NAME, make_batch_symbolic=True,
                                          outputs=1, input_shape=(3, INPUT_SIZE, INPUT_SIZE))
        digest = (sha or "local")[:12]
        self._info = ModelInfo(name=MODEL_NAME,
                               version=f"{MODEL_FILE}-{digest}.{POSTPROCESS_REVISION}",
                               provider=self._model.provider)

    @property
    def model(self) -> ModelInfo:
        """Model identity: name ``u2netp-card``, version ``card_u2netp-<sha12>.<revision>``."""
        return self._info

    @property
    def bucket(self) -> int:
        """Largest batch of one u2netp call (chosen at warm-up)."""
        return self._model.chosen_bucket

    @property
    def stats(self) -> BatchStats:
        """Counters of the localisation model's batched calls."""
        return self._model.stats

    @property
    def batched_model(self) -> BatchedModel:
        """The underlying :class:`BatchedModel` (stats, chosen bucket)."""
        return self._model

    def warm_up(self) -> None:
        """Run every batch bucket of both models once on zeros and choose the best buckets."""
        if self.orienter is not None:
            self.orienter.warm_up()
        if self.verifier is not None:
            self.verifier.warm_up()
        b = self._model.warm_up()
        log.info("card_warm_up", bucket=b, provider=self._model.provider,
                 bucket_ips={k: round(v, 2) for k, v in self._model.stats.bucket_ips.items()})

    def locate(self, images: Sequence[Decoded]
               ) -> tuple[list[Detection], float, list[np.ndarray]]:
        """Localise cards in a batch with one batched model call per chunk.

        Args:
            images: decoded uploads (:meth:`processors.pixels.PixelBackend.decode`).

        Returns:
            ``(detections, inference_ms, greys)``: one :class:`Detection` per image (quad in
            decoded px), the wall time (ms) of the model call(s) and the grey working copies
            (``(h, w) uint8``, long side ``work_max_side``) the quads were found on.

        Raises:
            ModelError: ONNX Runtime failed on the batch.
        """
        x = self.pixels.model_input(images, INPUT_SIZE)
        t0 = time.perf_counter()
        try:
            raw = self._model.run(x)[0][:, 0]
        except Exception as e:  # onnxruntime raises untyped errors
            raise ModelError(f"u2netp inference failed: {e}") from e
        ms = (time.perf_counter() - t0) * 1000.0
        greys = self.pixels.working_grey(images, self.settings.work_max_side)

        def one(k: int) -> Detection:
            d = images[k]
            return detect_from_mask(greys[k], raw[k], self.settings, (d.width, d.height),
                                    lambda pts: self.pixels.sample_grey(d, pts))

        return map_in_threads(one, range(len(images)), self.threads), ms, greys

    def _no_card(self, det: Detection, min_area_frac: float | None = None) -> bool:
        """The NO_CARD rules (class doc); ``min_area_frac`` overrides the setting's."""
        s = self.settings
        if det.quad is None or not geo.is_convex(det.quad):
            return True
        lo, hi = s.aspect_range
        min_area = s.min_area_frac if min_area_frac is None else min_area_frac
        return (det.confidence < s.min_confidence or det.area_frac < min_area
                or det.rectangularity < s.min_rectangularity
                or det.mask_contrast < s.min_mask_contrast
                or not (lo <= det.aspect <= hi or lo <= det.metric_aspect <= hi)
                or geo.corner_angle_deviation(det.quad) > s.max_corner_angle_dev_deg)

    def _blurry(self, image: np.ndarray) -> bool:
        """BLURRY test of ``image`` (the rectified card, or the whole photo for NO_CARD):
        Laplacian variance or direction detail ratio below its threshold (see the class doc)."""
        s = self.settings
        return (laplacian_variance(image, s.quality_width) < s.blur_min_laplacian_var
                or direction_detail_ratio(image, s.quality_width) < s.blur_min_direction_ratio)

    def _partial(self, quad: np.ndarray, shape: tuple[int, ...]) -> bool:
        """Whether a corner of ``quad`` (``(4, 2)`` px) lies within the partial margin of the
        frame of ``shape`` (``(h, w)``): the card may be cut by the frame (PARTIAL_CARD)."""
        return any(self._frame_sides(quad, shape))

    def _frame_sides(self, quad: np.ndarray, shape: tuple[int, ...]) -> tuple[bool, ...]:
        """Per side of the frame of ``shape`` (top, right, bottom, left): a corner of ``quad``
        lies within the partial margin of it (``partial_margin_px``, ``partial_margin_frac``
        of the shorter side)."""
        h, w = shape[:2]
        m = max(self.settings.partial_margin_px, self.settings.partial_margin_frac * min(h, w))
        x, y = quad[:, 0], quad[:, 1]
        return (bool(np.any(y < m)), bool(np.any(x > w - 1 - m)), bool(np.any(y > h - 1 - m)),
                bool(np.any(x < m)))

    @staticmethod
    def _unread(item: Item, det: Detection, reasons: tuple[ReasonCode, ...],
                inference_ms: float) -> Outcome:
        """A ``rejected`` outcome for a photo whose card is not rectified: payload ``quad`` (the
        detection's, or None with NO_CARD) and ``confidence``; no doc_type, size or artifact."""
        quad = None if ReasonCode.NO_CARD in reasons or det.quad is None else _quad_list(det.quad)
        return Outcome(upload_id=item.upload_id, status=Status.REJECTED, reasons=reasons,
                       payload={"quad": quad, "confidence": round(det.confidence, 4),
                                "doc_type": None, "width": None, "height": None},
                       inference_ms=inference_ms)

    def _judge(self, item: Item, image: Decoded, det: Detection, grey: np.ndarray,
               inference_ms: float) -> Outcome | _Card:
        """The verdicts decided before the card is warped (NO_CARD, CARD_TOO_SMALL,
        MULTIPLE_CARDS: an outcome), else the card's plan (PARTIAL_CARD noted). A photo the
        card path judges NO_CARD or PARTIAL_CARD is judged once more as a scan or a
        pre-cropped document (:meth:`_as_scan`)."""
        s = self.settings
        det = _to_upload_px(det, image.scale)
        quad = det.quad
        if quad is None or self._no_card(det):
            whole = self._as_scan(item, image, grey, outlined=True, inference_ms=inference_ms)
            if whole is not None and whole.unzoned is None:
                return whole
            if whole is not None and whole.unzoned is not None:
                unread = whole.unzoned
            elif quad is not None and not self._no_card(det, s.min_area_frac / 10.0):
                unread = self._unread(item, det, (ReasonCode.CARD_TOO_SMALL,), inference_ms)
            elif det.pair is not None:  # two cards side by side, their saliency merged
                unread = self._unread(item, replace(det, quad=det.pair[0]),
                                      (ReasonCode.MULTIPLE_CARDS,), inference_ms)
            else:
                blurred = self._blurry(grey)
                unread = self._unread(item, det, (ReasonCode.NO_CARD,)
                                      + ((ReasonCode.BLURRY,) if blurred else ()), inference_ms)
            return _with_pages(whole, self._frame_pages(item, image, unread)) or unread
        if _long_side(quad) < s.min_card_px:
            small = self._unread(item, det, (ReasonCode.CARD_TOO_SMALL,), inference_ms)
            if det.second_quad is not None:
                return small
            # a scan whose card path took a small part of it (the portrait, a panel): the
            # document stands in only where its zone reads valid, else CARD_TOO_SMALL stays
            page = self._as_scan(item, image, grey)
            page = None if page is None else replace(page, unzoned=small)
            return _with_pages(page, self._frame_pages(item, image, small)) or small
        doc: _Card | None = None
        suspect = det.second_quad is None and scan.inner_suspect(det)
        if suspect:
            # a scan whose card path may have taken a part of the document (its portrait, a
            # panel, a block of print) or the document with a corner astray (scan.replaces);
            # two cards in view stay MULTIPLE_CARDS, a card too small stays CARD_TOO_SMALL
            # (a lone portrait print on a lid is no page with a portrait on it)
            # (a page of busy print, which only its zone vouches for, is a rival only)
            doc = self._as_scan(item, image, grey, busy=True)
            # working px per upload px: the decoded image's scale times the working copy's
            work = image.scale * max(grey.shape[:2]) / max(image.width, image.height)
            if doc is not None and doc.unzoned is None and scan.replaces(
                    doc.det, det, lambda: scan.quad_glyphs(grey, (quad + 0.5) * work - 0.5)):
                return doc
        if det.second_quad is not None:
            return self._unread(item, det, (ReasonCode.MULTIPLE_CARDS,), inference_ms)
        shape = _upload_shape(item, image)
        if self._partial(quad, shape):
            if not suspect:
                doc = self._as_scan(item, image, grey)
            if doc is not None and doc.unzoned is None:
                return doc
            rival = doc or self._runner_up(item, det, shape, partial=True)
            pages = self._frame_pages(item, image)
            if self._spread_page(quad, shape):
                # one page of a booklet's spread cropped edge to edge: the frame is its edge
                return replace(self._plan(item, det, quad, shape, []), cut_unless_zone=True,
                               rival=rival, pages=pages)
            return replace(self._plan(item, det, quad, shape, [ReasonCode.PARTIAL_CARD]),
                           rival=rival, pages=pages)
        # a suspect card the scan path's document did not replace, or the detector's runner-up:
        # the zone decides (_rivals)
        return replace(self._plan(item, det, quad, shape, []),
                       rival=doc or self._runner_up(item, det, shape, partial=False),
                       pages=self._frame_pages(item, image))

    def _runner_up(self, item: Item, det: Detection, shape: tuple[int, int],
                   partial: bool) -> _Card | None:
        """The plan of the detector's runner-up (``det.runner_up``, upload px; ``shape`` the
        upload's ``(height, width)``) as the card, PARTIAL_CARD where it reaches the frame;
        None without one, where it is not convex or is under ``min_card_px``, or where it
        reaches the frame and the winner (``partial``: PARTIAL_CARD) does not: a zone read
        valid does not turn an accepted card into a rejected one (a scan whose runner-up ran
        onto the frame, synthetic scan seed 96 TD3)."""
        r = det.runner_up
        if r is None or not geo.is_convex(r) or _long_side(r) < self.settings.min_card_px:
            return None
        cut = self._partial(r, shape)
        if cut and not partial:
            return None
        return self._plan(item, _det_at(det, r, shape), r, shape,
                          [ReasonCode.PARTIAL_CARD] if cut else [])

    def _plan(self, item: Item, det: Detection, quad: np.ndarray, shape: tuple[int, int],
              reasons: list[ReasonCode]) -> _Card:
        """The plan of a card found at ``det`` (upload px; ``quad`` is ``det.quad``, ``(4, 2)
        float64``; ``shape`` the upload's ``(height, width)`` px): its document type (the
        upload's option, else ``doc_type``; ``auto`` by the quad's metric aspect ratio, or by
        print or the MRZ's format when that is in doubt), output size and reading."""
        s = self.settings
        requested = str(item.options.get("doc_type") or s.doc_type)
        aspect = geo.metric_aspect(quad, (shape[1], shape[0]))
        doc_type = choose_doc_type(requested, aspect.value, s.auto_aspect_split)
        # in doubt also where the sides' plain ratio and the perspective-corrected one lie on
        # either side of the split: on a small card a px of corner error reads as perspective
        # (the demo's upside-down ID card, 300 px wide: plain 1.52, metric 1.45 -> passport)
        split = s.auto_aspect_split
        auto = requested not in ("id_card", "passport")
        doubt = (aspect.straddles(split)
                 or (geo.approx_aspect(quad) >= split) != (aspect.value >= split))
        by_print = auto and doubt
        # a type named by the upload that the shape, without doubt, says is the other one; on a
        # small card a few px of corner error move the ratio too (a real ID card of 640 x 480
        # webcam photos, scaled 0.5-1.0: its quads measured 1.25-1.41 for ID-1's 1.586)
        sides = geo.side_lengths(quad)
        short = min(sides[0] + sides[2], sides[1] + sides[3]) / 2.0
        gap = min(abs(aspect.low - split), abs(aspect.high - split)) / split
        # (a card on the frame may be cut by it, and then has no document's shape: PassportEye's
        # 0_pass-lva, a passport page cut by the frame and named passport, measured ID-1's, as
        # did pages cut 15-25 % and taken for scans, without PARTIAL_CARD; a zone still speaks)
        mismatch = (not auto and not doubt and short >= MISMATCH_MIN_SHORT_PX
                    and gap >= 2 * MISMATCH_CORNER_PX / short
                    and not self._partial(quad, shape)
                    and choose_doc_type("auto", aspect.value, split) != doc_type)
        return _Card(det, quad, doc_type, canonical_size(doc_type, s.dpi), reading(quad), reasons,
                     by_print, auto, mismatch=mismatch)

    def _as_scan(self, item: Item, image: Decoded, grey: np.ndarray, outlined: bool = False,
                 inference_ms: float = 0.0, busy: bool = False) -> _Card | None:
        """The plan of the upload's whole frame (or its near-border quad; with ``outlined``, a
        document's outline inside it, or, also with ``busy``, the frame as a page of busy print)
        as the document, when :func:`processors.card.scan.judge` takes it for one (``scan`` on)
        and its long side reaches ``min_card_px``; else None. Its sides on the frame are not
        PARTIAL_CARD: the frame is the document's edge there. A document found by its outline
        alone, or a page of busy print (``ScanVerdict.needs_zone``), is NO_CARD (with
        ``inference_ms``) unless a zone read on it vouches for it (:func:`_zone_vouches`,
        :attr:`_Card.unzoned`)."""
        s = self.settings
        if not s.scan:
            return None
        verdict = scan.judge(grey, s, outlined, busy)
        if not verdict.document:
            return None
        det = scan.detection(verdict, grey.shape, (image.width, image.height),
                             lambda pts: self.pixels.sample_grey(image, pts))
        det = _to_upload_px(det, image.scale)
        if det.quad is None or _long_side(det.quad) < s.min_card_px:
            return None
        card = self._plan(item, det, det.quad, _upload_shape(item, image), [])
        unzoned = (self._unread(item, det, (ReasonCode.NO_CARD,), inference_ms)
                   if verdict.needs_zone else None)
        return replace(card, scanned=True, unzoned=unzoned)

    def _finish(self, item: Item, card: _Card, thumb: np.ndarray, turned: bool,
                inference_ms: float, ver: Verification | None = None,
                edgeless: Callable[[], bool] | None = None) -> tuple[Outcome, bool]:
        """The verdicts on the card's thumbnail (and its verification) and the payload:
        ``(outcome, to_encode)``; the artifact of an accepted card is added once the batch's
        cards are warped. ``edgeless``: whether the card's quad shows no document's edge
        (:func:`_edgeless`), asked only of a card the card path found that is no data page
        by its print (:func:`_no_data_page`)."""
        s = self.settings
        if card.stacked:
            return self._unread(item, card.det, (ReasonCode.MULTIPLE_CARDS,), inference_ms), False
        if card.unzoned is not None and not _zone_vouches(ver):
            # an outline or a busy page with print and no zone whose check digits pass (a form,
            # a certificate, a letter in a box, random lines of OCR-B, a scene), or a scan in
            # place of a card too small without one
            return card.unzoned, False
        reasons = list(card.reasons)
        if card.cut_unless_zone and not _zone_vouches(ver):
            reasons.insert(0, ReasonCode.PARTIAL_CARD)
        if self._blurry(thumb):
            reasons.append(ReasonCode.BLURRY)
        # the verification measured the same thumbnail's glare (turned or not) at the same level
        glare = (ver.quality.glare if ver is not None and ver.quality is not None
                 else glare_fraction(thumb, s.glare_level, s.quality_width))
        if glare > s.glare_max_fraction:
            reasons.append(ReasonCode.GLARE)
        if (not reasons and _no_data_page(card.doc_type, ver, thumb)
                and (card.scanned or (edgeless is not None and edgeless()))):
            # a sharp white page without glare, of an ID-3 data page's shape, with neither
            # portrait nor zone: a letter, a certificate, a form (A4's 1.414, ID-3's 1.42); or
            # the same found by the card path with no edge around it: a block of print on
            # a page (a cut card or a page has its edge)
            return self._unread(item, card.det, (ReasonCode.NO_CARD,), inference_ms), False
        rejected = bool(reasons)
        named = str(item.options.get("doc_type") or s.doc_type)
        if (card.mismatch and not _zone_fits(ver, card.doc_type)) or (not card.auto and (
                _zone_of_other_type(ver, card.doc_type) or card.doc_type != named)):
            # (a whole frame's type is its zone's format's, named or not: _whole_frame)
            # annotates; a profile may reject it (strict does)
            reasons.append(ReasonCode.DOC_TYPE_MISMATCH)
        w, h = card.size
        # the card's own corners: quad[0] is the corner that became the upright output's top-left
        payload = {"quad": _quad_list(np.roll(card.quad, -card.turns(turned), axis=0)),
                   "confidence": round(card.det.confidence, 4), "doc_type": card.doc_type,
                   "width": w, "height": h}
        if ver is not None:
            if ver.error is not None:  # this card's verification failed: it fails alone
                raise ver.error
            name, profile = s.verify.profile_for(item.options.get("profile"))
            found = ver.reasons(profile)
            reasons += [r for r in found if r not in reasons]
            rejected = rejected or any(r in profile.reject for r in reasons)
            asked = bool(item.options.get("mrz_values"))
            allowed = s.verify.mrz_values_allowed
            payload.update(ver.payload(name, profile, asked and allowed, asked and not allowed))
        status = Status.REJECTED if rejected else Status.ACCEPTED
        return Outcome(upload_id=item.upload_id, status=status, reasons=tuple(reasons),
                       payload=payload, inference_ms=inference_ms), not rejected

    def process_batch(self, items: Sequence[Item]) -> list[Outcome]:
        """Process ``items`` (N >= 1) with one batched localisation call; N outcomes in order.

        Bad content gives ``rejected`` outcomes (pixel data that fails to decode: the decoder's
        reason, e.g. ``CORRUPT_IMAGE``); an unexpected error while post-processing one item
        gives that item ``failed`` / ``INTERNAL_ERROR`` and leaves the others unaffected
        (:func:`processors.base.outcomes_per_item`, the rule every processor follows).

        Raises:
            ModelError: a batched model call failed (the whole batch is affected).
        """
        if not items:
            return []
        s, px = self.settings, self.pixels
        decoded = px.decode([it.image for it in items], s.decode_side)
        outcomes: list[Outcome | None] = [
            Outcome.undecodable(it.upload_id, d)
            if isinstance(d, DecodeError) else None for it, d in zip(items, decoded, strict=True)]
        ok = [k for k, o in enumerate(outcomes) if o is None]
        if not ok:
            return [o for o in outcomes if o is not None]
        images = [d for d in decoded if not isinstance(d, DecodeError)]  # at ok's indices
        dets, ms, greys = self.locate(images)
        judged = outcomes_per_item(
            lambda j: self._judge(items[ok[j]], images[j], dets[j], greys[j], ms),
            [items[k] for k in ok], self.threads, task=self.task, inference_ms=ms)
        cards = [(ok[j], images[j], c) for j, c in enumerate(judged) if isinstance(c, _Card)]
        for j, c in enumerate(judged):
            if isinstance(c, Outcome):
                outcomes[ok[j]] = c
        if cards:
            self._rectify(items, cards, outcomes, ms, {k: greys[j] for j, k in enumerate(ok)})
        return [o for o in outcomes if o is not None]

    def _rectify(self, items: Sequence[Item], cards: list[tuple[int, Decoded, _Card]],
                 outcomes: list[Outcome | None], ms: float, greys: dict[int, np.ndarray]) -> None:
        """Thumbnails -> upright decision (one batched call) -> verification -> rivals ->
        verdicts -> full-size warp and JPEG of the accepted cards; fills ``outcomes`` at the
        cards' indices (``greys``: each item's working grey copy, by its index in ``items``)."""
        s, px = self.settings, self.pixels
        thumbs, turned, vers = self._inspect(items, cards)
        self._rivals(items, cards, thumbs, turned, vers, greys)
        done = outcomes_per_item(
            lambda j: self._finish(items[cards[j][0]], cards[j][2], thumbs[j], bool(turned[j]), ms,
                                   vers[j], lambda: _edgeless(cards[j][2].quad, cards[j][1],
                                                              greys[cards[j][0]])),
            [items[k] for k, _, _ in cards], self.threads, task=self.task, inference_ms=ms)
        keep: list[int] = []
        verdicts: dict[int, Outcome] = {}  # the kept cards' outcomes, by index in cards
        for j, r in enumerate(done):
            k = cards[j][0]
            if isinstance(r, Outcome):  # failed: outcomes_per_item's rule
                outcomes[k] = r
                continue
            outcomes[k] = verdicts[j] = r[0]
            if r[1]:
                keep.append(j)
        if not keep:
            return
        full = px.warp([cards[j][1] for j in keep],
                       np.stack([cards[j][2].homography(cards[j][1], cards[j][2].size,
                                                        bool(turned[j])) for j in keep]),
                       [cards[j][2].size for j in keep])
        for j, data in zip(keep, px.encode_jpeg(full, s.jpeg_quality), strict=True):
            k, c = cards[j][0], cards[j][2]
            art = Artifact(name="rectified", ext="jpg", content_type="image/jpeg", data=data,
                           width=c.size[0], height=c.size[1])
            outcomes[k] = replace(verdicts[j], artifacts=(art,))

    def _inspect(self, items: Sequence[Item], cards: list[tuple[int, Decoded, _Card]]
                 ) -> tuple[list[np.ndarray], np.ndarray, list[Verification | None]]:
        """The cards' thumbnails (BGR ``uint8`` at ``quality_width``, as warped before the
        upright decision), upright decisions (``(n,) bool``: turned by a half turn) and
        verifications (None without a verifier): one orientation call and one verification
        (one call per model) for all of ``cards``, whose document types the print or the zone's
        format decided are replaced in place."""
        s, px = self.settings, self.pixels
        tsizes = [(s.quality_width, max(1, round(s.quality_width * c.size[1] / c.size[0])))
                  for _, _, c in cards]
        thumbs = px.to_host(px.warp([d for _, d, _ in cards],
                                    np.stack([c.homography(d, ts) for (_, d, c), ts
                                              in zip(cards, tsizes, strict=True)]), tsizes))
        if self.orienter is not None:
            p_turned, p_passport = self.orienter.classify(thumbs)
            turned = p_turned >= s.orient_turn_min
            for j, (k, d, c) in enumerate(cards):
                if c.by_print and max(p_passport[j], 1.0 - p_passport[j]) >= s.doc_print_min:
                    doc = "passport" if p_passport[j] >= 0.5 else "id_card"
                    cards[j] = (k, d, replace(c, doc_type=doc, size=canonical_size(doc, s.dpi)))
        else:
            turned = np.zeros(len(cards), bool)
        vers: list[Verification | None] = [None] * len(cards)
        if self.verifier is not None:
            vers = list(self._verify(items, cards, thumbs, turned))
            for j, v in enumerate(vers):
                if v is not None and v.portrait_turned and self.orienter is not None:
                    turned[j] = not turned[j]  # the face reads upside down: so does the card
                if v is None or v.mrz is None:
                    continue
                if v.mrz.turned:
                    turned[j] = not turned[j]  # the zone reads upside down: so does the card
                k, d, c = cards[j]
                if v.mrz.doc_type is not None and v.mrz.doc_type != c.doc_type:
                    doc = v.mrz.doc_type  # the zone's format decided a type in doubt
                    cards[j] = (k, d, replace(c, doc_type=doc, size=canonical_size(doc, s.dpi)))
        return list(thumbs), turned, vers

    def _rivals(self, items: Sequence[Item], cards: list[tuple[int, Decoded, _Card]],
                thumbs: list[np.ndarray], turned: np.ndarray,
                vers: list[Verification | None], greys: dict[int, np.ndarray]) -> None:
        """Put each card's rival (:attr:`_Card.rival`) in its place, with the rival's thumbnail,
        upright decision and verification, where the card's verification reads no valid zone
        and the rival's reads one (a detector's runner-up only where the card's zone was found),
        or, for the scan path's page (not one only a valid zone vouches for,
        :attr:`_Card.unzoned`), where the card's zone was not found and the page's reads with
        every character sure, its check digits valid or not (:func:`_zone_readable`: the
        outcome of a document printed with a wrong check digit is MRZ_CHECK_DIGIT on its page,
        not a rejection of the part the card path took). A card with no rival from the scan
        path whose zone was found, or that covers under ``scan.PORTRAIT_SHARE`` of its frame
        (the portrait or a block of a scan, taken at 0.92 on scan seed 20261210 #116), asks the
        scan path now (:meth:`_late_pages`, ``greys`` by item index), its runner-up tried
        first. The rivals
        asked are inspected together (:meth:`_inspect`: a second orientation and verification
        call for the batch, made only where a card read no valid zone and has a rival)."""
        if self.verifier is None:
            return
        views = [(t, canonical_size(t, self.settings.dpi)) for t in ("id_card", "passport")]
        late = [j for j, (_, _, c) in enumerate(cards)
                if not c.scanned and (c.rival is None or not c.rival.scanned)
                and not _zone_valid(vers[j])
                and (_zone_found(vers[j]) or c.det.area_frac < scan.PORTRAIT_SHARE)]
        pages = dict(zip(late, map_in_threads(
            lambda j: self._late_pages(items[cards[j][0]], cards[j][1], greys[cards[j][0]],
                                      cards[j][2]), late, self.threads), strict=True))
        want: list[tuple[int, tuple[int, Decoded, _Card]]] = []  # a card's runner-up first
        spread: dict[int, tuple[_Card, ...]] = {}  # the halves of a quad taken for a spread
        zoned: set[int] = set()  # ids of the halves whose zone the locator found
        asks: list[tuple[int, tuple[_Card, ...], bool]] = []  # is the spread two cards?
        for j, (k, d, c) in enumerate(cards):
            if _zone_valid(vers[j]):
                continue
            spread[j] = (self._booklet_pages(items[k], d, c)
                         if _spread_suspect(c, vers[j]) else ())
            halves = c.pages + spread[j]
            if halves:  # only a page whose zone the locator finds, on either type's view, is read
                found = Verifier.zones_located(
                    [(d, h.homography(d, size), t, size) for h in halves for t, size in views],
                    self.pixels)
                halves = tuple(h for h, f, g in zip(halves, found[::2], found[1::2], strict=True)
                               if f or g)
                zoned.update(id(h) for h in halves)
            if (len(spread[j]) == 2 and not _zone_found(vers[j]) and _typed_as_spread(c)
                    and not any(id(h) in zoned for h in spread[j])):
                asks.append((j, spread[j], False))  # no zone anywhere: two fronts?
            for rival in (c.rival, *pages.get(j, ()), *halves):
                if rival is not None and (rival.scanned or rival.booklet
                                          or _zone_found(vers[j])):
                    want.append((j, (k, d, rival)))
        swapped: set[int] = set()
        if want:
            self._swap(items, cards, thumbs, turned, vers, want, spread, swapped, asks)
        for j in self._two_cards(cards, [a for a in asks if a[2] or a[0] not in swapped], zoned):
            k, d, card = cards[j]  # two cards, not a booklet's pages
            cards[j] = (k, d, replace(card, stacked=True))

    def _swap(self, items: Sequence[Item], cards: list[tuple[int, Decoded, _Card]],
              thumbs: list[np.ndarray], turned: np.ndarray, vers: list[Verification | None],
              want: list[tuple[int, tuple[int, Decoded, _Card]]],
              spread: dict[int, tuple[_Card, ...]], swapped: set[int],
              asks: list[tuple[int, tuple[_Card, ...], bool]]) -> None:
        """:meth:`_rivals`' second inspection: the rivals ``want`` asks for (``(j, rival)``, a
        card's runner-up first) inspected together, and each card ``j`` replaced by the first
        of its rivals that wins (``swapped`` gets ``j``); a spread's page (of ``spread[j]``)
        whose zone reads valid as TD1 adds ``(j, (the other half,), True)`` to ``asks``
        (:meth:`_two_cards`)."""
        sub = [r for _, r in want]
        r_thumbs, r_turned, r_vers = self._inspect(items, sub)  # may decide sub's types
        for i, (j, (_, _, rival)) in enumerate(want):
            if j not in swapped and (_zone_valid(r_vers[i]) or (
                    (rival.scanned or rival.booklet) and rival.unzoned is None
                    and cards[j][2].unzoned is None and not _zone_found(vers[j])
                    and _zone_readable(r_vers[i]))):
                cards[j], thumbs[j], vers[j] = sub[i], r_thumbs[i], r_vers[i]
                turned[j] = r_turned[i]
                swapped.add(j)
                if (any(rival is h for h in spread.get(j, ()))
                        and _zone_of_format(r_vers[i], Format.TD1)):
                    asks.append((j, tuple(h for h in spread[j] if h is not rival), True))

    def _two_cards(self, cards: list[tuple[int, Decoded, _Card]],
                   asks: Sequence[tuple[int, tuple[_Card, ...], bool]], zoned: set[int]
                   ) -> list[int]:
        """The indices ``j`` of ``asks`` (``(j, halves, assumed)``: the card ``cards[j]`` and
        halves of the spread its quad was taken for) where every one of ``halves`` shows a card
        of its own: its zone found (``zoned``, the ids of the halves the locator found a zone
        in), or a face, an ID-1 card front's portrait (ICAO Doc 9303 part 5), in the left or
        the right half of its ID-1 view, upright or turned (an issuer may put the portrait on
        the right, the pair may lie either way, and a half cut at the spread's middle may sit
        a few mm off its card), in one detector call for the batch.

        Two kinds of ask (:meth:`_rivals`):
        - a spread's page whose zone read valid as TD1, an ID-1 card's, where a booklet's data
          page carries TD3 (part 4); ``halves`` is the other half. A badge holder's slip, or a
          closed passport's cover under the card, shows no card (a fresh user's trial, session
          67): one card. ``assumed``: without a face detector, two cards (``geo35``).
        - a spread with no zone on the card nor on either half; ``halves`` is both: two card
          fronts, one above the other, each with its face. Not ``assumed``."""
        ask = [(j, h) for j, hs, _ in asks for h in hs if id(h) not in zoned]
        faces: dict[int, bool] | None = None  # id of a half -> a face found in it
        if not ask:
            faces = {}
        elif self.verifier is not None:
            s, px = self.settings, self.pixels
            size = canonical_size("id_card", s.dpi)
            tsize = (s.quality_width, max(1, round(s.quality_width * size[1] / size[0])))
            imgs = [cards[j][1] for j, _ in ask]
            thumbs = px.to_host(px.warp(
                imgs, np.stack([h.homography(d, tsize) for d, (_, h) in zip(imgs, ask,
                                                                              strict=True)]),
                [tsize] * len(ask)))
            half = tsize[0] // 2  # the card's left and right halves, upright and turned
            found = self.verifier.faces_in([z for t in thumbs for v in (t, t[::-1, ::-1])
                                            for z in (v[:, :half], v[:, half:])])
            if found is not None:
                faces = {id(h): any(found[4 * n:4 * n + 4]) for n, (_, h) in enumerate(ask)}
        return [j for j, hs, assumed in asks
                if hs and all(id(h) in zoned or (assumed if faces is None else faces[id(h)])
                              for h in hs)]

    @staticmethod
    def _spread_page(quad: np.ndarray, shape: tuple[int, int]) -> bool:
        """Whether ``quad`` (upload px) is one page of an open booklet whose spread is the
        upload's frame (``shape`` ``(h, w)``, :data:`BOOKLET_ASPECT` within
        :data:`BOOKLET_ASPECT_TOL`): it covers one half of the frame across its long side (IoU
        at least :data:`SPREAD_PAGE_IOU`; the cover showing around the pages keeps it a few px
        inside). A scanner app's crop of the spread puts the page's three outer sides on the
        frame, which the card path takes for a cut (PARTIAL_CARD), and the scan path takes no
        such frame for a document (its print is small for a page of the frame's size); the page
        is PARTIAL_CARD only where its zone does not vouch for it
        (:attr:`_Card.cut_unless_zone`)."""
        return _spread_shaped(shape) and any(quad_iou(quad, half) >= SPREAD_PAGE_IOU
                                             for half in _halves(_frame_quad(shape)))

    def _frame_pages(self, item: Item, image: Decoded, unread: Outcome | None = None
                     ) -> tuple[_Card, ...]:
        """The documents the upload's whole frame may be where only a zone can tell: a crop of
        the document that cut it or kept something with it, and an open booklet's pages.

        1. The whole frame (:meth:`_whole_frame`): the card path's quad may be a part of a
           crop (its portrait, a panel, the page less its zone), or the card path may have
           found nothing in it.
        2. The two pages of an open passport booklet whose spread is the frame (scanned or
           cropped edge to edge: the scan path takes no such frame for a document, its print
           small for a page of its size, and the card path may take a part of it: the
           portrait, the data page less its zone, the spread's outline a few px off), where the
           frame has the spread's shape (:data:`BOOKLET_ASPECT` within
           :data:`BOOKLET_ASPECT_TOL`, either way up): each half of the frame across its long
           side, planned as a passport page (:attr:`_Card.booklet`; named ``id_card``, a page
           whose zone reads is DOC_TYPE_MISMATCH).

        They are rivals of the card the upload has (:attr:`_Card.pages`, read where the
        locator finds a zone on them), or, with ``unread`` (the card path found no card, or one
        under ``min_card_px``: NO_CARD or CARD_TOO_SMALL), the first of them is the card and
        the rest its rivals, each standing then only where its zone vouches for it, the upload
        getting ``unread`` otherwise (:attr:`_Card.unzoned`); the whole frame stands as a rival
        only where its zone reads valid. Empty where the frame's long side is under
        ``min_card_px``; no halves where one would be."""
        whole = self._whole_frame(item, image, unread)
        if whole is None:
            return ()
        shape = _upload_shape(item, image)
        if not _spread_shaped(shape):
            return (whole,)
        pages = [whole]
        for half in _halves(_frame_quad(shape)):
            if _long_side(half) < self.settings.min_card_px:
                return (whole,)
            det = _det_at(Detection(quad=None, confidence=1.0), half, shape)
            card = self._plan(item, det, half, shape, [])
            pages.append(replace(card, doc_type="passport", by_print=False,
                                 size=canonical_size("passport", self.settings.dpi),
                                 unzoned=unread, booklet=True))
        return tuple(pages)

    def _whole_frame(self, item: Item, image: Decoded, unread: Outcome | None = None
                     ) -> _Card | None:
        """The upload's whole frame planned as the document (its type named, else by the
        frame's shape, the other type's view the zone's fallback either way, and a readable
        zone's format setting the type, DOC_TYPE_MISMATCH where the upload named the other:
        :attr:`_Card.framed`; ``scanned``: its sides are the frame's, not a cut), standing
        only where its zone vouches for it (:attr:`_Card.unzoned`: ``unread``, or NO_CARD). A
        phone's crop of a data page that cut its header off (a 16:9 crop of a real Australian
        specimen) or kept a caption strip under it (a stock photo's banner) has no document's
        shape, so the scan path refuses it, and the card path finds no page edge in it; its
        zone finds it. None where the frame's long side is under ``min_card_px``."""
        shape = _upload_shape(item, image)
        quad = _frame_quad(shape)
        if _long_side(quad) < self.settings.min_card_px:
            return None
        det = _det_at(Detection(quad=None, confidence=1.0), quad, shape)
        if unread is None:
            unread = self._unread(item, det, (ReasonCode.NO_CARD,), 0.0)
        return replace(self._plan(item, det, quad, shape, []), scanned=True, unzoned=unread,
                       framed=True, by_print=False, mismatch=False)

    def _booklet_pages(self, item: Item, image: Decoded, card: _Card) -> tuple[_Card, ...]:
        """The two pages of an open passport booklet whose whole spread ``card``'s quad took:
        the quad cut across its long sides at their midpoints, perspective kept (the middle of
        the spread as the card's homography maps it), each half planned as a card of its own.
        ICAO Doc 9303 part 4's ID-3 page is 125 x 88 mm, so the open booklet is 125 x 176 mm,
        1.41: ID-3's own shape within 1 %, and the card path takes the spread for a page
        turned on its side, whose zone (printed along the spread's short side) no band holds
        (a real UK specimen booklet, scanned open, and the same photographed on a table).
        Asked by :meth:`_rivals` for a card that may be a spread (:func:`_spread_suspect`); a
        page stands in where its zone reads (:attr:`_Card.booklet`). A page not convex or under
        ``min_card_px`` is left out."""
        q = np.asarray(card.quad, np.float64)
        shape = _upload_shape(item, image)
        cropped = all(self._frame_sides(q, shape))
        out = []
        for half in _halves(q):
            if not geo.is_convex(half) or _long_side(half) < self.settings.min_card_px:
                continue
            det = _det_at(card.det, half, shape)
            # a page lies inside the spread: cut by the frame only where the spread is, and
            # a spread on all four sides of the frame is a crop of it (a scanner app's), whose
            # edges are the frame's, as a scan's are (_as_scan)
            cut = ([ReasonCode.PARTIAL_CARD]
                   if ReasonCode.PARTIAL_CARD in card.reasons and not cropped
                   and self._partial(half, shape) else [])
            out.append(replace(self._plan(item, det, half, shape, cut), booklet=True))
        return tuple(out)

    def _late_pages(self, item: Item, image: Decoded, grey: np.ndarray, card: _Card
                    ) -> tuple[_Card, ...]:
        """The scan path's pages as rivals (the late pages) of a card that had none from the
        scan path (a runner-up at most, tried first) and whose zone was found but reads no
        valid zone, or was not found on a card covering under ``scan.PORTRAIT_SHARE`` of its
        frame (``geo23``): the frame's document (:meth:`_as_scan`, a page of busy print
        included) and the document inside the card's quad (:meth:`_inner_page`, ``geo24``).

        A card path's quad that left out a strip of the page (a scan's dark end stripe and
        header band, synthetic scan seed 20261210 #30: the TD3 lines lost their first 5
        characters and read as an MRV-B; a fresh user's scan, seed 9394 #33, whose runner-up
        did not read either) gives way to the first; one that took a scan's dark lid or a
        holder for the card, to the second. Asked only then, so a card whose zone reads, or
        one carrying none that covers ``scan.PORTRAIT_SHARE`` or more of its frame, never pays
        the scan path's 40-50 ms of CPU at 1 MP. A page that is this card's quad, its
        runner-up or the other page again (IoU at least ``RUNNER_UP_IOU[1]``: they read alike)
        is left out; none where the scan path fails (logged with the upload's id: the card
        keeps its own outcome, since the pages are only a second chance for its zone)."""
        try:
            found = (self._as_scan(item, image, grey, busy=True),
                     self._inner_page(item, image, grey, card))
        except Exception as e:  # noqa: BLE001 - the card keeps its own outcome
            log.warning("card_late_page_failed", upload_id=item.upload_id,
                        error=type(e).__name__)
            return ()
        pages: list[_Card] = []
        for page in found:
            if page is not None and not any(quad_iou(page.quad, q.quad) >= RUNNER_UP_IOU[1]
                                            for q in (card, card.rival, *pages) if q is not None):
                pages.append(page)
        return tuple(pages)

    def _inner_page(self, item: Item, image: Decoded, grey: np.ndarray, card: _Card
                    ) -> _Card | None:
        """The scan path's document inside the card path's quad (``geo24``): the working copy
        inside ``card.quad`` warped upright at its own size, less :data:`INNER_INSET_PX` on each
        side (the quad's own blurred edge), judged by :func:`processors.card.scan.inner_document`
        (covering at least :data:`INNER_MIN_AREA` of it, with at least
        :data:`INNER_MIN_EDGES` of its sides margined); its
        quad mapped back and fitted at full resolution (:func:`processors.card.scan.detection`,
        its sides on the warp's frame lying on the card's). A card path that took the
        margins of a scan for the card (a fresh user's trial: a card scanned on a dark lid,
        shown small on a white canvas, taken as a passport by the dark rectangle's shape, its
        zone read as TD2 and unreadable), or a card in a holder, has the document inside. Asked
        by :meth:`_late_pages` (66 of the 600 evaluation photos, 8 ms of CPU each: 0.9 ms a
        photo on average). None where nothing is found, or where it is under
        ``min_card_px``.

        Returns:
            The document as a page of the scan path (``scanned``, so its zone vouches for it
            as a page's does, :meth:`_rivals`), or None.
        """
        s = self.settings
        h, w = grey.shape[:2]
        work = max(h, w) / max(image.width, image.height)  # working px per decoded px
        q = (card.quad + 0.5) * (image.scale * work) - 0.5  # upload px -> working px
        sides = geo.side_lengths(q)  # top, right, bottom, left
        tw, th = int(round((sides[0] + sides[2]) / 2)), int(round((sides[1] + sides[3]) / 2))
        if min(tw, th) - 2 * INNER_INSET_PX < INNER_MIN_PX:
            return None
        to_work = homography(q, (tw, th))  # the warp's px -> working px
        flat = cv2.warpPerspective(grey, to_work, (tw, th),
                                   flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                                   borderMode=cv2.BORDER_REPLICATE)
        k = INNER_INSET_PX
        verdict = scan.inner_document(
            np.ascontiguousarray(flat[k:th - k, k:tw - k]),
            s.model_copy(update={"scan_min_area_frac": INNER_MIN_AREA}), INNER_MIN_EDGES)
        if not verdict.document:
            return None
        shift = np.array([[1, 0, k], [0, 1, k], [0, 0, 1]], np.float64)
        back = to_work @ shift  # the judged image's px -> working px
        det = scan.detection(verdict, grey.shape, (image.width, image.height),
                             lambda pts: self.pixels.sample_grey(image, pts),
                             inside=(back, (th - 2 * k, tw - 2 * k)))
        det = _to_upload_px(det, image.scale)
        if det.quad is None or _long_side(det.quad) < s.min_card_px:
            return None
        return replace(self._plan(item, det, det.quad, _upload_shape(item, image), []),
                       scanned=True)

    def _verify(self, items: Sequence[Item], cards: list[tuple[int, Decoded, _Card]],
                thumbs: list[np.ndarray], turned: np.ndarray) -> list[Verification]:
        """The verification of the batch's cards (:class:`Verifier`: one call per model)."""
        assert self.verifier is not None
        views = []
        for j, (k, d, c) in enumerate(cards):
            h, w = _upload_shape(items[k], d)
            # the thumbnail was warped before the upright decision: turn it as the card turns
            thumb = np.ascontiguousarray(thumbs[j][::-1, ::-1]) if turned[j] else thumbs[j]
            # the zone's format may decide the type: a fallback view unless in doubt, named or
            # not (a card named the other type is DOC_TYPE_MISMATCH where its zone reads on
            # this view: _finish)
            other = "passport" if c.doc_type == "id_card" else "id_card"
            size = canonical_size(other, self.settings.dpi)
            alt = (other, c.homography(d, size, bool(turned[j])), size)
            views.append(CardView(image=d, homography=c.homography(d, c.size, bool(turned[j])),
                                  size=c.size, doc_type=c.doc_type,
                                  quad=np.roll(c.quad, -c.turns(bool(turned[j])), axis=0),
                                  upload_size=(w, h), thumb=thumb, alternative=alt,
                                  # both views searched: a spread's page may be one of two
                                  # cards stacked; a card whose shape says the other type than
                                  # the one named read its TD1 zone as an unreadable TD2 on
                                  # its own view, which then asked no fallback (geo36)
                                  in_doubt=c.by_print or c.booklet or c.mismatch,
                                  any_format=c.framed))
        return self.verifier.verify(views, self.clock().date(), self.pixels)


@dataclass(frozen=True, slots=True)
class _Card:
    """A card that passed the pre-warp verdicts.

    Attributes:
        det: its detection in the upload's px.
        quad: ``det.quad`` (a card that passed the verdicts has one), ``(4, 2) float64``.
        doc_type: ``id_card`` or ``passport``.
        size: output ``(width, height)`` px (ISO/IEC 7810 at ``dpi``).
        k: quarter turns from the quad's TL-first reading to its landscape reading (0 or 1).
        reasons: verdicts so far (PARTIAL_CARD).
        by_print: the document type is ``auto`` and in doubt (the card's metric aspect ratio,
            :func:`processors.card.geometry.metric_aspect`, lies on both sides of
            ``auto_aspect_split`` over a camera's focal lengths): the orientation classifier's
            print reading may decide it, and then the MRZ's format (searched on both
            rectifications).
        auto: the document type is ``auto``: when not in doubt, the other type's
            rectification is the MRZ's fallback view (:class:`processors.card.mrz.read.View`).
        unzoned: the outcome the upload gets instead unless the verification reads a
            machine-readable zone on this document with every check digit valid (or passing,
            the zone unreadable only for an unsure unchecked character: :func:`_zone_vouches`):
            NO_CARD for
            one found by its outline alone (:func:`processors.card.scan.outline`; ICAO Doc
            9303's specimen figures carry a zone; a form, a certificate or a letter drawn in a
            box of a document's shape does not, and two lines of random OCR-B read as a zone but
            pass no check digit: an outline is too little evidence for more) or for a frame of
            busy print (:func:`processors.card.scan.busy_page`), CARD_TOO_SMALL for
            the scan path's document standing in for a card path's quad under ``min_card_px``
            (the portrait or a panel of a scan, or a small card in a photo).
        rival: another quad of the same upload, which takes the card's place where the card's
            verification reads no valid zone and its own reads one with every check digit
            valid (the zone vouches for its quad; :meth:`CardProcessor._rivals`; the scan
            path's document also where the card shows no zone and its own zone reads, valid
            or not, unless only a valid one vouches for it, :attr:`unzoned`):
            the scan path's document (:func:`processors.card.scan.judge`) where this card was
            suspect (:func:`processors.card.scan.inner_suspect`) and the document did not
            replace it (:func:`processors.card.scan.replaces`: a scan whose card path took a
            panel, or the page less a strip, with a confidence of 0.55-0.89 on the scan sets),
            else the detector's runner-up (:attr:`processors.card.detect.Detection.runner_up`),
            tried only where the card's zone was found (an ID-1 front without a zone never
            pays for it). A card without the scan path's document whose zone was found asks
            the scan path late as well (:meth:`CardProcessor._late_pages`).
        scanned: the upload's frame, or a quad near it, is the document
            (:func:`processors.card.scan.judge`): NO_CARD where, sharp and without glare, it is
            no data page (:func:`_no_data_page`).
        mismatch: the upload named the document type and the quad's metric aspect ratio, out
            of doubt, is the other type's (``DOC_TYPE_MISMATCH``; the card is rectified to the
            type named unless its zone reads on the other type's view, whose type it then
            takes; both views are searched, since geo36). A zone read valid in the other
            type's format flags it too, in doubt or not
            (:func:`_zone_of_other_type`), as does a zone read on the other type's view.
        booklet: one page of an open passport booklet whose whole spread another card's quad
            took (:meth:`CardProcessor._booklet_pages`): a rival of that card, which takes its
            place where the page's zone reads valid, or reads (check digits valid or not)
            where the spread showed no zone and needs none to vouch for it
            (:attr:`unzoned`).
        pages: the pages of an open booklet whose spread is the upload's frame
            (:meth:`CardProcessor._frame_pages`), rivals of this card as :attr:`rival` is.
        cut_unless_zone: a page of a spread cropped edge to edge, its outer sides on the frame
            (:meth:`CardProcessor._spread_page`): PARTIAL_CARD unless its zone vouches for it
            (:func:`_zone_vouches`), as a card on the frame is.
        framed: the upload's whole frame taken for the document
            (:meth:`CardProcessor._whole_frame`): its shape says nothing of the document's
            format, so every format is read on it, on both types' views, and a readable zone's
            format decides the type, named or not
            (:attr:`processors.card.verify.CardView.any_format`).
        stacked: a page of a spread (:attr:`booklet`) whose zone read valid as TD1, an ID-1
            card's (ICAO Doc 9303 part 5), where a booklet's data page carries TD3 (part 4):
            the spread is two ID-1 cards one above the other whose saliency merged (2 x 53.98
            mm over 85.60 mm is 1.26, 1.38 with 10 mm between them, near ID-3's 1.42), a
            card's front and back on one photocopied page, say: ``MULTIPLE_CARDS``, as two
            cards side by side are (:attr:`processors.card.detect.Detection.pair`). Only where
            the spread's other half shows a card of its own (:meth:`CardProcessor._two_cards`).
            Also a card that may be a spread, with no zone on it nor on either half, whose
            halves each show a face: two card fronts.
    """

    det: Detection
    quad: np.ndarray
    doc_type: str
    size: tuple[int, int]
    k: int
    reasons: list[ReasonCode]
    by_print: bool = False
    auto: bool = False
    unzoned: Outcome | None = None
    scanned: bool = False
    rival: _Card | None = None
    mismatch: bool = False
    booklet: bool = False
    pages: tuple[_Card, ...] = ()
    cut_unless_zone: bool = False
    framed: bool = False
    stacked: bool = False

    def turns(self, turned: bool) -> int:
        """Quarter turns from the TL-first reading to the upright output (0-3)."""
        return (self.k + (2 if turned else 0)) % 4

    def homography(self, image: Decoded, size: tuple[int, int], turned: bool = False) -> np.ndarray:
        """``(3, 3)`` map from output px of a ``size`` image to ``image``'s decoded px (the quad
        read from the corner that becomes the output's top-left; a half turn is a roll by 2)."""
        q = np.roll(self.quad, -self.turns(turned), axis=0)
        return homography((q + 0.5) * image.scale - 0.5, size)


def _upload_shape(item: Item, image: Decoded) -> tuple[int, int]:
    """``(height, width)`` px of the upload as displayed: the decoded size at full resolution,
    else the probe's (a DCT-scaled JPEG, whose probe size is exact)."""
    if image.scale == 1.0:
        return image.height, image.width
    return item.image.height, item.image.width


def _to_upload_px(det: Detection, scale: float) -> Detection:
    """``det`` (decoded px at ``scale`` decoded px per upload px) in the upload's px."""
    if scale == 1.0:
        return det

    def at(q: np.ndarray) -> np.ndarray:
        return (np.asarray(q, np.float64) + 0.5) / scale - 0.5

    def up(q: np.ndarray | None) -> np.ndarray | None:
        return None if q is None else at(q)

    return replace(det, quad=up(det.quad), second_quad=up(det.second_quad),
                   runner_up=up(det.runner_up),
                   pair=None if det.pair is None else (at(det.pair[0]), at(det.pair[1])))


def _long_side(quad: np.ndarray) -> float:
    """Mean length (px) of the two longer opposite sides of ``quad`` ``(4, 2)``."""
    s = geo.side_lengths(quad)
    return float(max(s[0] + s[2], s[1] + s[3]) / 2.0)


PAPER_WHITE = 218.0
"""Median grey level (0-255) of a rectified page from which its paper is white
(:func:`_no_data_page`): print, a letterhead or a logo cover less than half of a letter, so the
median is its paper. Measured on pages scanned edge to edge: letters and certificates 222-255
(a dark letterhead's mean 216.9, median 252; recycled grey paper 222); the synthetic scans'
tinted cards and data pages 138-212 (the three of the 80 of the ``kinds`` set with neither
portrait nor zone found), a letter on blue-tinted paper 212."""


def _zone_fits(ver: Verification | None, doc_type: str) -> bool:
    """The verification read a zone (``readable``) on the ``doc_type`` rectification whose format
    that type carries (:data:`processors.card.mrz.read.FORMATS_FOR`): then the document is of
    the type named, whatever its quad's shape says (a quad that missed part of a passport page
    measured ID-1's ratio on 20 of the 600 documents of the MRZ set, seed 20261204)."""
    return (ver is not None and ver.mrz is not None and ver.mrz.readable
            and ver.mrz.format in FORMATS_FOR.get(doc_type, ()))


def _zone_of_other_type(ver: Verification | None, doc_type: str) -> bool:
    """The verification read, on a document rectified as ``doc_type``, a zone whose format
    belongs to the other type with every check digit valid
    (:attr:`processors.card.mrz.read.MrzRead.other_type`): a passport page's TD3 zone on a card
    whose quad, in doubt, was rectified as the ID-1 card the upload named. The zone stays
    MRZ_UNREADABLE there (no TD3 fits an ID-1 card), and is the evidence of the type the quad
    could not give."""
    return (ver is not None and ver.mrz is not None and ver.mrz.other_type is not None
            and ver.mrz.other_type != doc_type)


def _no_data_page(doc_type: str, ver: Verification | None, thumb: np.ndarray) -> bool:
    """Whether a document of ``doc_type`` is shown by its verification ``ver`` and its rectified
    thumbnail ``thumb`` (BGR or grey ``uint8``) to be no passport data page: of the passport type, a
    page of white paper (:data:`PAPER_WHITE`) with neither a portrait in its portrait zone nor a
    machine-readable zone found (ICAO Doc 9303 part 4: an ID-3 data page carries both, on
    security print). A letter, a certificate or a form scanned edge to edge has A4's 1.414,
    ID-3's 125 / 88 = 1.42 within a few per cent. False where the zone or the portrait was not
    measured. (A zone found that vouches for nothing is no evidence either way: two lines of
    OCR-B on a blank sheet read as one, and so does a grey photocopy of an ID card whose
    portrait the detector misses; session 65 tried the rule on colourless sheets and refused
    five such photocopies, so it was taken back.)"""
    if doc_type != "passport" or ver is None or ver.mrz is None or ver.quality is None:
        return False
    if ver.mrz.found or ver.quality.portrait is not False:
        return False
    return median_grey(thumb, thumb.shape[1]) >= PAPER_WHITE


EDGELESS_MAX_SIDES = 1
"""A card the card path found with at most this many sides on an unbroken edge
(:data:`processors.card.scan.EDGE_CONTINUITY` of 64 probes) shows no document's edge
(:func:`_edgeless`). Measured (session 65, the working copy's gradients): a block of text on a
white page that the card path took at 0.95 (PassportEye's ``tesseract-test1``), 0 sides
(continuity 0.33-0.47); the 8 held-out cards (seed 20261129) that are white with neither
portrait nor zone found, 3-4 sides (one side as low as 0.33); a letter photographed on a
table, 4 sides at 1.0."""


def _edgeless(quad: np.ndarray, image: Decoded, grey: np.ndarray) -> bool:
    """Whether ``quad`` (``(4, 2)`` upload px) shows no document's edge on ``grey``, the
    upload's working grey copy (``image``'s decoded px scaled to it): at most
    :data:`EDGELESS_MAX_SIDES` of its sides run along an unbroken step of grey
    (:func:`processors.card.scan.edge_continuity`). A card, a page or a sheet has its edge
    against whatever it lies on; a block of print the card path took on a white page has
    only its letters' broken strokes there."""
    work = image.scale * max(grey.shape[:2]) / max(image.width, image.height)
    q = (np.asarray(quad, np.float64) + 0.5) * work - 0.5
    gx, gy = geo.gradients(grey)
    on_edge = sum(scan.edge_continuity(gx, gy, q, i) >= scan.EDGE_CONTINUITY for i in range(4))
    return on_edge <= EDGELESS_MAX_SIDES


def _zone_valid(ver: Verification | None) -> bool:
    """Whether the verification ``ver`` read a machine-readable zone with every check digit
    valid (ICAO Doc 9303 parts 4-5); False where it was not run, failed or found none."""
    return ver is not None and ver.mrz is not None and ver.mrz.valid


def _zone_of_format(ver: Verification | None, fmt: Format) -> bool:
    """Whether the verification ``ver`` read a valid zone (:func:`_zone_valid`) of ``fmt``."""
    return ver is not None and ver.mrz is not None and ver.mrz.valid and ver.mrz.format == fmt


def _zone_vouches(ver: Verification | None) -> bool:
    """Whether the verification ``ver`` read a zone that vouches for a page only its zone can
    make a document (:attr:`_Card.unzoned`): valid (:func:`_zone_valid`), or unreadable only
    for an unsure unchecked character with every check digit passing
    (:attr:`processors.card.mrz.read.MrzRead.checks_pass`): four or five check digits and the
    format's shape do not pass on a form's or a scene's print."""
    return _zone_valid(ver) or (ver is not None and ver.mrz is not None
                                and ver.mrz.checks_pass)


def _zone_readable(ver: Verification | None) -> bool:
    """Whether the verification ``ver`` read a machine-readable zone whose characters are
    sure and whose format fits the document (:attr:`processors.card.mrz.read.MrzRead.readable`),
    its check digits valid or not."""
    return ver is not None and ver.mrz is not None and ver.mrz.readable


def _det_at(det: Detection, quad: np.ndarray, shape: tuple[int, int]) -> Detection:
    """``det`` moved to ``quad`` (``(4, 2)`` upload px; ``shape`` the upload's ``(height,
    width)``): its area share and aspect ratios measured anew, no runner-up or second card."""
    h, w = shape
    return replace(det, quad=quad, runner_up=None, second_quad=None,
                   area_frac=geo.polygon_area(quad) / float(h * w),
                   aspect=geo.approx_aspect(quad),
                   metric_aspect=geo.metric_aspect(quad, (w, h)).value)


def _spread_shaped(shape: tuple[int, int]) -> bool:
    """Whether a frame of ``shape`` (``(h, w)`` px) has an open booklet's shape
    (:data:`BOOKLET_ASPECT` within :data:`BOOKLET_ASPECT_TOL`, either way up)."""
    h, w = shape
    return abs(max(h, w) / min(h, w) / BOOKLET_ASPECT - 1.0) <= BOOKLET_ASPECT_TOL


def _frame_quad(shape: tuple[int, int]) -> np.ndarray:
    """The corners TL, TR, BR, BL (px centres, ``(4, 2) float64``) of a frame of ``shape``
    (``(h, w)``)."""
    h, w = shape
    return np.array([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]], np.float64)


def _halves(quad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``quad`` (``(4, 2) float64``, TL, TR, BR, BL) cut in two across its long sides at their
    midpoints as the quad's homography maps them (perspective kept: the middle of the document,
    not of its image): ``(first, second)``, each ``(4, 2)`` in the same corner order."""
    to_quad = homography(quad, (2, 2))  # the unit square's corners onto the quad's

    def at(u: float, v: float) -> np.ndarray:
        x, y, w = to_quad @ np.array([u, v, 1.0])
        return np.array([x / w, y / w])

    tl, tr, br, bl = quad
    sides = geo.side_lengths(quad)  # top, right, bottom, left
    if sides[0] + sides[2] >= sides[1] + sides[3]:  # top and bottom are the long sides
        mt, mb = at(0.5, 0.0), at(0.5, 1.0)
        return np.array([tl, mt, mb, bl]), np.array([mt, tr, br, mb])
    ml, mr = at(0.0, 0.5), at(1.0, 0.5)
    return np.array([tl, tr, mr, ml]), np.array([ml, mr, br, bl])


def _with_pages(card: _Card | None, pages: tuple[_Card, ...]) -> _Card | None:
    """``card`` with a booklet's ``pages`` as its :attr:`_Card.pages`; without ``card``, the
    first page with the other as its; None with neither."""
    if card is not None:
        return replace(card, pages=pages)
    return replace(pages[0], pages=pages[1:]) if pages else None


def _spread_suspect(card: _Card, ver: Verification | None) -> bool:
    """Whether ``card`` may be an open passport booklet's whole spread
    (:meth:`CardProcessor._booklet_pages`): its verification read no zone, it is no page of
    a spread itself nor the whole frame (whose halves are the frame's own pages where the
    frame has the spread's shape, :meth:`CardProcessor._frame_pages`), and it is typed
    ``passport`` (the spread has ID-3's shape) or typed by
    ``auto`` (a spread photographed at a slant, or scanned, can measure ID-1's ratio, its
    page's portrait found in an ID-1 front's portrait zone or not), or its shape says the
    other type than the one named (:attr:`_Card.mismatch`: a booklet on a table named
    ``id_card``, or two cards one above the other, :attr:`_Card.stacked`), or no zone was
    found on either type's view (``geo38``: an open booklet photographed at a slant, named
    ``id_card``, its shape in doubt, was warped whole to ID-1 and accepted with NO_PORTRAIT,
    its valid TD3 zone unread; a fresh user's trial, session 68). The pages are read only
    where the locator finds a zone on them, on either type's view
    (:meth:`Verifier.zones_located`, about 1.5 ms a view)."""
    if _zone_readable(ver) or card.booklet or card.framed:
        return False
    return _typed_as_spread(card) or not _zone_found(ver)


def _typed_as_spread(card: _Card) -> bool:
    """Whether ``card``'s type or shape allows an open booklet's spread: typed ``passport``,
    typed by ``auto``, or its shape says the other type than the one named
    (:attr:`_Card.mismatch`). Only such a card, with no zone on it nor on its halves, is asked
    whether its halves are two card fronts (:meth:`CardProcessor._two_cards`): a card named
    ``id_card`` whose shape agrees is taken at its word (the halves of one front hold its
    portrait and its ghost image)."""
    return card.doc_type == "passport" or card.auto or card.mismatch


def _zone_found(ver: Verification | None) -> bool:
    """Whether the verification ``ver`` found a machine-readable zone (read or not)."""
    return ver is not None and ver.mrz is not None and ver.mrz.found


def _quad_list(quad: np.ndarray) -> list[list[float]]:
    """``(4, 2)`` quad (TL, TR, BR, BL, source px) as JSON lists rounded to 0.01 px."""
    return [[round(float(x), 2), round(float(y), 2)] for x, y in quad]
