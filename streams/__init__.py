"""cardstream streams: all Kafka/MinIO I/O, the worker loop and the CLI."""
