"""ID-photo outputs: JFIF density, target file size, the 6 x 4 in print sheet."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from PIL import Image
from skimage import data

from processors.idphoto.output import (
    MIN_TARGET_QUALITY,
    encode,
    encode_within,
    jpeg_dpi,
    print_sheet,
)
from processors.idphoto.specs import get_spec

PHOTO = np.ascontiguousarray(cv2.resize(data.astronaut(), (295, 413), interpolation=cv2.INTER_AREA))


@pytest.mark.parametrize("dpi", [300, 600])
def test_the_jpeg_carries_its_dpi(dpi: int) -> None:
    assert jpeg_dpi(encode(PHOTO, 90, dpi)) == (dpi, dpi)
    with Image.open(io.BytesIO(encode(PHOTO, 90, dpi))) as im:
        assert im.info["jfif_unit"] == 1  # dots per inch


def test_target_size_is_met_at_the_highest_quality_that_fits() -> None:
    full = encode_within(PHOTO, 95, 300, None)
    assert full.quality == 95 and full.fits
    target = len(full.data) / 1000 * 0.5
    j = encode_within(PHOTO, 95, 300, target)
    assert j.fits and len(j.data) <= target * 1000
    assert MIN_TARGET_QUALITY <= j.quality < 95
    assert len(encode(PHOTO, j.quality + 1, 300)) > target * 1000  # one step up does not fit
    assert jpeg_dpi(j.data) == (300, 300)


def test_an_impossible_target_says_so() -> None:
    j = encode_within(PHOTO, 95, 300, 1)
    assert not j.fits and j.quality == MIN_TARGET_QUALITY


@pytest.mark.parametrize(("size", "copies"), [("one_inch", 10), ("us_passport", 2),
                                              ("schengen", 8), ("canada_passport", 2)])
def test_print_sheet_holds_as_many_copies_as_fit(size: str, copies: int) -> None:
    spec = get_spec(size)
    photo = np.full((spec.height_px, spec.width_px, 3), 90, np.uint8)
    sheet, n = print_sheet(photo, 300)
    assert sheet.shape == (1200, 1800, 3) and n == copies
    # the copies are there, whole, and nothing else is grey
    assert int((sheet == 90).all(axis=2).sum()) == copies * spec.width_px * spec.height_px
    assert (sheet == 0).all(axis=2).sum() > 0  # cut marks


def test_cut_marks_sit_outside_the_copy() -> None:
    photo = np.full((413, 295, 3), 90, np.uint8)
    sheet, _ = print_sheet(photo, 300)
    grey = (sheet == 90).all(axis=2)
    ys, xs = np.nonzero(grey)
    y0, x0 = ys.min(), xs.min()  # the first copy's top-left corner
    assert grey[y0:y0 + 413, x0:x0 + 295].all()
    black = (sheet == 0).all(axis=2)
    assert black[y0, x0 - 15:x0 - 3].all()  # the horizontal tick left of the corner
    assert black[y0 - 15:y0 - 3, x0].all()  # the vertical tick above it
    assert not black[y0:y0 + 413, x0:x0 + 295].any()  # nothing drawn on the copy


def test_a_photo_larger_than_the_sheet_gives_no_copies() -> None:
    sheet, n = print_sheet(np.zeros((1300, 900, 3), np.uint8), 300)
    assert n == 0 and (sheet == 255).all()
