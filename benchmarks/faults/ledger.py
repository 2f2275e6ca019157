"""The fault suite's accounting: what was produced, what came out, what was lost or doubled, and
the longest partition stall after a fault ended.

Identity is the uploads-topic record, ``(partition, offset)``: every result and dead letter names
its source record (``source.partition`` / ``source.offset``), also for poison records whose
upload id cannot be read. Times are epoch seconds (``time.time()``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Produced:
    """One uploads-topic record the broker acknowledged.

    Attributes:
        partition / offset: where it was written.
        t: when its delivery report arrived (epoch s).
        kind: ``good`` or the poison kind (``benchmarks.faults.poison.KINDS``).
    """

    partition: int
    offset: int
    t: float
    kind: str = "good"


@dataclass(frozen=True, slots=True)
class Output:
    """One committed result or dead letter as a read_committed consumer received it.

    Attributes:
        partition / offset: its source record on the uploads topic.
        t: when it was received (epoch s).
        kind: ``result`` or ``dead_letter``.
        code: the result's status (``accepted``...) or the dead letter's ``error_code``.
    """

    partition: int
    offset: int
    t: float
    kind: str
    code: str = ""


def max_stall(produced: Sequence[Produced], outputs: Sequence[Output], since: float,
              until: float) -> tuple[float, int | None]:
    """The longest time in ``[since, until]`` that a partition had records produced and not yet
    accounted for while none of them was (a first output for a record is progress; duplicates
    are not).

    Per partition the clock runs from ``since`` (or from when work arrives at an idle partition)
    to the next first output; a partition still holding unaccounted records at ``until`` stalls
    until ``until``.

    Returns:
        ``(seconds, partition)``: the longest stall (s, 0.0 when none) and its partition (None
        when none).
    """
    first: dict[tuple[int, int], float] = {}
    for o in sorted(outputs, key=lambda o: o.t):
        first.setdefault((o.partition, o.offset), o.t)
    events: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for p in produced:
        events[p.partition].append((p.t, +1))
        t_out = first.get((p.partition, p.offset))
        if t_out is not None:
            events[p.partition].append((t_out, -1))
    worst, where = 0.0, None
    for part, evs in events.items():
        evs.sort(key=lambda e: (e[0], -e[1]))  # an ack before its own output at the same instant
        pending = sum(d for t, d in evs if t <= since)
        last = since
        for t, d in evs:
            if t <= since:
                continue
            if t > until:
                break
            if d < 0:
                if pending > 0 and t - last > worst:
                    worst, where = t - last, part
                last = t
            elif pending == 0:
                last = t
            pending += d
        if pending > 0 and until - last > worst:
            worst, where = until - last, part
    return round(worst, 1), where


def tally(produced: Sequence[Produced], outputs: Iterable[Output], since: float,
          until: float) -> dict[str, object]:
    """The issue's row for one fault.

    Args:
        produced: every acknowledged uploads-topic record of the fault's run.
        outputs: committed results and dead letters read back (those of other records are
            left out).
        since: when the fault ended (epoch s): stalls are measured from here.
        until: when observation stopped (epoch s).

    Returns:
        ``uploads``, ``results``, ``dead_letters``, ``lost`` (records with neither),
        ``duplicates`` (outputs beyond the first of a record), ``max_stall_s`` and
        ``stalled_partition``, ``outcomes`` (``kind -> {code: count}`` of the first output of
        each record, ``lost`` for none).
    """
    keys = {(p.partition, p.offset): p for p in produced}
    outs = [o for o in outputs if (o.partition, o.offset) in keys]
    per = Counter((o.partition, o.offset) for o in outs)
    first: dict[tuple[int, int], Output] = {}
    for o in sorted(outs, key=lambda o: o.t):
        first.setdefault((o.partition, o.offset), o)
    outcomes: dict[str, Counter] = defaultdict(Counter)
    for k, p in keys.items():
        o = first.get(k)
        outcomes[p.kind][o.code if o is not None else "lost"] += 1
    stall, part = max_stall(produced, outs, since, until)
    return {
        "uploads": len(keys),
        "results": sum(1 for o in outs if o.kind == "result"),
        "dead_letters": sum(1 for o in outs if o.kind == "dead_letter"),
        "lost": sum(1 for k in keys if k not in per),
        "duplicates": sum(n - 1 for n in per.values()),
        "max_stall_s": stall,
        "stalled_partition": part,
        "outcomes": {k: dict(v) for k, v in sorted(outcomes.items())},
    }
