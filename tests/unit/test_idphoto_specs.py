"""The ID-photo specs table (processors/idphoto/specs.json) and its loader."""

from __future__ import annotations

import json

import pytest

from processors.idphoto.sizes import InvalidOptionError
from processors.idphoto.specs import (
    BACKGROUND_RULES,
    SPECS_FILE,
    background_ok,
    get_spec,
    pose_limits,
    specs,
)
from schemas.models import PhotoSize


def test_every_contract_size_has_a_spec_and_no_more() -> None:
    assert set(specs()) == {s.value for s in PhotoSize}


#: The five sizes of sizes.SIZES before issue 39: (width px, height px, target head px, target
#: crown margin px, alpha matting default) at 300 dpi.
BEFORE = {"one_inch": (295, 413, 259.84, 47.24, False), "two_inch": (413, 579, 360.24, 47.24, True),
          "cn_passport": (390, 567, 360.24, 47.24, True),
          "us_passport": (600, 600, 356.25, 64.96, True),
          "schengen": (413, 531, 401.57, 47.24, True)}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_the_sizes_before_issue_39_frame_the_same(name: str) -> None:
    new = get_spec(name)
    w, h, head, crown, am = BEFORE[name]
    assert (new.width_px, new.height_px, new.alpha_matting) == (w, h, am)
    assert new.target_head_px == pytest.approx(head, abs=0.01)
    assert new.target_crown_px == pytest.approx(crown, abs=0.01)


@pytest.mark.parametrize("name", sorted(s.value for s in PhotoSize))
def test_each_spec_is_sourced_and_consistent(name: str) -> None:
    s = get_spec(name)
    assert s.sources and all(len(t) > 20 for t in s.sources)
    assert s.package_differences
    assert 0 < s.head_min_mm < s.head_max_mm < s.height_mm
    assert 0 <= s.crown_min_mm < s.crown_max_mm
    assert s.crown_max_mm + s.head_max_mm < s.height_mm
    if s.eye_line_mm:
        assert 0 < s.eye_line_mm[0] < s.eye_line_mm[1] < s.height_mm
    assert s.background_rule in BACKGROUND_RULES
    assert s.dpi == 300


def test_official_figures() -> None:
    us = get_spec("us_passport")
    assert (us.width_px, us.height_px) == (600, 600)
    assert (us.head_min_mm, us.head_max_mm) == pytest.approx((25.4, 34.925))  # 1 - 1 3/8 in
    assert us.eye_line_mm == pytest.approx((28.575, 34.925))  # 1 1/8 - 1 3/8 in
    assert not us.replacement_allowed
    uk = get_spec("uk_passport")
    assert (uk.head_min_mm, uk.head_max_mm) == (29, 34) and uk.crown_margin_mm is None
    ca = get_spec("canada_passport")
    assert (ca.width_mm, ca.height_mm, ca.head_min_mm, ca.head_max_mm) == (50, 70, 31, 36)
    assert not ca.colour_required  # IRCC accepts black and white
    cn = get_spec("cn_passport")
    assert cn.crown_margin_mm == (3, 5) and cn.chin_margin_min_mm == 7
    jp = get_spec("japan_passport")
    assert jp.crown_margin_mm == (2, 6) and (jp.head_min_mm, jp.head_max_mm) == (32, 36)
    assert get_spec("one_inch").replacement_allowed and not get_spec("one_inch").icao_rules


def test_pose_limits_are_iso_19794_5() -> None:
    lim = pose_limits()
    assert (lim.roll_max_deg, lim.yaw_max_deg, lim.pitch_max_deg) == (8, 5, 5)
    assert lim.centre_tolerance == 0.05 and "19794-5" in lim.source


def test_unknown_size_names_the_known_ones() -> None:
    with pytest.raises(InvalidOptionError, match="unknown size 'xx'.*us_passport"):
        get_spec("xx")


def test_background_rules() -> None:
    assert background_ok("white", (250, 250, 248))
    assert not background_ok("white", (67, 142, 219))  # blue
    assert not background_ok("white", (170, 170, 170))  # mid grey
    assert background_ok("light", (205, 205, 210))  # light grey
    assert not background_ok("light", (215, 69, 50))  # red
    assert background_ok("any", (215, 69, 50))


def test_the_table_credits_the_package_it_was_compared_with() -> None:
    raw = json.loads(SPECS_FILE.read_text(encoding="utf-8"))
    assert "MIT" in raw["_licence_note"] and "IDPhotoSnap" in raw["_licence_note"]
