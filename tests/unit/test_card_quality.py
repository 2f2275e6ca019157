"""Capture-quality measures and profiles (processors/card/quality.py, policy.py)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from processors.card.mrz.icao import Format
from processors.card.mrz.read import NOT_FOUND, MrzRead
from processors.card.policy import PROFILES, VerifySettings
from processors.card.quality import (
    PORTRAIT_ZONE,
    Quality,
    colourfulness,
    effective_dpi,
    frame_margin,
    measure,
    tilt_degrees,
)
from processors.card.rectify import glare_threshold, saturated_fraction
from processors.card.training.documents import camera_quad
from processors.card.verify import Verification
from schemas.reasons import ReasonCode

ID3 = (125.0, 88.0)


def test_effective_dpi_of_a_frontal_card():
    # ID-1 at exactly 300 dpi: 85.60 mm = 1011.02 px
    w, h = 85.60 / 25.4 * 300, 53.98 / 25.4 * 300
    quad = np.array([[100, 50], [100 + w, 50], [100 + w, 50 + h], [100, 50 + h]])
    assert effective_dpi(quad, (85.60, 53.98)) == pytest.approx(300.0, rel=1e-9)


@pytest.mark.parametrize("tilt", [0.0, 10.0, 25.0, 40.0])
def test_tilt_from_the_homography_matches_the_camera(tilt):
    rng = np.random.default_rng(int(tilt))
    size = (1600, 1200)
    for _ in range(5):
        quad = None
        while quad is None:
            quad = camera_quad(rng, size, ID3, 0.7, tilt, rng.uniform(-20, 20),
                               float(np.hypot(*size) * rng.uniform(0.55, 0.95)))
        assert tilt_degrees(quad, ID3, size) == pytest.approx(tilt, abs=0.05)


def test_tilt_of_a_frontal_card_is_zero_whatever_the_corner_order():
    quad = np.array([[300.0, 200], [1300, 200], [1300, 904], [300, 904]])
    assert tilt_degrees(quad, ID3, (1600, 1200)) < 0.5
    assert tilt_degrees(np.roll(quad, 2, axis=0), ID3, (1600, 1200)) < 0.5


def test_frame_margin():
    quad = np.array([[30.0, 60], [900, 60], [900, 500], [30, 500]])
    assert frame_margin(quad, (1000, 600)) == pytest.approx(30 / 600)
    assert frame_margin(quad - [40, 0], (1000, 600)) < 0


def test_colourfulness_of_a_noisy_grey_copy_is_low():
    """Per-pixel chroma noise (a phone's sensor, JPEG) averages out on the 64 px copy; a card
    with colour does not."""
    rng = np.random.default_rng(0)
    colour = cv2.GaussianBlur(rng.integers(0, 255, (320, 512, 3)).astype(np.uint8), (0, 0), 12)
    colour = cv2.normalize(colour, None, 0, 255, cv2.NORM_MINMAX)
    grey = cv2.cvtColor(cv2.cvtColor(colour, cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)
    noisy = np.clip(grey + rng.normal(0, 6, grey.shape), 0, 255).astype(np.uint8)
    assert colourfulness(grey) == pytest.approx(0.0, abs=1e-6)
    assert colourfulness(noisy) < 1.5
    assert colourfulness(colour) > 3.0 > colourfulness(noisy)


def test_a_colour_portrait_on_a_white_page_is_no_photocopy():
    """ICAO Doc 9303's specimen pages print black on white around a colour portrait: over the
    page their chroma's 60th percentile is 0, so they were PHOTOCOPY; the portrait zone's
    measure (on the same 64 px copy) keeps them colourful once a face is found there. A grey
    copy of the same page, with the noise of a dim photo, stays near 0 both ways; one with a
    thumb over the zone (a second trial: colourfulness 64-80 when the zone counted without a
    face) stays a copy when no face is found."""
    rng = np.random.default_rng(5)
    page = _page(245)
    x0, y0, x1, y1 = PORTRAIT_ZONE
    h, w = page.shape[:2]
    portrait = cv2.GaussianBlur(rng.integers(0, 255, (int((y1 - y0) * h * 0.8),
                                                      int((x1 - x0) * w * 0.8), 3)).astype(
        np.uint8), (0, 0), 4)
    portrait = cv2.normalize(portrait, None, 0, 255, cv2.NORM_MINMAX)
    py, px = int(y0 * h) + 10, int(x0 * w) + 10
    page[py:py + portrait.shape[0], px:px + portrait.shape[1]] = portrait
    assert colourfulness(page) < 1.0 < 3.0 < colourfulness(page, PORTRAIT_ZONE)
    grey = cv2.cvtColor(cv2.cvtColor(page, cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)
    noisy = np.clip(grey * 0.5 + rng.normal(0, 8, grey.shape), 0, 255).astype(np.uint8)
    assert colourfulness(noisy, PORTRAIT_ZONE) < 3.0  # the normal profile's bound
    quad = np.array([[100.0, 100], [1100, 100], [1100, 804], [100, 804]])
    q = measure(quad, (1600, 1200), ID3, "passport", page, 250)
    assert q.colourfulness < 1.0  # the zone counts only once a face is found there
    assert q.with_portrait(True).colourfulness > 3.0
    assert q.with_portrait(True).portrait is True
    # a grey copy with a thumb (skin colour) over the portrait zone: no face, still a copy
    thumb = grey.copy()
    cv2.ellipse(thumb, (int(0.2 * w), int(0.6 * h)), (75, 125), 0, 0, 360, (90, 130, 200), -1)
    t = measure(quad, (1600, 1200), ID3, "passport", thumb, 250)
    assert t.portrait_colourfulness > 3.0 > t.with_portrait(False).colourfulness


def test_measure_on_a_thumbnail():
    thumb = np.full((360, 512, 3), 180, np.uint8)
    thumb[-40:, 100:400] = 255  # glare over the MRZ band only
    quad = np.array([[100.0, 100], [1100, 100], [1100, 804], [100, 804]])
    q = measure(quad, (1600, 1200), ID3, "passport", thumb, 250)
    assert q.brightness == pytest.approx(thumb.mean(), abs=0.5)
    assert q.glare == pytest.approx(40 * 300 / (360 * 512), rel=0.02)
    assert q.glare_mrz > 0.3 and q.glare_portrait == 0.0
    assert q.colourfulness == pytest.approx(0.0, abs=1e-6)
    assert q.dpi == pytest.approx(effective_dpi(quad, ID3))


def _page(paper: int) -> np.ndarray:
    """A 512 px page of ``paper`` grey with 12 lines of dark print (a specimen data page)."""
    page = np.full((360, 512, 3), paper, np.uint8)
    for y in range(30, 340, 26):
        for x in range(20, 480, 14):
            cv2.rectangle(page, (x, y), (x + 8, y + 14), (40, 40, 40), 2)
    return page


def test_a_saturated_paper_is_no_glare():
    """A white page scanned or exported to 255 is saturated all over its paper: no glare can be
    told from it (0, where the saturated share is 0.6); a page whose paper sits at 225 still
    shows a saturated spot as glare, and so does a dark card with one (its light ground is the
    spot alone, under PAPER_MIN_SHARE of it)."""
    quad = np.array([[100.0, 100], [1100, 100], [1100, 804], [100, 804]])
    white = _page(255)
    assert saturated_fraction(white, 250, 512) > 0.6
    q = measure(quad, (1600, 1200), ID3, "passport", white, 250)
    assert q.glare == q.glare_mrz == q.glare_portrait == 0.0
    for paper in (225, 60):
        spot = _page(paper)
        cv2.circle(spot, (300, 300), 60, (255, 255, 255), -1)
        q = measure(quad, (1600, 1200), ID3, "passport", spot, 250)
        assert q.glare == pytest.approx(saturated_fraction(spot, 250, 512)) and q.glare > 0.04
        assert q.glare_mrz > 0.1


def _lined_page(paper: int) -> np.ndarray:
    """:func:`_page` with fine security lines 6 levels under its paper every 3 px (a specimen
    data page printed on a fine pattern): the plain ground's 10th percentile is under the paper,
    its median at it."""
    page = _page(paper)
    light = page[..., 0] == paper
    lines = np.zeros(light.shape, bool)
    lines[::3] = True
    page[light & lines] = paper - 6
    return page


def _noisy(page: np.ndarray, sigma: float, seed: int = 3) -> np.ndarray:
    """``page`` with Gaussian noise (a JPEG's or a scanner's) of ``sigma`` levels."""
    rng = np.random.default_rng(seed)
    return np.clip(page + rng.normal(0, sigma, page.shape), 0, 255).astype(np.uint8)


def _spot(page: np.ndarray) -> np.ndarray:
    """``page`` with a saturated glare spot over the zone's lines (the bottom band)."""
    out = page.copy()
    cv2.circle(out, (256, 330), 70, (255, 255, 255), -1)
    return out


def test_glare_on_a_paper_near_the_level_counts_from_above_the_paper():
    """A fresh user's white specimen pages at paper 248-255 (fine security lines, a JPEG's
    noise) were GLARE and GLARE_ON_MRZ with nothing on them: noise put part of a paper just
    under the level over it, and lines put the 10th percentile under a paper at it. On such a
    paper (one narrow band of light) glare counts from its median plus GLARE_ABOVE_PAPER: the
    clean pages read no glare, and a spot of glare over the zone still reads as glare while
    that is at most 255 (these pages' median sits a level or two under their paper); on a paper
    at 255 a spot cannot be told from it and reads 0."""
    quad = np.array([[100.0, 100], [1100, 100], [1100, 804], [100, 804]])

    def q(page):
        return measure(quad, (1600, 1200), ID3, "passport", page, 250)

    for paper in (248, 249, 250, 251, 252, 255):
        clean = _noisy(_lined_page(paper), 1.0)
        assert q(clean).glare_mrz < 0.01 and q(clean).glare < 0.01, paper
    for paper in (240, 246, 248, 249, 250, 251, 252):
        spotted = _noisy(_spot(_lined_page(paper)), 1.0)
        assert q(spotted).glare_mrz > 0.1 and q(spotted).glare > 0.03, paper
    assert q(_noisy(_spot(_lined_page(255)), 1.0)).glare == 0.0
    assert glare_threshold(_lined_page(240), 250, 512) == 250
    assert glare_threshold(_lined_page(249), 250, 512) == 253
    assert glare_threshold(_lined_page(255), 250, 512) is None


def _q(**kw) -> Quality:
    base = {"dpi": 250.0, "tilt_deg": 5.0, "margin": 0.1, "brightness": 150.0, "contrast": 40.0,
            "focus": 300.0, "glare": 0.0, "glare_mrz": 0.0, "glare_portrait": 0.0,
            "colourfulness": 30.0, "portrait": True}
    return Quality(**{**base, **kw})


@pytest.mark.parametrize("kw,code", [
    ({"dpi": 120.0}, ReasonCode.LOW_RESOLUTION), ({"tilt_deg": 40.0}, ReasonCode.TOO_OBLIQUE),
    ({"brightness": 30.0}, ReasonCode.TOO_DARK), ({"brightness": 240.0}, ReasonCode.TOO_BRIGHT),
    ({"colourfulness": 1.0}, ReasonCode.PHOTOCOPY), ({"portrait": False}, ReasonCode.NO_PORTRAIT),
    ({"glare_mrz": 0.2}, ReasonCode.GLARE_ON_MRZ)])
def test_profiles_judge_each_measure(kw, code):
    normal = PROFILES["normal"]
    assert normal.findings(_q(**kw), mrz_zone=True) == [code]
    assert normal.findings(_q(), mrz_zone=True) == []
    assert code in PROFILES["strict"].reject
    assert not normal.reject and not PROFILES["relaxed"].reject


@pytest.mark.parametrize("env", [
    {"CARDSTREAM_CARD__VERIFY__PROFILES__STRICT__MIN_DPI": "250"},
    {"CARDSTREAM_CARD__VERIFY__PROFILES": '{"strict": {"min_dpi": 250}}'}])
def test_one_overridden_bound_keeps_the_rest_of_the_profiles(monkeypatch, env):
    """A fresh user's override of one bound replaced the whole dict: ``normal`` and ``relaxed``
    were gone (every found card then failed with INTERNAL_ERROR) and ``strict`` rejected
    nothing. The override now changes that bound only."""
    from streams.settings import load_settings

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    verify = load_settings().card.verify
    assert set(verify.profiles) == set(PROFILES)
    assert verify.profiles["strict"] == PROFILES["strict"].model_copy(update={"min_dpi": 250.0})
    assert verify.profiles["strict"].reject == PROFILES["strict"].reject
    for name in PROFILES:
        assert verify.profile_for(name) == (name, verify.profiles[name])
    assert verify.profile_for(None) == ("normal", PROFILES["normal"])


@pytest.mark.parametrize(("value", "said"), [
    ('{"lax": {"min_dpi": 1}}', "unknown profile lax"), ('{"strict": 7}', "valid dictionary"),
    ('{"strict": {"min_dpi": 250}', "CARDSTREAM_CARD__VERIFY__PROFILES: not a JSON object"),
    ("nope", "a CARDSTREAM_CARD__\\* setting: not a JSON object")])
def test_a_profile_that_is_not_shipped_is_refused_at_start_up(monkeypatch, value, said):
    from streams.errors import SettingsError
    from streams.settings import load_settings

    monkeypatch.setenv("CARDSTREAM_CARD__VERIFY__PROFILES", value)
    with pytest.raises(SettingsError, match=said):
        load_settings()


@pytest.mark.parametrize(("env", "said"), [
    ({"CARDSTREAM_CARD__VERIFY__PROFILES__STRICT__MIN_DIP": "250"},
     "(?i)PROFILES__STRICT__MIN_DIP: Extra inputs are not permitted"),
    ({"CARDSTREAM_CARD__VERIFY__PROFILES__NORMAL__MIN_DPI": "inf"},
     "(?i)NORMAL__MIN_DPI: Input should be a finite number"),
    ({"CARDSTREAM_CARD__VERIFY__PROFILES__RELAXED__MAX_TILT_DEG": "nan"},
     "(?i)RELAXED__MAX_TILT_DEG: Input should be a finite number"),
    ({"CARDSTREAM_CARD__VERIFY__PROFILES__NORMAL__MIN_BRIGHTNESS": "240"},
     "min_brightness 240.0 is above max_brightness 230.0"),
    ({"CARDSTREAM_CARD__VERIFY__PROFILES": '{"strict": {"max_brightness": 50}}'},
     "min_brightness 60.0 is above max_brightness 50.0")])
def test_a_bound_misspelt_not_finite_or_an_empty_brightness_range_is_refused(monkeypatch, env,
                                                                            said):
    """A second fresh user's trial: a misspelt bound was ignored (the shipped one stayed), an
    infinite ``min_dpi`` took every card for LOW_RESOLUTION, and a ``min_brightness`` above
    ``max_brightness`` made every card TOO_DARK or TOO_BRIGHT; all were taken at start-up."""
    from streams.errors import SettingsError
    from streams.settings import load_settings

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SettingsError, match=said):
        load_settings()


def test_glare_on_mrz_only_counts_where_there_is_a_zone():
    assert PROFILES["normal"].findings(_q(glare_mrz=0.5), mrz_zone=False) == []


def test_a_page_that_must_carry_a_zone_and_shows_none_is_mrz_missing():
    """An ID-3 page (``zone_expected``) with no zone found earns MRZ_MISSING (annotating under
    ``normal``, rejecting under ``strict``); an ID-1 card with none, or a page whose zone was
    found but did not read, does not."""
    unread = MrzRead(found=True, format=Format.TD3, reasons=(ReasonCode.MRZ_UNREADABLE,))
    page = Verification(_q(), NOT_FOUND, zone_expected=True)
    assert page.reasons(PROFILES["normal"]) == [ReasonCode.MRZ_MISSING]
    assert ReasonCode.MRZ_MISSING in PROFILES["strict"].reject
    assert ReasonCode.MRZ_MISSING not in PROFILES["normal"].reject
    assert Verification(_q(), NOT_FOUND, zone_expected=False).reasons(PROFILES["normal"]) == []
    assert Verification(_q(), unread, zone_expected=True).reasons(PROFILES["normal"]) == [
        ReasonCode.MRZ_UNREADABLE]
    assert Verification(_q(), None, zone_expected=True).reasons(PROFILES["normal"]) == []


def test_profile_bounds_tighten_from_relaxed_to_strict():
    r, n, s = (PROFILES[k] for k in ("relaxed", "normal", "strict"))
    assert r.min_dpi < n.min_dpi < s.min_dpi
    assert r.max_tilt_deg > n.max_tilt_deg > s.max_tilt_deg
    assert PROFILES["relaxed"].findings(_q(dpi=130.0), True) == []
    assert PROFILES["strict"].findings(_q(dpi=190.0), True) == [ReasonCode.LOW_RESOLUTION]


def test_profile_for_an_upload():
    v = VerifySettings()
    assert v.profile_for(None)[0] == "normal"
    assert v.profile_for("strict") == ("strict", PROFILES["strict"])
    assert v.mrz_values_allowed is False
