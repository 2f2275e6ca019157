"""cardstream processors: pure image compute (no Kafka, no MinIO)."""
