"""ID-photo sizes at 300 dpi, head rules, and background colours.

Pixel sizes are ``round(mm / 25.4 * 300)``. "Head" is the chin-to-crown height; "crown margin"
is the distance from the photo's top edge down to the crown (top of the hair).

Sources:
- ``cn_passport`` 33x48 mm, head 28-33 mm, crown 3-5 mm below the top: China National
  Immigration Administration, photo guide for exit-entry documents (出入境证件相片照相指引).
- ``us_passport`` 2x2 in, head 1-1 3/8 in (50-69 % of the height): U.S. Department of State,
  travel.state.gov "Photo Requirements". The crown margin (3-8 mm, target 5 mm) is this project's
  choice that puts the eye line 1 1/8-1 3/8 in above the bottom as the same page asks.
- ``schengen`` 35x45 mm, head 32-36 mm: ICAO Doc 9303 part 3 / EU Schengen visa photo guidelines
  (face 70-80 % of the height). Crown margin 3-5 mm is this project's choice (ICAO leaves it open).
- ``one_inch`` 25x35 mm and ``two_inch`` 35x49 mm: the common Chinese "1-inch"/"2-inch" print
  sizes. No standard fixes their head size; this project uses the cn_passport proportion (head
  58-69 % of the height: 20-24 mm and 28-33 mm) with a 3-5 mm crown margin.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from processors.errors import ProcessorError

#: Output resolution (dots per inch) written into the file's metadata.
DPI = 300


class InvalidOptionError(ProcessorError):
    """An item option (``size``, ``background``, ``alpha_matting``) has no valid meaning."""


def mm_to_px(mm: float, dpi: int = DPI) -> int:
    """Millimetres to pixels at ``dpi`` (rounded to the nearest px)."""
    return round(mm / 25.4 * dpi)


@dataclass(frozen=True, slots=True)
class SizeSpec:
    """A standard photo size and its head rule (all lengths in mm).

    Attributes:
        name: option value (``one_inch``...).
        width_mm, height_mm: print size.
        head_min_mm, head_max_mm: allowed chin-to-crown height.
        crown_min_mm, crown_max_mm: allowed gap between the top edge and the crown.
        alpha_matting: default of the ``alpha_matting`` option for this size (off for one_inch:
            at 295x413 px it costs time and changes little).
    """

    name: str
    width_mm: float
    height_mm: float
    head_min_mm: float
    head_max_mm: float
    crown_min_mm: float
    crown_max_mm: float
    alpha_matting: bool

    @property
    def width_px(self) -> int:
        """Width at 300 dpi (px)."""
        return mm_to_px(self.width_mm)

    @property
    def height_px(self) -> int:
        """Height at 300 dpi (px)."""
        return mm_to_px(self.height_mm)

    @property
    def head_range_px(self) -> tuple[float, float]:
        """Allowed head height (px at 300 dpi), min and max."""
        k = DPI / 25.4
        return self.head_min_mm * k, self.head_max_mm * k

    @property
    def crown_range_px(self) -> tuple[float, float]:
        """Allowed crown margin (px at 300 dpi), min and max."""
        k = DPI / 25.4
        return self.crown_min_mm * k, self.crown_max_mm * k

    @property
    def target_head_px(self) -> float:
        """Head height aimed at: the middle of the allowed range (px)."""
        lo, hi = self.head_range_px
        return (lo + hi) / 2.0

    @property
    def target_crown_px(self) -> float:
        """Crown margin aimed at: the middle of the allowed range (px)."""
        lo, hi = self.crown_range_px
        return (lo + hi) / 2.0


_IN = 25.4
SIZES: dict[str, SizeSpec] = {
    "one_inch": SizeSpec("one_inch", 25, 35, 20, 24, 3, 5, alpha_matting=False),
    "two_inch": SizeSpec("two_inch", 35, 49, 28, 33, 3, 5, alpha_matting=True),
    "cn_passport": SizeSpec("cn_passport", 33, 48, 28, 33, 3, 5, alpha_matting=True),
    "us_passport": SizeSpec("us_passport", 2 * _IN, 2 * _IN, 1 * _IN, 1.375 * _IN, 3, 8,
                            alpha_matting=True),
    "schengen": SizeSpec("schengen", 35, 45, 32, 36, 3, 5, alpha_matting=True),
}

#: Named backgrounds as RGB (the seed's white, blue 67,142,219 and red 215,69,50).
BACKGROUNDS: dict[str, tuple[int, int, int]] = {
    "white": (255, 255, 255),
    "blue": (67, 142, 219),
    "red": (215, 69, 50),
}

_HEX = re.compile(r"^#([0-9A-Fa-f]{6})$")


def get_size(name: str) -> SizeSpec:
    """The :class:`SizeSpec` called ``name``.

    Raises:
        InvalidOptionError: unknown size.
    """
    spec = SIZES.get(name)
    if spec is None:
        raise InvalidOptionError(f"unknown size {name!r}; known: {sorted(SIZES)}")
    return spec


def parse_background(value: str) -> tuple[int, int, int]:
    """RGB of a background option: ``white``, ``blue``, ``red`` or ``#RRGGBB``.

    Raises:
        InvalidOptionError: anything else.
    """
    v = value.strip().lower()
    if v in BACKGROUNDS:
        return BACKGROUNDS[v]
    m = _HEX.match(v)
    if m is None:
        raise InvalidOptionError(
            f"background {value!r} is not one of {sorted(BACKGROUNDS)} or #RRGGBB"
        )
    n = int(m.group(1), 16)
    return (n >> 16) & 255, (n >> 8) & 255, n & 255
