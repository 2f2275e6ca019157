"""Prometheus metrics of a worker process (served on ``/metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class WorkerMetrics:
    """The worker's metrics in their own registry (so tests can build several).

    Metrics:
        cardstream_results_total{task,status}: results committed.
        cardstream_dead_letters_total{code}: dead letters committed.
        cardstream_minimal_dead_letters_total: dead letters refused for their size (by the
            producer or the broker) and sent in their minimal form instead (code and source).
        cardstream_poll_batch_size: events per poll batch (histogram).
        cardstream_inference_calls_total{task}: batched model calls.
        cardstream_queue_wait_seconds: the event's Kafka timestamp (CreateTime, the producer's
            clock) -> its batch started computing (s); events dead-lettered before their image
            was loaded are not counted.
        cardstream_inference_seconds{task}: one batched processor call (s).
        cardstream_e2e_latency_seconds{task}: the upload's Kafka timestamp -> its result built
            for the transaction (the result's ``timings.total_ms``, s), observed once the
            transaction committed; ``submitted_at`` (the user's clock) is not used.
        cardstream_consumer_lag{partition}: high watermark - position, per assigned partition.
        cardstream_transactions_total{outcome}: committed / aborted / fenced (another instance
            with the same transactional.id took over) / stuck (``send_offsets_to_transaction``
            did not return; the producer was replaced) / unknown_committed
            (``commit_transaction`` kept timing out and the group's committed offsets showed it
            had committed) transactions.
        cardstream_batch_stage_seconds{stage}: where a batch's time goes: ``fill`` (the poll that
            closes the batch), ``compute`` (parse + fetch + decode + inference + PUT, helper
            thread), ``put`` (the PUTs alone), ``handoff`` (compute done -> the loop picks it
            up), ``begin``/``produce``/``send_offsets``/``commit`` (the transaction's calls).
        cardstream_fetch_delay_seconds: an event's Kafka timestamp -> the consumer returned it.
        cardstream_breaker_opened_total: batches put back because their processor failed even
            on a probe image (the worker paused, readiness failed).
        cardstream_trace_context_invalid_total: upload records whose ``traceparent`` header was
            present but unusable (ignored; a new trace started, :mod:`streams.tracing`).
        cardstream_result_reasons_total{task,reason}: reason codes of the results committed
            (``STALE``: answered without compute, its deadline passed; :mod:`streams.deadlines`).
        cardstream_cache_hits_total{task}: results committed from the result cache (no model
            ran; ``cache_hit`` in the result, :mod:`streams.cache`); over
            ``cardstream_results_total`` it is the hit rate.
        cardstream_cache_bytes: bytes the result cache holds (its bound is
            ``CARDSTREAM_CACHE__MAX_BYTES``).
        cardstream_inference_images_total{task}: images the batched model calls ran on (over
            ``cardstream_inference_calls_total``: images per call).
        cardstream_breaker_open: 1 while the processor breaker holds the worker paused, else 0.
        cardstream_committed_offset{partition}: the offset the last transaction committed for
            the partition (its progress; a partition revoked from this worker is dropped).
        cardstream_shadow_diffs_total{task,change}: shadow comparisons committed
            (:mod:`streams.shadow`): ``change`` is ``verdict`` (the status differs),
            ``reasons`` (same status, other reason codes) or ``none``.
        cardstream_shadow_measure{task,measure}: the comparisons' measures (``quad_iou``, 0..1).
        cardstream_shadow_seconds{task}: the shadow model's extra compute per bucket (s).
    """

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        lat = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
        self.results = Counter("cardstream_results", "Results committed", ["task", "status"],
                               registry=r)
        self.dead_letters = Counter("cardstream_dead_letters", "Dead letters committed", ["code"],
                                    registry=r)
        self.minimal_dead_letters = Counter(
            "cardstream_minimal_dead_letters", "Dead letters refused and sent in their minimal "
            "form (code and source only)", registry=r)
        self.batch_size = Histogram("cardstream_poll_batch_size", "Events per poll batch",
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128), registry=r)
        self.inference_calls = Counter("cardstream_inference_calls", "Batched model calls",
                                       ["task"], registry=r)
        self.queue_wait = Histogram("cardstream_queue_wait_seconds",
                                    "Kafka timestamp to batch start",
                                    buckets=lat, registry=r)
        self.inference = Histogram("cardstream_inference_seconds", "One batched processor call",
                                   ["task"], buckets=lat, registry=r)
        self.e2e = Histogram("cardstream_e2e_latency_seconds",
                             "Kafka timestamp to result (committed)",
                             ["task"], buckets=lat, registry=r)
        self.lag = Gauge("cardstream_consumer_lag", "Uploads not yet consumed", ["partition"],
                         registry=r)
        fine = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 10)
        self.stage = Histogram("cardstream_batch_stage", "Seconds per stage of a batch", ["stage"],
                               unit="seconds", buckets=fine, registry=r)
        self.fetch_delay = Histogram("cardstream_fetch_delay_seconds",
                                     "Kafka timestamp to the consumer returning the event",
                                     buckets=fine, registry=r)
        self.store_refusals = Counter(
            "cardstream_store_refusals", "Batches put back because the object store refused a "
            "call in a way no wait clears (missing bucket, denied permission or SSE, quota)",
            ["code"], registry=r)
        self.breaker_opened = Counter("cardstream_breaker_opened", "Batches put back by the "
                                      "processor breaker", registry=r)
        self.trace_context_invalid = Counter(
            "cardstream_trace_context_invalid", "Upload records with a malformed traceparent "
            "header (ignored, a new trace started)", registry=r)
        self.result_reasons = Counter("cardstream_result_reasons", "Reason codes of the results "
                                      "committed", ["task", "reason"], registry=r)
        self.cache_hits = Counter("cardstream_cache_hits", "Results committed from the result "
                                  "cache", ["task"], registry=r)
        self.cache_bytes = Gauge("cardstream_cache_bytes", "Bytes the result cache holds",
                                 registry=r)
        self.inference_images = Counter("cardstream_inference_images", "Images the batched "
                                        "model calls ran on", ["task"], registry=r)
        self.breaker_open = Gauge("cardstream_breaker_open", "1 while the processor breaker "
                                  "holds the worker paused", registry=r)
        self.committed_offset = Gauge("cardstream_committed_offset", "Offset the last "
                                      "transaction committed, per partition", ["partition"],
                                      registry=r)
        self.shadow_diffs = Counter("cardstream_shadow_diffs", "Shadow comparisons committed",
                                    ["task", "change"], registry=r)
        self.shadow_measure = Histogram("cardstream_shadow_measure", "Shadow comparisons' "
                                        "measures (quad_iou...)", ["task", "measure"],
                                        buckets=(0.5, 0.75, 0.9, 0.95, 0.98, 0.99, 1.0),
                                        registry=r)
        self.shadow_seconds = Histogram("cardstream_shadow_seconds", "The shadow model's extra "
                                        "compute per bucket", ["task"], buckets=lat, registry=r)
        self.transactions = Counter("cardstream_transactions", "Kafka transactions", ["outcome"],
                                    registry=r)
        self.redone = Counter("cardstream_redone_events", "Events of failed batches (transaction "
                              "aborted or fenced, MinIO unavailable) put back to be redone",
                              registry=r)
