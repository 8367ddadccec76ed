"""`launch status RUN --json`: the run as one JSON document a program can read (a
scheduler, a notebook, CI), published as cluster_specs/status.schema.json.

Built from the run directory alone: ``state.json`` (the state as seen now, the progress
the launcher recorded last: step, rate, ETA, newest evaluation with its metrics; the
lease; every task's row) and, once the run ended, ``summary.json`` (the verdict). Fields
the run has no value for are null, never left out.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

SCHEMA_ID = "https://tfcluster.dev/schemas/status.schema.json"
DOC_VERSION = 1
PREEMPTION_FIELDS = ("step_reached", "step_saved", "steps_lost")


def status_document(state: dict, run_dir: str, now_state: str, note: str | None
                    ) -> dict[str, Any]:
    """The document (cluster_specs/status.schema.json) of a run: ``state`` its state.json,
    ``now_state``/``note`` the state as seen now (``current_state``)."""
    summary = _summary(run_dir)
    found = state.get("progress")
    progress: dict[str, Any] = found if isinstance(found, dict) else {}
    step = state.get("step")
    if step is None:
        step = progress.get("step")
    live = now_state in ("starting", "queued", "running")
    return {
        "$schema": SCHEMA_ID, "version": DOC_VERSION,
        "run_id": state["run_id"], "name": state["name"], "backend": state["backend"],
        "run_dir": state.get("run_dir") or os.path.abspath(run_dir),
        "state": now_state, "note": note,
        "attempt": state.get("attempt") or 0,
        "started": state.get("started"), "ended": state.get("ended"),
        "duration": _duration(state, live),
        "verdict": None if live else _verdict(state, summary),
        "step": step, "latest_step": progress.get("latest_step", step),
        "step_source": progress.get("step_source"), "step_age": step_age(progress),
        "max_steps": state.get("max_steps"), "checkpoint": state.get("checkpoint"),
        "rate": progress.get("rate") if live else None,
        "eta": _eta(progress) if live else None,
        "progress_at": progress.get("at"),
        "evaluation": _evaluation(progress, summary),
        "restarts": state.get("restarts") or 0,
        "preemption": _preemption(state, summary),
        "lease": _lease(state.get("lease"), now_state == "lost"),
        "mlflow": tracking_link(state),
        "tasks": [_task(t) for t in state.get("tasks") or []],
    }


def step_age(progress: dict, now: float | None = None) -> float | None:
    """Seconds since the freshest step (``latest_step``) was seen: its age when the
    launcher recorded it, plus the time since (``now``: wall clock, default the time)."""
    age, at = progress.get("step_age"), progress.get("at")
    if not isinstance(age, (int, float)) or not isinstance(at, (int, float)):
        return None
    return round(max(0.0, age + (time.time() if now is None else now) - at), 1)


def _summary(run_dir: str) -> dict:
    """summary.json, or {} while the run goes on (or when it cannot be read)."""
    try:
        with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _duration(state: dict, live: bool) -> float | None:
    start = state.get("started")
    if not start:
        return None
    end = time.time() if live else state.get("ended") or start
    return round(max(0.0, end - start), 3)


def _verdict(state: dict, summary: dict) -> dict[str, Any]:
    """How the run ended: the launcher's exit status and why, and, from summary.json,
    what became of training and of the evaluation."""
    status = state.get("status")
    return {"status": status if isinstance(status, int) else summary.get("status"),
            "reason": state.get("reason") or summary.get("reason"),
            "training": _text(summary.get("training")),
            "evaluation": _text(summary.get("evaluation")),
            "known_failure": _known(summary.get("known_failure")),
            "cut_short": [c for c in summary.get("cut_short") or [] if isinstance(c, str)],
            "notes": [n for n in summary.get("notes") or [] if isinstance(n, str)]}


def _known(found: Any) -> dict[str, str] | None:
    """summary.json's known failure (launcher/output/known_failures.py): its name, the task,
    the cause and the fix, each a line."""
    if not isinstance(found, dict):
        return None
    doc = {k: found.get(k) for k in ("name", "task", "cause", "fix")}
    return {k: str(v) for k, v in doc.items()} if all(isinstance(v, str)
                                                      for v in doc.values()) else None


def _eta(progress: dict) -> float | None:
    """The ETA the launcher recorded, less the time since it recorded it."""
    eta, at = progress.get("eta"), progress.get("at")
    if not isinstance(eta, (int, float)):
        return None
    if isinstance(at, (int, float)):
        eta -= max(0.0, time.time() - at)
    return round(max(0.0, eta), 1)


def _evaluation(progress: dict, summary: dict) -> dict[str, Any] | None:
    """The newest evaluation: its step and metrics (tfcluster_metrics.jsonl's newest eval
    line, as the launcher saw it), or the step the evaluator evaluated alone."""
    found = progress.get("evaluation")
    if isinstance(found, dict) and isinstance(found.get("step"), int):
        metrics = found.get("metrics") if isinstance(found.get("metrics"), dict) else {}
        return {"step": found["step"], "metrics": metrics}
    step = summary.get("evaluated_step", progress.get("evaluated_step"))
    return {"step": step, "metrics": {}} if isinstance(step, int) else None


def _preemption(state: dict, summary: dict) -> dict[str, Any] | None:
    record = state.get("preemption") or summary.get("preemption")
    if not isinstance(record, dict):
        return None
    return {k: record.get(k) if isinstance(record.get(k), int) else None
            for k in PREEMPTION_FIELDS}


def _lease(lease: Any, lost: bool) -> dict[str, Any] | None:
    if not isinstance(lease, dict) or not lease.get("file"):
        return None
    held = bool(lease.get("held"))
    return {"file": lease["file"], "held": held and not lost, "left": held and lost,
            "since": lease.get("since"), "heartbeat": lease.get("heartbeat"),
            "lost_to": lease.get("lost_to")}


def _task(row: dict) -> dict[str, Any]:
    return {"task": row["task"], "address": row.get("address"), "state": row["state"],
            "exit": row.get("exit") if isinstance(row.get("exit"), int) else None,
            "stopped": bool(row.get("stopped")), "restarts": row.get("restarts") or 0,
            "gpus": [str(g) for g in row["gpus"]] if isinstance(row.get("gpus"), list)
            else None, "pid": row.get("pid"),
            "log": row.get("log")}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def tracking_link(state: dict) -> dict | None:
    """The run's MLflow run (launcher/tracking/): its id, URL and what was not logged;
    None when the run was not tracked (or its run was never opened)."""
    found = (state.get("tracking") or {}).get("mlflow")
    if not isinstance(found, dict) or not found.get("url"):
        return None
    return {"run_id": found.get("run_id"), "experiment_id": found.get("experiment_id"),
            "url": found["url"], "attempt": found.get("attempt"),
            "unlogged": found.get("unlogged") or 0}
