"""Deadlines: whether an upload is still worth computing when its batch forms.

An upload is stale when the earlier of two instants has passed at the batch's start (``now``):

- its own ``deadline`` (``UploadEvent.deadline``, RFC 3339; any past instant counts, 1970
  included; far in the future, it never expires; an unparsable value never gets here: the
  contract refuses it, ``SCHEMA_INVALID``);
- its record's Kafka timestamp plus its task's maximum age (``DeadlineSettings.max_age_s``;
  none by default), the age bounded as every age in the worker is (:func:`streams.kafka.age_ms`:
  a producer clock ahead gives 0, a timestamp of 1970 gives 7 days).

A stale upload is answered ``rejected`` with ``STALE`` without being fetched or computed. A
replay or backfill applies no deadline (it re-processes old uploads on purpose).
"""

from __future__ import annotations

from collections.abc import Mapping

from schemas import formats as F
from schemas.models import UploadEvent
from streams.kafka import Timestamped, age_ms


def deadline_ms(ev: UploadEvent) -> float | None:
    """The upload's own ``deadline`` as epoch ms, None without one."""
    if ev.deadline is None:
        return None
    return F.parse_rfc3339(ev.deadline).timestamp() * 1000.0


def is_stale(ev: UploadEvent, m: Timestamped, now_ms: float,
             max_age_s: Mapping[str, float]) -> bool:
    """Whether ``ev`` (read from record ``m``) is past its deadline or its task's maximum age
    (s, by task name) at ``now_ms`` (epoch ms)."""
    own = deadline_ms(ev)
    if own is not None and own <= now_ms:
        return True
    limit = max_age_s.get(str(ev.task))
    return limit is not None and age_ms(m, now_ms) > limit * 1000.0
