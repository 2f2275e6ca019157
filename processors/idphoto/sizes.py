"""ID-photo option helpers: the output's default resolution, millimetres to pixels, and
background colours. The sizes themselves (print size, head rule, crown margin, sources) are in
``specs.json`` (:mod:`processors.idphoto.specs`), the one table of them since issue 39.
"""

from __future__ import annotations

import re

from processors.errors import ProcessorError

#: Output resolution (dots per inch) of every size in ``specs.json`` unless an upload asks for
#: another (``dpi`` option).
DPI = 300


class InvalidOptionError(ProcessorError):
    """An item option (``size``, ``background``, ``alpha_matting``, ``mode``, ``dpi``,
    ``target_kb``, ``print_sheet``) has no valid meaning."""


def mm_to_px(mm: float, dpi: int = DPI) -> int:
    """Millimetres to pixels at ``dpi`` (rounded to the nearest px)."""
    return round(mm / 25.4 * dpi)


#: Named backgrounds as RGB (the seed's white, blue 67,142,219 and red 215,69,50).
BACKGROUNDS: dict[str, tuple[int, int, int]] = {
    "white": (255, 255, 255),
    "blue": (67, 142, 219),
    "red": (215, 69, 50),
}

_HEX = re.compile(r"^#([0-9A-Fa-f]{6})$")


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
