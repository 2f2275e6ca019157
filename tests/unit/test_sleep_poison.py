"""The sleep test processor plays a model runtime's failures on marked images (POISON_SIZES)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from processors.base import Item
from processors.registry import stand_in
from processors.sleep import POISON_SIZES


def _item(kind: str | None) -> Item:
    hw = next((s for s, k in POISON_SIZES.items() if k == kind), (96, 128))
    return Item.from_array("u1", np.zeros((*hw, 3), np.uint8))


def test_plain_images_are_accepted_and_marked_ones_raise_or_hang() -> None:
    p = stand_in("card", call_ms=1.0, item_ms=0.0, hang_s=0.3)
    assert [str(o.status) for o in p.process_batch([_item(None), _item(None)])] == ["accepted"] * 2
    with pytest.raises(RuntimeError, match="poison item"):
        p.process_batch([_item(None), _item("raise")])
    t0 = time.perf_counter()
    (o,) = p.process_batch([_item("hang")])
    assert time.perf_counter() - t0 >= 0.3 and str(o.status) == "accepted"


def test_a_crash_image_kills_the_process_with_sigsegv() -> None:
    code = ("import numpy as np; from processors.base import Item; "
            "from processors.registry import stand_in; from processors.sleep import POISON_SIZES; "
            "hw = [s for s, k in POISON_SIZES.items() if k == 'crash'][0]; "
            "stand_in('card').process_batch([Item.from_array('u', np.zeros((*hw, 3), np.uint8))])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=False)
    assert r.returncode == -signal.SIGSEGV, r.stderr[-500:]
