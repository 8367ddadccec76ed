"""Every run in MLflow (docs/tracking.md): one MLflow run per training run, continued across
preemptions, requeues and restarts, fed from what the launcher already records.

Off unless the spec has ``"tracking": {"mlflow": {...}}`` or the environment has
``MLFLOW_TRACKING_URI``. The launcher talks to the tracking server through MLflow's REST
API with the standard library, on a thread of its own (``tracker.Tracker``): nothing of it
is imported on ``launch``'s way to its first task but this package's two small modules, and
a server that is down or slow costs one console line, never the job.
"""
