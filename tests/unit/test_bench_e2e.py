"""benchmarks.e2e.fixed_start: the part of an end-to-end pass that does not grow with uploads."""

from __future__ import annotations

import pytest

from benchmarks.e2e import fixed_start


@pytest.mark.parametrize(("results", "start"), [
    ([2.0 + 0.5 * k for k in range(9)], 1.5),  # steady 0.5 s per upload after a 2 s first result
    ([1.0, 1.0, 1.0, 5.0], 0.0),  # a burst first, then one slow upload: floored at 0
    ([3.0, 3.0, 3.0], 3.0),  # all at once: the whole pass
    ([0.7], 0.7),
    ([], 0.0),
])
def test_fixed_start(results: list[float], start: float) -> None:
    assert fixed_start(results) == pytest.approx(start)
