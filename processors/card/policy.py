"""Which capture-quality and MRZ findings a card result carries, and which of them reject it.

A *profile* holds the bounds each measure of :mod:`processors.card.quality` is judged against and
the set of codes that reject the result (the others only annotate an accepted one). Three ship
(``strict``, ``normal``, ``relaxed``); the settings choose the default
(``CARDSTREAM_CARD__VERIFY__PROFILE``) and an upload may name another in its options
(``profile``). ``normal`` rejects nothing new, so a v1 consumer's verdicts do not change unless
a platform asks for ``strict``.

Bounds, and where they come from:

- ``min_dpi`` (LOW_RESOLUTION): ICAO Doc 9303 part 3 prints the MRZ at 10 characters per inch
  in OCR-B about 2.4 mm high; at 150 dpi a character is about 14 px tall, what the recogniser
  was trained down to (140 dpi); commercial capture SDKs ask 200-300 dpi for OCR.
- ``max_tilt_deg`` (TOO_OBLIQUE): beyond 35 degrees the far side of a card shrinks by a fifth
  and glare and focus fall off across it; the synthetic set renders up to 35.
- ``min_brightness`` / ``max_brightness`` (TOO_DARK / TOO_BRIGHT): mean grey of the rectified
  card (0-255); a printed card under normal light measures 90-200.
- ``min_colourfulness`` (PHOTOCOPY): chroma spread (:func:`quality.colourfulness`); 3.0 sits
  between the synthetic grey copies (at most 2.0, 65 of them) and colour documents (1st
  percentile 4.7, 535) of the evaluation set, seed 20261204, given their true corners.
- ``max_glare_mrz`` (GLARE_ON_MRZ): saturated share of the MRZ band.
- NO_PORTRAIT: no face found in the portrait zone of a document that carries one (an ID-3 page,
  an ID-1 front; not the back of an ID-1 card, which carries a TD1 zone).
- MRZ_MISSING: no zone found on a document that must carry one, an ID-3 page (ICAO Annex 9 has
  every passport issued since 1 April 2010 machine-readable; Doc 9303 parts 4-5 place the zone).
  ID-1 cards are not asked: many carry no zone, or carry it on the side not photographed.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from processors.card.quality import Quality
from schemas.models import ProfileName
from schemas.reasons import ReasonCode

QUALITY_CODES = (ReasonCode.LOW_RESOLUTION, ReasonCode.TOO_OBLIQUE, ReasonCode.TOO_DARK,
                 ReasonCode.TOO_BRIGHT, ReasonCode.PHOTOCOPY, ReasonCode.NO_PORTRAIT,
                 ReasonCode.GLARE_ON_MRZ)
MRZ_CODES = (ReasonCode.MRZ_UNREADABLE, ReasonCode.MRZ_MISSING, ReasonCode.MRZ_CHECK_DIGIT,
             ReasonCode.DOCUMENT_EXPIRED)
TYPE_CODES = (ReasonCode.DOC_TYPE_MISMATCH,)
"""The upload's ``doc_type`` against the document's measured shape
(:meth:`processors.card.processor.CardProcessor._plan`)."""


class Profile(BaseModel):
    """Bounds and rejecting codes (module doc). A bound it does not know (a misspelt
    ``CARDSTREAM_CARD__VERIFY__PROFILES__STRICT__MIN_DIP``), one that is no finite number, and a
    brightness range that is empty are refused at start-up (``ValidationError``): each used to
    be taken, silently ignored or leaving every card TOO_DARK or TOO_BRIGHT."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    min_dpi: float = Field(150.0, ge=0.0)
    max_tilt_deg: float = Field(35.0, ge=0.0, le=90.0)
    min_brightness: float = Field(45.0, ge=0.0, le=255.0)
    max_brightness: float = Field(230.0, ge=0.0, le=255.0)
    min_colourfulness: float = Field(3.0, ge=0.0)
    max_glare_mrz: float = Field(0.03, ge=0.0, le=1.0)
    reject: frozenset[ReasonCode] = frozenset()

    @model_validator(mode="after")
    def _brightness_range(self) -> Profile:
        if self.min_brightness > self.max_brightness:
            raise ValueError(f"min_brightness {self.min_brightness} is above max_brightness "
                             f"{self.max_brightness}: every card would be TOO_DARK or TOO_BRIGHT")
        return self

    def bounds(self) -> dict[str, float]:
        """The bounds as the result shows them."""
        return {"min_dpi": self.min_dpi, "max_tilt_deg": self.max_tilt_deg,
                "min_brightness": self.min_brightness, "max_brightness": self.max_brightness,
                "min_colourfulness": self.min_colourfulness, "max_glare_mrz": self.max_glare_mrz}

    def findings(self, q: Quality, mrz_zone: bool) -> list[ReasonCode]:
        """The quality codes ``q`` earns (``mrz_zone``: the document has, or must have, an MRZ,
        so glare over its band counts)."""
        out = []
        if q.dpi < self.min_dpi:
            out.append(ReasonCode.LOW_RESOLUTION)
        if q.tilt_deg > self.max_tilt_deg:
            out.append(ReasonCode.TOO_OBLIQUE)
        if q.brightness < self.min_brightness:
            out.append(ReasonCode.TOO_DARK)
        if q.brightness > self.max_brightness:
            out.append(ReasonCode.TOO_BRIGHT)
        if q.colourfulness < self.min_colourfulness:
            out.append(ReasonCode.PHOTOCOPY)
        if q.portrait is False:
            out.append(ReasonCode.NO_PORTRAIT)
        if mrz_zone and q.glare_mrz > self.max_glare_mrz:
            out.append(ReasonCode.GLARE_ON_MRZ)
        return out


PROFILES: dict[str, Profile] = {
    "strict": Profile(min_dpi=200.0, max_tilt_deg=25.0, min_brightness=60.0,
                      max_brightness=220.0, min_colourfulness=3.5, max_glare_mrz=0.01,
                      reject=frozenset(QUALITY_CODES + MRZ_CODES + TYPE_CODES)),
    "normal": Profile(),
    "relaxed": Profile(min_dpi=110.0, max_tilt_deg=45.0, min_brightness=30.0,
                       max_brightness=240.0, min_colourfulness=2.5, max_glare_mrz=0.08),
}
"""The shipped profiles."""


class VerifySettings(BaseModel):
    """The verification step of the card processor (``CARDSTREAM_CARD__VERIFY__*``).

    Attributes:
        quality: measure capture quality on every found card.
        mrz: read the machine-readable zone (one recogniser call per batch).
        portrait: look for the portrait (one batched face-detector call per batch).
        profile: the default profile (an upload's ``profile`` option overrides it).
        profiles: the profiles by name, always the three shipped; a value given here (e.g.
            ``CARDSTREAM_CARD__VERIFY__PROFILES__STRICT__MIN_DPI=250``) overrides those bounds
            of that profile and keeps the rest of it (:meth:`_merged`).
        mrz_values_allowed: whether an upload's ``mrz_values: true`` may put the MRZ's field
            values (names, numbers, dates: personal data) into its result; off by default.
    """

    model_config = ConfigDict(frozen=True)

    quality: bool = True
    mrz: bool = True
    portrait: bool = True
    profile: ProfileName = "normal"
    profiles: dict[str, Profile] = Field(default_factory=lambda: dict(PROFILES))
    mrz_values_allowed: bool = False

    @field_validator("profiles", mode="before")
    @classmethod
    def _merged(cls, given: Any) -> Any:
        """The shipped profiles with ``given``'s overrides, bound by bound: a partial override
        (one bound of one profile, from the environment) once replaced the whole dict, so the
        other profiles were missing and every found card failed with INTERNAL_ERROR.

        Raises:
            ValueError: a profile name that is not shipped (an upload can name only those).
        """
        if not isinstance(given, dict):
            return given  # pydantic refuses it with its own message
        unknown = sorted(str(k) for k in given if k not in PROFILES)
        if unknown:
            raise ValueError(f"unknown profile {', '.join(unknown)}: the profiles are "
                             + ", ".join(PROFILES))
        merged: dict[str, Any] = dict(PROFILES)
        for name, value in given.items():
            # a dict of bounds is laid over the shipped profile; anything else is pydantic's
            merged[name] = {**PROFILES[name].model_dump(), **value} if isinstance(value, dict) \
                else value
        return merged

    def profile_for(self, requested: str | None) -> tuple[str, Profile]:
        """``(name, profile)`` for an upload's ``profile`` option (None: the default)."""
        name = requested or self.profile
        return name, self.profiles.get(name, self.profiles[self.profile])
