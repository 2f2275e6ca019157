"""Card processor settings (``CARDSTREAM_CARD__*``). Thresholds documented per field."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from processors.card.policy import VerifySettings


class CardSettings(BaseModel):
    """Settings of the card processor (frozen; part of the app settings).

    Localisation:
        decode_side: long side (px) each upload is decoded at, at least: a JPEG is decoded at
            the smallest libjpeg-turbo DCT scale M/8 that keeps it (a 4032 x 3024 photo at 1/2,
            2016 x 1512: a card then has up to twice the 1011 px of its output), other formats
            and photos up to this size at full resolution; None: always full resolution. At
            12 MP this halves the CPU time outside the model (MODEL.md, *CPU time*); a card
            narrower than half the frame is then warped from fewer pixels than its output has.
        mask_threshold: u2netp saliency (min-max normalised to [0,1]) above which a pixel
            belongs to the card mask.
        work_max_side: longest side (px) of the working copy used for the coarse quad; the
            final quad is refined on the full-resolution image.
        refine: refine each side at full resolution against the card's edge (line fits).
        refine_band_frac: how far (share of the quad's shorter side) each side may move
            outwards to a straight edge the saliency mask missed (e.g. a dark header band).

    Card / no-card decision (NO_CARD when any fails):
        min_confidence: confidence (see ``CardProcessor``) below which the result is NO_CARD.
        min_area_frac: smallest quad area as a share of the image area (below it: NO_CARD, or
            CARD_TOO_SMALL when every other rule passes and the share is at least a tenth of it).
        min_card_px: shortest long side (px, mean of the quad's two long sides) of a card that
            is judged at all; below it CARD_TOO_SMALL (``geo5``). At 160 px an ID-1 card has
            ~1.9 px/mm, so its 2 mm text lines are ~4 px tall and the 1011 px output is a 6x
            upscale. The synthetic sets' cards are >= 199 px; a fresh-user trial had cards of
            105-131 px accepted, one at IoU 0.81.
        min_rectangularity: mask component area / quad area (a card fills its quad: ~0.97).
        min_mask_contrast: mean mask inside the quad minus mean mask outside.
        aspect_range: allowed long/short side ratio of the quad after an approximate
            perspective correction (``Detection.aspect``) or with the perspective undone
            (``Detection.metric_aspect``); either in range passes (ID-1 is 1.586, ID-3 1.420,
            A4 1.414).
        max_corner_angle_dev_deg: largest allowed deviation (degrees) of any interior angle of
            the quad from 90°. A rectangle photographed by a phone keeps its corners near 90°;
            the synthetic generator's quads reach 14° at most, so 35° leaves room for steeper
            real tilts while refusing the kite-shaped outlines of animals, people and objects.

    Verdicts:
        partial_margin_px: a corner outside the frame, or closer than this many px to its
            border, gives PARTIAL_CARD.
        partial_margin_frac: the same margin as a share of the image's shorter side (the larger
            of the two margins applies).
        blur_min_laplacian_var: BLURRY when the variance of the Laplacian of the rectified card,
            grey, resized to ``quality_width`` px wide, is below this.
        blur_min_direction_ratio: BLURRY also when the rectified card's fine detail in its
            weakest direction is below this share of its strongest (a motion blur; see
            ``rectify.direction_detail_ratio``: sharp cards 0.25-0.6, motion blur 0.02-0.08).
            A photo judged NO_CARD whose whole frame has a Laplacian variance below
            ``blur_min_laplacian_var`` or a direction ratio below this also carries BLURRY: too
            blurred to find a card in (whole synthetic photos, with or without a card: >= 0.21).
        glare_max_fraction: GLARE when more than this share of the rectified card's pixels is
            saturated (every channel >= ``glare_level``).
        glare_level: 8-bit level counted as saturated.
        quality_width: width (px) of the rectified copy the blur/glare measures run on, so the
            thresholds do not depend on ``dpi``.

    Scans and pre-cropped documents (:mod:`processors.card.scan`; MODEL.md, *Scans*), judged
    when the card path finds no card (NO_CARD) or one running onto the frame (PARTIAL_CARD):
        scan: judge the frame itself as the document (off: the card path only).
        scan_band_frac: how far in from each frame border (share of the frame's shorter side)
            a side looks for the document's edge against a margin.
        scan_busy_max: the largest share of the strip between that edge and the frame with
            strong gradients (``scan.BUSY_GRADIENT``) for it to count as a margin (a lid,
            paper; not print or a scene).
        scan_aspect_tol: the quad's aspect ratio may differ from ID-1's 1.586 or ID-3's 1.420
            by this share (0.04: 1.52-1.65 and 1.36-1.48; a phone's 4:3 frame, 1.333, and 3:2,
            1.5, stay outside).
        scan_min_area_frac: the smallest share of the frame the document covers.
        scan_max_corner_dev_deg: the largest deviation of a corner from 90° (a scanner or a
            crop app leaves the corners square).
        scan_min_print_glyphs: glyphs in rows (``scan.print_glyphs``) the document must show
            (its content: the scan path's documents in the eval sets show 92 or more).
        scan_min_ground: the share of the document that must be plain ground
            (``scan.ground_share``: print on paper, not grass or gravel).

    Output:
        doc_type: default when the upload's options carry none: ``id_card`` (ISO/IEC 7810 ID-1,
            85.60 x 53.98 mm), ``passport`` (ID-3, 125 x 88 mm) or ``auto`` (by aspect ratio).
        auto_aspect_split: in ``auto``, aspect ratios at or above this are ID-1, below it ID-3
            (midway between 1.586 and 1.420), unless the print decides (below). The aspect is
            the quad's metric one, its perspective undone with a focal length estimated from
            the quad (:func:`processors.card.geometry.metric_aspect`).
        doc_print_min: in ``auto``, a card whose metric aspect lies on both sides of
            ``auto_aspect_split`` over a camera's focal lengths (the quad cannot tell) takes
            the document type from the orientation classifier's second output when it is at
            least this sure of it (probability of the type chosen), and then from its MRZ's
            format when one reads (searched on both rectifications).
        dpi: output resolution; ID-1 at 300 dpi is 1011 x 637 px, ID-3 is 1476 x 1039 px.
        jpeg_quality: JPEG quality (1-100) of the ``rectified`` artifact.
        orient: decide 0/180 (and 90/270) with the orientation classifier
            (``processors.card.orient``); off: the quad's own reading (landscape) is kept.
        orient_turn_min: the classifier's probability of a half turn from which the card is
            turned; below it the photo's own reading is kept (phone photos are mostly upright).
            Synthetic blank cards (no cue) never reach 0.8; 0.7-0.9 turn the same synthetic
            cards (MODEL.md, *Upright decision*).

    Verification (``CARDSTREAM_CARD__VERIFY__*``, :class:`processors.card.policy.VerifySettings`):
        verify: capture-quality measures, the portrait and the machine-readable zone of every
            found card, and the profiles that judge them.
    """

    model_config = ConfigDict(frozen=True)

    decode_side: int | None = Field(2000, ge=320)
    mask_threshold: float = Field(0.5, gt=0.0, lt=1.0)
    work_max_side: int = Field(1024, ge=256)
    refine: bool = True
    refine_band_frac: float = Field(0.25, gt=0.0, le=0.5)

    min_confidence: float = Field(0.5, ge=0.0, le=1.0)
    min_area_frac: float = Field(0.02, ge=0.0, lt=1.0)
    min_card_px: float = Field(160.0, ge=0.0)
    min_rectangularity: float = Field(0.85, ge=0.0, le=1.0)
    min_mask_contrast: float = Field(0.5, ge=0.0, le=1.0)
    aspect_range: tuple[float, float] = (1.15, 2.1)
    max_corner_angle_dev_deg: float = Field(35.0, gt=0.0, le=90.0)

    partial_margin_px: float = Field(2.0, ge=0.0)
    partial_margin_frac: float = Field(0.004, ge=0.0, lt=0.5)
    blur_min_laplacian_var: float = Field(20.0, ge=0.0)
    blur_min_direction_ratio: float = Field(0.15, ge=0.0, le=1.0)
    glare_max_fraction: float = Field(0.04, ge=0.0, le=1.0)
    glare_level: int = Field(250, ge=1, le=255)
    quality_width: int = Field(512, ge=64)

    scan: bool = True
    scan_band_frac: float = Field(0.16, gt=0.0, le=0.4)
    scan_busy_max: float = Field(0.03, ge=0.0, le=1.0)
    scan_aspect_tol: float = Field(0.04, ge=0.0, le=0.2)
    scan_min_area_frac: float = Field(0.6, gt=0.0, le=1.0)
    scan_max_corner_dev_deg: float = Field(6.0, gt=0.0, le=45.0)
    scan_min_print_glyphs: int = Field(45, ge=1)
    scan_min_ground: float = Field(0.3, ge=0.0, le=1.0)

    doc_type: Literal["id_card", "passport", "auto"] = "auto"
    auto_aspect_split: float = Field(1.50, gt=1.0)
    doc_print_min: float = Field(0.9, ge=0.5, le=1.0)
    dpi: int = Field(300, ge=50, le=1200)
    jpeg_quality: int = Field(92, ge=1, le=100)
    orient: bool = True
    orient_turn_min: float = Field(0.9, gt=0.0, lt=1.0)

    verify: VerifySettings = Field(default_factory=VerifySettings)
