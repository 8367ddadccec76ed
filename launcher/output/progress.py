"""The progress line: where training stands, in one line the console prints every few
seconds while something changes."""

from __future__ import annotations

from orchestrator.coordinator import Progress

FIRST_METRICS = ("loss", "accuracy", "auc")   # shown first in the progress line
QUIET_AFTER = 10.0    # seconds without a new step before the line says so (no stale rate)


def duration_text(secs: float) -> str:
    """Seconds as "45s", "3m07s" or "2h05m"."""
    secs = int(round(secs))
    if secs < 60:
        return f"{secs}s"
    if secs < 3600:
        return f"{secs // 60}m{secs % 60:02d}s"
    return f"{secs // 3600}h{secs % 3600 // 60:02d}m"


def eval_text(ev: dict) -> str:
    """The latest evaluation in a few words: 'eval at step 200: loss=0.52, accuracy=0.73'."""
    shown = sorted(ev.get("metrics", {}).items(),
                   key=lambda kv: (FIRST_METRICS.index(kv[0])
                                   if kv[0] in FIRST_METRICS else len(FIRST_METRICS), kv[0]))
    metrics = ", ".join(f"{k}={v:.4g}" if isinstance(v, (int, float)) else f"{k}={v}"
                        for k, v in shown[:4])
    return f"eval at step {ev.get('step')}: {metrics}"


def rate_words(p: Progress, now: float | None) -> list[str]:
    """The rate and ETA ("66.2 steps/s", "ETA 7s"), or, when no new step came for
    QUIET_AFTER s before ``now`` (a monotonic time), "no new step for 45s" instead: old
    figures are never shown as current."""
    quiet = None if now is None or p.step_at is None else now - p.step_at
    if quiet is not None and quiet >= QUIET_AFTER and not p.reached_max_steps:
        return [f"no new step for {duration_text(quiet)}"]
    words = []
    if p.steps_per_sec is not None:
        words.append(f"{p.steps_per_sec:.1f} steps/s")
    if p.eta_secs is not None and not p.reached_max_steps:
        words.append(f"ETA {duration_text(p.eta_secs)}")
    return words


def progress_line(p: Progress, waited: float, restarts: int = 0, now: float | None = None,
                  silent: list[str] | tuple[str, ...] = ()) -> str:
    """One line: where training stands (the step from the events file when it is ahead of
    the newest complete checkpoint), and how many restarts it took so far. When no new
    step came for QUIET_AFTER s before ``now``, it says so instead of showing the last
    rate and ETA as current; ``silent`` names tasks that stopped answering gRPC."""
    ckpt, step = p.checkpoint, p.latest_step
    if step is None:
        line = f"checkpoint {ckpt.progress}" if ckpt else \
            f"waiting for the first checkpoint ({duration_text(waited)})"
    else:
        total = f"/{p.max_steps} ({100 * min(step, p.max_steps) // p.max_steps}%)" \
            if p.max_steps else ""
        line = ", ".join([f"step {step}{total}", *rate_words(p, now)])
        line += f", checkpoint {ckpt.name}" if ckpt else ", no complete checkpoint yet"
    if p.latest_eval:
        line += f"; {eval_text(p.latest_eval)}"
    if silent:
        line += f"; {', '.join(silent)} not answering"
    if restarts:
        line += f"; {restarts} restart{'s' if restarts > 1 else ''}"
    if p.last_error:
        line += f" [model_dir not readable: {p.last_error}]"
    return f"progress: {line}"
