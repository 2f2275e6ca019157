"""ID-photo specifications as data: ``specs.json`` beside this module, loaded into
:class:`PhotoSpec`.

One table defines every size the ``id_photo`` task knows: print size and resolution, the head
rule (chin to crown), the crown margin, the eye line, the chin margin, the background rule and
whether the issuer accepts a replaced background, with the official source of each figure and
where the npm package ``passport-photo-specs`` 1.4.0 (MIT, Copyright (c) 2026 IDPhotoSnap)
differs from it. Lengths are millimetres; pixel figures are at the spec's ``dpi``
(``round(mm / 25.4 * dpi)``). The framing reads :attr:`PhotoSpec.target_head_px` and
:attr:`PhotoSpec.target_crown_px`; the compliance report the rules.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from processors.idphoto.sizes import InvalidOptionError, mm_to_px

SPECS_FILE = Path(__file__).with_name("specs.json")

#: Background colour rules: ``(min luma, max chroma)`` of the background's mean colour (sRGB
#: 0..255; luma ``0.299 R + 0.587 G + 0.114 B``, chroma ``max - min`` of the channels). The
#: figures are this project's reading of the sources' words ("white", "white or off-white",
#: "plain light-coloured"), set so an evenly lit real wall of that kind passes: a white wall
#: photographed indoors is rarely above 235.
BACKGROUND_RULES: dict[str, tuple[float, float] | None] = {
    "any": None,
    "white": (200.0, 25.0),
    "white_or_off_white": (185.0, 35.0),
    "light": (150.0, 70.0),
}


@dataclass(frozen=True, slots=True)
class PoseLimits:
    """Largest head rotations (degrees) and the face centre's tolerance (share of the width).

    Attributes:
        roll_max_deg, yaw_max_deg, pitch_max_deg: ISO/IEC 19794-5 section 8.2 (8, 5, 5).
        centre_tolerance: the face's horizontal mid-point at most this share of the width from
            the centre (ISO/IEC 19794-5 section 8.3.2: 5 %).
        source: where the figures come from.
    """

    roll_max_deg: float
    yaw_max_deg: float
    pitch_max_deg: float
    centre_tolerance: float
    source: str


@dataclass(frozen=True, slots=True)
class PhotoSpec:
    """One ID-photo size and its rules (lengths in mm).

    Attributes:
        name: the ``size`` option's value (``us_passport``...).
        title: what it is, for people.
        width_mm, height_mm: print size.
        dpi: resolution of the output and of its JPEG metadata (dots per inch).
        head_min_mm, head_max_mm: allowed chin-to-crown height.
        crown_margin_mm: the rule for the gap between the top edge and the crown, or None when
            the source states none.
        crown_min_mm, crown_max_mm: the crown margin the framing aims between: the rule, or
            this project's choice where there is none (``framing`` in ``specs.json``).
        eye_line_mm: allowed height of the eyes above the bottom edge, or None.
        chin_margin_min_mm: smallest gap between the chin and the bottom edge, or None.
        background_rule: a key of :data:`BACKGROUND_RULES`.
        background_default: the colour retouching paints when the upload names none.
        replacement_allowed: whether the issuer accepts a photo whose background was replaced.
        alpha_matting: default of the ``alpha_matting`` option.
        icao_rules: the expression (eyes open, mouth closed), lighting and background
            uniformity checks apply (ICAO Doc 9303 part 3); false for the studio print sizes.
        colour_required: a grey-scale photo fails the ``colour`` check.
        sources: the official sources of the figures.
        package_differences: how ``passport-photo-specs`` 1.4.0 differs, as recorded.
    """

    name: str
    title: str
    width_mm: float
    height_mm: float
    dpi: int
    head_min_mm: float
    head_max_mm: float
    crown_margin_mm: tuple[float, float] | None
    crown_min_mm: float
    crown_max_mm: float
    eye_line_mm: tuple[float, float] | None
    chin_margin_min_mm: float | None
    background_rule: str
    background_default: str
    replacement_allowed: bool
    alpha_matting: bool
    icao_rules: bool
    colour_required: bool
    sources: tuple[str, ...]
    package_differences: str

    def px(self, mm: float) -> float:
        """Millimetres to px at :attr:`dpi` (not rounded)."""
        return mm / 25.4 * self.dpi

    @property
    def width_px(self) -> int:
        """Width at :attr:`dpi` (px)."""
        return mm_to_px(self.width_mm, self.dpi)

    @property
    def height_px(self) -> int:
        """Height at :attr:`dpi` (px)."""
        return mm_to_px(self.height_mm, self.dpi)

    @property
    def head_range_px(self) -> tuple[float, float]:
        """Allowed head height (px), min and max."""
        return self.px(self.head_min_mm), self.px(self.head_max_mm)

    @property
    def crown_range_px(self) -> tuple[float, float]:
        """Crown margin the framing aims between (px), min and max."""
        return self.px(self.crown_min_mm), self.px(self.crown_max_mm)

    @property
    def target_head_px(self) -> float:
        """Head height aimed at: the middle of the allowed range (px)."""
        lo, hi = self.head_range_px
        return (lo + hi) / 2.0

    @property
    def target_crown_px(self) -> float:
        """Crown margin aimed at: the middle of :attr:`crown_range_px` (px)."""
        lo, hi = self.crown_range_px
        return (lo + hi) / 2.0


def _pair(v: Any) -> tuple[float, float] | None:
    return None if v is None else (float(v[0]), float(v[1]))


def _spec(name: str, e: Mapping[str, Any]) -> PhotoSpec:
    crown = _pair(e["crown_margin_mm"])
    aim = crown or _pair(e.get("framing", {}).get("crown_margin_mm"))
    if aim is None:
        raise ValueError(f"specs.json: {name} has neither crown_margin_mm nor "
                         "framing.crown_margin_mm")
    head = _pair(e["head_mm"])
    assert head is not None
    bg = e["background"]
    if bg["rule"] not in BACKGROUND_RULES:
        raise ValueError(f"specs.json: {name} background rule {bg['rule']!r} unknown")
    return PhotoSpec(
        name=name, title=e["title"], width_mm=float(e["width_mm"]),
        height_mm=float(e["height_mm"]), dpi=int(e["dpi"]), head_min_mm=head[0],
        head_max_mm=head[1], crown_margin_mm=crown, crown_min_mm=aim[0], crown_max_mm=aim[1],
        eye_line_mm=_pair(e["eye_line_mm"]),
        chin_margin_min_mm=(None if e["chin_margin_min_mm"] is None
                            else float(e["chin_margin_min_mm"])),
        background_rule=bg["rule"], background_default=bg["default"],
        replacement_allowed=bool(bg["replacement_allowed"]), alpha_matting=bool(e["alpha_matting"]),
        icao_rules=bool(e["icao_rules"]), colour_required=bool(e["colour_required"]),
        sources=tuple(e["sources"]), package_differences=e["package"]["differences"],
    )


@cache
def _table() -> tuple[dict[str, PhotoSpec], PoseLimits]:
    raw = json.loads(SPECS_FILE.read_text(encoding="utf-8"))
    return {name: _spec(name, e) for name, e in raw["sizes"].items()}, PoseLimits(**raw["pose"])


def specs() -> dict[str, PhotoSpec]:
    """Every size of ``specs.json`` by name (loaded once)."""
    return _table()[0]


def pose_limits() -> PoseLimits:
    """The head-pose and centring limits every size shares (``specs.json`` ``pose``)."""
    return _table()[1]


def get_spec(name: str) -> PhotoSpec:
    """The :class:`PhotoSpec` called ``name``.

    Raises:
        InvalidOptionError: unknown size (the message lists the known ones).
    """
    spec = specs().get(name)
    if spec is None:
        raise InvalidOptionError(f"unknown size {name!r}; known: {sorted(specs())}")
    return spec


def background_ok(rule: str, rgb_mean: tuple[float, float, float]) -> bool:
    """Whether a background whose mean colour is ``rgb_mean`` (sRGB 0..255) meets ``rule``
    (:data:`BACKGROUND_RULES`)."""
    bound = BACKGROUND_RULES[rule]
    if bound is None:
        return True
    r, g, b = rgb_mean
    luma = 0.299 * r + 0.587 * g + 0.114 * b
    return luma >= bound[0] and max(rgb_mean) - min(rgb_mean) <= bound[1]
