"""Monitors the job loop ticks (launcher/job.py): the coordinator's adapter over model_dir
(``coordinator``), the tasks' TF servers asked over gRPC (``liveness``), the whole-job deadline
(``deadline``). Each sees a snapshot of the tasks, never the Job."""
