"""The fault suite's own stack (benchmarks/faults/stack.py): ports outside the ephemeral range."""

from __future__ import annotations

import pytest

from benchmarks.common import BenchError
from benchmarks.faults import stack as st


def test_the_suite_refuses_ports_a_reconnecting_client_could_take() -> None:
    """A client reconnecting to a killed server on a port in the kernel's ephemeral range can
    connect to itself and keep the port (the ``broker_long`` row: Kafka could not bind 49092 on
    its restart)."""
    eph = st.ephemeral_ports()
    own = st.OwnStack()  # the defaults lie below the range
    assert all(p not in eph for ports in own.ports.values() for p in ports)
    with pytest.raises(BenchError, match=r"\[49092\] lie in the kernel's ephemeral range"):
        st.OwnStack(kafka_port=49092)
