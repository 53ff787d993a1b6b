"""MLflow's settings for the suite, as environment defaults: a value the user set wins.

:func:`configure_mlflow` applies them. Every entry point calls it before MLflow is imported
(the command line and a warm cell in :func:`benchmarks.running.console.prepare_process`, the
warm launcher, the Python API), since MLflow reads its logging level then; opening a store
calls it again, for whoever drives the store directly (its HTTP settings are read per
request). Nothing here imports MLflow.
"""

from __future__ import annotations

import os

MLFLOW_DEFAULTS = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",  # no bars in reports
    # MLflow's own progress notes ("Creating initial MLflow database tables...") are not
    # ours to show; its warnings and errors still are.
    "MLFLOW_LOGGING_LEVEL": "WARNING",
    # MLflow's own HTTP retries would hold one call for minutes (7 tries, backoff up to
    # 2 min); kept short, so that RetryingClient's patience decides how long a run waits
    # for a server.
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}


def configure_mlflow() -> None:
    """Set :data:`MLFLOW_DEFAULTS` where the environment does not say otherwise."""
    for name, value in MLFLOW_DEFAULTS.items():
        os.environ.setdefault(name, value)
