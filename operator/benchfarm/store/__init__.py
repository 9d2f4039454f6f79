"""Artifacts in S3 (MinIO): idempotent keys under <namespace>/<run>/<uid>/."""
