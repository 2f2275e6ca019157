"""Benchmarks (``make bench`` -> ``python -m benchmarks.run``); never part of ``make test``.

Every figure is measured in one run on one machine and reported as a ratio or next to the
machine it came from: model-only ceiling, end to end through the real stack, the naive
one-message-at-a-time consumer, the load table and partition scaling (see README.md).
"""
