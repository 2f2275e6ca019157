"""The naive baseline: one message at a time, the seed's "before".

For every upload, in order: fetch one record, GET its image, decode it, ONE inference call with a
batch of one (``process_batch([item])``), PUT the outputs, then produce the result and commit the
offset in a Kafka transaction of its own. Same processors, same clients (confluent-kafka, MinIO),
same exactly-once guarantee as the worker — only the batching and the overlap of I/O are missing.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import TopicPartition

from benchmarks.common import epoch_ms
from processors.base import Item, Processor
from processors.decode import probe_image
from processors.registry import spec
from schemas import codec
from schemas import formats as F
from schemas.models import ModelRef, ObjectRef, SourceRef, Timings, VerificationResult
from streams.kafka import consumer, transactional_producer
from streams.settings import Settings
from streams.storage import Storage
from streams.worker import input_tag, object_key


class NaiveConsumer:
    """A one-message-at-a-time exactly-once consumer (benchmark baseline, not for production).

    Args:
        s: settings (topics, buckets, decode limits); its group id is used.
        task: the task served (a registered task).
        processor: the processor serving it (already warmed up).

    Errors are not isolated: bench inputs are valid, so any exception ends :meth:`run`.
    """

    def __init__(self, s: Settings, task: str, processor: Processor) -> None:
        self.settings = s
        self.task = task
        self.proc = processor
        self.storage = Storage(s.s3)
        self._stop = threading.Event()
        self.done = 0

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current message."""
        self._stop.set()

    def run(self, max_messages: int, max_seconds: float) -> int:
        """Consume until ``max_messages`` results are committed, :meth:`stop`, or ``max_seconds``.

        Returns:
            The number of committed results.
        """
        k = self.settings.kafka
        c = consumer(k, k.group_id, **{"session.timeout.ms": 10_000,
                                       "heartbeat.interval.ms": 1_000})
        p = transactional_producer(k, f"{k.transactional_id_prefix}-naive")
        c.subscribe([k.uploads_topic])
        deadline = time.monotonic() + max_seconds
        try:
            while (self.done < max_messages and not self._stop.is_set()
                   and time.monotonic() < deadline):
                m = c.poll(0.05)
                if m is None or m.error() is not None:
                    continue
                result = self._one(m)
                key, value, headers = codec.encode_result(result)
                p.begin_transaction()
                p.produce(k.results_topic, key=key, value=value, headers=headers)
                p.send_offsets_to_transaction(
                    [TopicPartition(m.topic(), m.partition(), m.offset() + 1)],
                    c.consumer_group_metadata(), 30)
                p.commit_transaction(30)
                self.done += 1
        finally:
            c.close()
            p.flush(10)
        return self.done

    def _one(self, m) -> VerificationResult:  # noqa: ANN001 (confluent_kafka.Message)
        s = self.settings
        ev = codec.decode_upload(m.key(), m.value(), m.headers(),
                                 allowed_buckets=s.s3.allowed_buckets,
                                 inline_max_bytes=s.worker.inline_max_bytes)
        data = codec.inline_bytes(ev)
        if data is None:
            data = self.storage.get(ev.image.ref.bucket, ev.image.ref.key,
                                    max_bytes=s.decode.max_bytes)
        image = probe_image(data, s.decode)
        task = spec(self.task)
        options = task.item_options(ev.options)
        o = self.proc.process_batch([Item(ev.upload_id, image, options)])[0]
        info = self.proc.model
        refs = {}
        tag = input_tag(data, options)
        for a in o.artifacts:
            st = self.storage.put(s.s3.results_bucket,
                                  object_key(self.task, info.version, ev.upload_id, tag, a.name,
                                             a.ext),
                                  a.data, a.content_type)
            refs[a.name] = ObjectRef(bucket=st.bucket, key=st.key, size_bytes=st.size_bytes,
                                     sha256=st.sha256, content_type=a.content_type,
                                     width=a.width, height=a.height)
        processed_at = F.utc_now_rfc3339()
        total = max(epoch_ms(processed_at) - epoch_ms(ev.submitted_at), 0.0)
        return VerificationResult(
            upload_id=ev.upload_id, task=ev.task, status=o.status, reasons=tuple(o.reasons),
            model=ModelRef(name=info.name, version=info.version, provider=info.provider),
            timings=Timings(queue_ms=round(max(total - o.inference_ms, 0.0), 3), batch_size=1,
                            inference_ms=round(o.inference_ms, 3), total_ms=round(total, 3)),
            source=SourceRef(topic=m.topic(), partition=m.partition(), offset=m.offset()),
            processed_at=processed_at, submitted_at=ev.submitted_at,
            **{self.task: task.payload(o.payload, refs)})
