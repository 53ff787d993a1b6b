"""The record: MLflow as the only writer of results, the cheap reader, claims and heartbeats."""
