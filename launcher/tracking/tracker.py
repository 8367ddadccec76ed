"""The run's MLflow tracker: an observer of the run's events (``RunLog.observers``) and a
reader of model_dir, on a daemon thread of its own with a bounded queue, so that a tracking
server that is down, slow or refuses the token never slows or breaks the job.

The thread opens the MLflow run (continued when model_dir names one: a preempted job
launched again, a Slurm requeue, a launch after a failure; new with ``--retrain`` or a new
model_dir), logs the params and tags, then every ``LOOK_EVERY`` s the metrics new in
model_dir (launcher/tracking/follow.py), the rate and the restarts, in ``runs/log-batch``
requests. At the end (``finish``): the verdict, the exit status, the artifacts
(summary.json, the spec, plan.json, the report page and its chart) and the run's status.
What the server did not take goes into the run directory's ``tracking_unlogged.jsonl``;
the first failure is one console line, the only one.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from launcher.redact import masked_argv, masked_url

if TYPE_CHECKING:
    from launcher.plan import JobPlan
    from launcher.spec import Spec
    from launcher.tracking.rest import Client
    from launcher.tracking.target import Target

RUN_FILE = ".tfcluster-mlflow.json"     # beside model_dir's lease: the MLflow run's id
UNLOGGED_FILE = "tracking_unlogged.jsonl"
LOOK_EVERY = 5.0            # s between two looks at model_dir (and two log-batch requests)
FINISH_WAIT = 60.0          # s the launcher waits at most at the end for the last requests
SAY_WAIT_AFTER = 5.0        # s of that wait before the console says the launcher waits
QUEUE_MAX = 10_000          # events waiting for the thread; beyond, they are counted lost
PENDING_MAX = 100_000       # metrics kept while the run cannot be opened yet
REPORT_TIMEOUT = 40.0       # s for `launch report` to draw the chart
STATUS = {"succeeded": "FINISHED", "failed": "FAILED", "cancelled": "KILLED",
          "preempted": "SCHEDULED", "queued": "SCHEDULED"}   # continued by the next launch
PREEMPTED = ("preempted", "queued")     # a preemption notice carried out; a Slurm requeue


class Tracker:
    """See the module docstring. ``info``: the console's one-line printer; ``record``:
    state.json's ``tracking`` field (``launch status`` shows its URL); ``progress``: the
    run's progress as state.json keeps it (step, rate)."""

    def __init__(self, target: Target, spec: Spec, plan: JobPlan, run_dir: str, *,
                 command: list[str] | None, fresh: bool, info: Callable[[str], None],
                 record: Callable[[dict[str, Any]], None],
                 progress: Callable[[], dict[str, Any] | None] = lambda: None,
                 look_every: float = LOOK_EVERY):
        self.target, self.spec, self.plan, self.run_dir = target, spec, plan, run_dir
        self.command, self.fresh, self.info, self.record = command, fresh, info, record
        self.progress, self.look_every = progress, look_every
        self.queue: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue(QUEUE_MAX)
        self.thread = threading.Thread(target=self._main, name="mlflow-tracker", daemon=True)
        self.done = threading.Event()   # the thread's end (a join cut by Ctrl-C can say
        #                                 is_alive() False for a thread still running)
        self.client: Client | None = None
        self.run_id: str | None = None
        self.experiment_id = ""
        self.artifact_uri = ""
        self.url: str | None = None
        self.attempt = 1
        self.preemptions = 0
        self.continued = False
        self.pending: list[dict[str, Any]] = []     # metrics while the run is not open
        self.unlogged = 0           # requests (or events) the server did not take
        self.lost_events = 0
        self.said_failure = False
        self.ending = False         # in _end: after one failed request, no more are tried
        self.given_up = False
        self.job_ended = False      # finish() called: "the job goes on" is no longer true
        self.logged_values = 0      # metric values the server took
        self.logged_artifacts = 0
        self.final_status: str | None = None    # the MLflow run's status, once set
        self.step: int | None = None
        self.restarts = 0
        self._rate_step: int | None = None
        self._starting = threading.Lock()

    # ------------------------------------------------------------ the loop's thread
    def start(self) -> None:
        """Start the thread (once): when every task runs, so that its imports and first
        requests are not on the way to the tasks' start; at the latest, at ``finish``."""
        with self._starting:
            if not self.thread.is_alive() and self.thread.ident is None:
                self.thread.start()

    def on_event(self, event: str, fields: dict[str, Any]) -> None:
        """RunLog's observer: queued, never blocks."""
        try:
            self.queue.put_nowait((event, fields))
        except queue.Full:
            self.lost_events += 1

    def finish(self, status: int, verdict: str, reason: str, spec_path: str | None,
               wait: float = FINISH_WAIT) -> None:
        """The run ended: the thread logs the end and the artifacts; waits at most
        ``wait`` s for it (what it did not send by then is recorded as not logged)."""
        deadline = time.monotonic() + wait
        self.job_ended = True
        self.start()        # a job that ended before every task ran
        try:
            self.queue.put(("_finish", {"status": status, "verdict": verdict,
                                        "reason": reason, "spec": spec_path}), timeout=wait)
        except queue.Full:
            pass
        why = f"the end was not sent within {wait:.0f}s"
        try:
            self.done.wait(min(SAY_WAIT_AFTER, max(0.0, deadline - time.monotonic())))
            left = deadline - time.monotonic()
            if not self.done.is_set() and left > 0:
                self.info(f"MLflow: sending the end of the run to {self.target.base} (the "
                          f"last metrics, the artifacts, the status): waiting at most "
                          f"{left:.0f}s more (Ctrl-C stops waiting)")
                self.done.wait(left)
        except KeyboardInterrupt:       # the job's own exit status stands
            why = "stopped waiting for the end: interrupted"
        if not self.done.is_set():      # what is left dies with this process
            self._failed(why)
            if self.run_id is None and self.pending:
                self._not_logged("metrics", list(self.pending), why)
            self._not_logged("end", [], why, verdict=verdict, status=status)
        elif self.final_status and not self.said_failure:     # the closing line
            self.info(f"MLflow: {self.url}: {self.final_status}, {self.logged_values} metric "
                      f"values and {self.logged_artifacts} artifacts logged")

    # ------------------------------------------------------------ the tracker's thread
    def _main(self) -> None:
        try:
            self._follow()
        finally:
            self.done.set()

    def _follow(self) -> None:
        """Open the run, log what is new every look, and the end once it comes."""
        try:
            from launcher.tracking.follow import ModelDirFollower
            from launcher.tracking.rest import Client

            self.client = Client(self.target)
            follower = ModelDirFollower(self.plan.storage)
            while True:
                if self.run_id is None:
                    self._open()
                end = self._drain(time.monotonic() + self.look_every)
                self._log(follower.look(last=end is not None) + self._rate())
                if end is not None:
                    self._end(end)
                    return
        except Exception as e:  # noqa: BLE001 - the tracker never breaks a job
            self._failed(f"tracker error: {e!r}")
            self._not_logged("tracker", [], f"tracker error: {e!r}")

    def _drain(self, until: float) -> dict[str, Any] | None:
        """Take the queued events until ``until``; the finish request when it came."""
        while True:
            left = until - time.monotonic()
            try:
                event, fields = self.queue.get(timeout=max(0.0, left))
            except queue.Empty:
                return None
            if event == "_finish":
                return fields
            self._event(event, fields)

    def _event(self, event: str, fields: dict[str, Any]) -> None:
        if event == "checkpoint" and isinstance(fields.get("step"), int):
            self.step = fields["step"]
        elif event == "restart_scheduled":
            self.restarts += 1
            self._log([self._metric("restarts", self.restarts)])

    def _metric(self, key: str, value: float, step: int | None = None) -> dict[str, Any]:
        return {"key": key, "value": float(value), "timestamp": int(time.time() * 1000),
                "step": int(step if step is not None else self.step or 0)}

    def _rate(self) -> list[dict[str, Any]]:
        """steps/s as the launcher measures it, at the newest step known."""
        p = self.progress() or {}
        step, rate = p.get("latest_step"), p.get("rate")
        if not isinstance(step, int) or not isinstance(rate, (int, float)) or \
                step == self._rate_step:
            return []
        self._rate_step = step
        return [self._metric("steps_per_sec", rate, step)]

    def _open(self) -> None:
        """The MLflow run: the one model_dir names when the server still has it, else a
        new one; params and tags; its URL into state.json and on the console."""
        from launcher.tracking.rest import TrackingError

        assert self.client is not None
        try:
            self.experiment_id = self.client.experiment_id(self.target.experiment)
            run = self._continue()
            if run is None:
                run = self.client.create_run(self.experiment_id,
                                             self.target.run_name or self.plan.run_id,
                                             int(time.time() * 1000), self.target.tags)
            else:
                self.client.update_run(run["info"]["run_id"], "RUNNING")
            self.run_id = str(run["info"]["run_id"])
            self.artifact_uri = str(run["info"].get("artifact_uri") or "")
            self.url = self.target.run_url(self.experiment_id, self.run_id)
            self._save_run_file()
            logged = {p["key"] for p in run.get("data", {}).get("params", [])}
            params = {k: v for k, v in run_params(self.spec, self.plan, self.command).items()
                      if k not in logged}        # a param once logged cannot change
            self.client.log_batch(self.run_id, params=params, tags=self._tags())
        except TrackingError as e:
            self._failed(str(e))
            if self.run_id is None:
                return          # tried again at the next look
            self._not_logged("params and tags", [], str(e))
        self._said_open()
        if self.pending:
            pending, self.pending = self.pending, []
            self._log(pending)

    def _continue(self) -> dict[str, Any] | None:
        """The run model_dir's run file names, on this server and experiment, unless
        ``--retrain`` asked for a new one."""
        assert self.client is not None
        if self.fresh:
            return None
        saved = self._read_run_file()
        if not saved or saved.get("server") != self.target.base or \
                saved.get("experiment_id") != self.experiment_id:
            return None
        run = self.client.get_run(str(saved.get("run_id")))
        if run is not None:
            self.continued = True
            self.attempt = int(saved.get("attempt") or 0) + 1
            self.preemptions = int(saved.get("preemptions") or 0)
        return run

    def _said_open(self) -> None:
        how = f"continued, attempt {self.attempt}" if self.continued else "new run"
        self.info(f"MLflow: {self.url} ({how})")
        self._record()

    def _record(self, **more: Any) -> None:
        self.record({"mlflow": {"run_id": self.run_id, "experiment_id": self.experiment_id,
                                "url": self.url, "attempt": self.attempt,
                                "continued": self.continued, "unlogged": self.unlogged,
                                **more}})

    def _tags(self, **more: str) -> dict[str, str]:
        version = getattr(sys.modules.get("launcher"), "__version__", "unknown")
        return {"tfcluster.version": str(version), "tfcluster.run_id": self.plan.run_id,
                "tfcluster.run_dir": os.path.abspath(self.run_dir),
                "tfcluster.attempt": str(self.attempt),
                "tfcluster.preemptions": str(self.preemptions),
                "tfcluster.model_dir": masked_url(self.plan.model_dir), **self.target.tags,
                **more}

    def _log(self, metrics: list[dict[str, Any]], tags: dict[str, str] | None = None) -> None:
        from launcher.tracking.rest import TrackingError

        if not metrics and not tags:
            return
        if self.given_up:
            self._not_logged("metrics", metrics, "the server failed at the job's end",
                             tags=tags)
            return
        if self.run_id is None:
            room = PENDING_MAX - len(self.pending)
            self.pending += metrics[:room]
            if len(metrics) > room:
                self._not_logged("metrics", metrics[room:], "the run could not be opened")
            return
        assert self.client is not None
        try:
            self.client.log_batch(self.run_id, metrics, tags=tags)
            self.logged_values += len(metrics)
        except TrackingError as e:
            self._failed(str(e))
            self._not_logged("metrics", metrics, str(e), tags=tags)

    def _end(self, end: dict[str, Any]) -> None:
        """The verdict, the exit status, the artifacts and the run's status."""
        from launcher.tracking.rest import TrackingError

        self.ending = True
        if self.run_id is None:
            self._open()            # the server may be back
        if self.run_id is None:
            self._not_logged("metrics", self.pending, "the run could not be opened")
            self.pending = []
            self._not_logged("end", [], "the run could not be opened", verdict=end["verdict"],
                             status=end["status"])
            return
        self.preemptions += end["verdict"] in PREEMPTED
        self._save_run_file()       # first: a requeued job's grace period may end soon
        self._log([self._metric("restarts", self.restarts)] if self.restarts else [],
                  tags=self._tags(**{"tfcluster.verdict": end["verdict"],
                                     "tfcluster.exit_status": str(end["status"]),
                                     "tfcluster.reason": str(end["reason"])[:5000]}))
        assert self.client is not None
        try:        # the status before the artifacts: the report page takes the longest
            if self.given_up:
                raise TrackingError("the server failed at the job's end")
            status = STATUS.get(end["verdict"], "FAILED")
            self.client.update_run(self.run_id, status, int(time.time() * 1000))
            self.final_status = status
        except TrackingError as e:
            self._failed(str(e))
            self._not_logged("status", [], str(e), verdict=end["verdict"])
        self._record(verdict=end["verdict"], lost_events=self.lost_events)
        self._artifacts(end.get("spec"), report=end["verdict"] in ("succeeded", "failed"))
        self._record(verdict=end["verdict"], lost_events=self.lost_events, done=True)

    def _artifacts(self, spec_path: str | None, report: bool) -> None:
        """summary.json, the spec, plan.json, the report page and its chart (drawn for a
        run that succeeded or failed: a preempted, requeued or cancelled one has a grace
        period to keep, and the next launch draws it)."""
        from launcher.tracking.rest import TrackingError

        assert self.client is not None and self.run_id is not None
        files = [os.path.join(self.run_dir, n) for n in ("summary.json", "plan.json")]
        if spec_path:
            files.insert(0, spec_path)
        if report and not self.given_up:    # drawn for the server only
            self._report()
            files += [os.path.join(self.run_dir, n) for n in ("report.html", "report.png")]
        for path in files:
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            name = os.path.basename(path) if path != spec_path else \
                "spec/" + os.path.basename(path)
            if self.given_up:
                self._not_logged("artifact", [name], "the server failed at the job's end")
                continue
            try:
                self.client.upload(self.artifact_uri, name, data)
                self.logged_artifacts += 1
            except TrackingError as e:
                self._failed(str(e))
                self._not_logged("artifact", [name], str(e))

    def _report(self) -> None:
        """`launch report RUN_DIR`: the report page and its chart, in the run directory."""
        try:
            subprocess.run([sys.executable, "-m", "launcher.cli", "report", self.run_dir],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=REPORT_TIMEOUT, check=False)
        except (OSError, subprocess.SubprocessError):
            pass

    # ------------------------------------------------------------ failures and records
    def _failed(self, why: str) -> None:
        self.given_up = self.ending
        if self.said_failure:
            return
        self.said_failure = True
        goes_on = "" if self.job_ended else "the job goes on, "
        self.info(f"MLflow tracking at {self.target.base} failed ({why}); {goes_on}what is "
                  f"not logged is listed in {os.path.join(self.run_dir, UNLOGGED_FILE)}")

    def _not_logged(self, what: str, items: list[Any], why: str, **more: Any) -> None:
        """One line of tracking_unlogged.jsonl; never raises."""
        self.unlogged += 1
        line = json.dumps({"time": round(time.time(), 3), "what": what, "error": why,
                           "run_id": self.run_id, "items": items, **more}, default=str)
        try:
            with open(os.path.join(self.run_dir, UNLOGGED_FILE), "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError:
            pass
        try:
            self._record()
        except Exception:  # noqa: BLE001 - state.json's own failure is said elsewhere
            pass

    def _run_store(self) -> Any:
        from launcher.records.lease import store_for

        return store_for(self.plan.storage, RUN_FILE)

    def _read_run_file(self) -> dict[str, Any] | None:
        try:
            raw = self._run_store().read()
            doc = json.loads(raw) if raw else None
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def _save_run_file(self) -> None:
        doc = {"run_id": self.run_id, "experiment_id": self.experiment_id,
               "server": self.target.base, "url": self.url, "attempt": self.attempt,
               "preemptions": self.preemptions, "tfcluster_run_id": self.plan.run_id}
        try:
            self._run_store().replace(json.dumps(doc).encode())
        except OSError as e:
            self._not_logged("run file", [RUN_FILE], f"model_dir: {e}")


def run_params(spec: Spec, plan: JobPlan, command: list[str] | None) -> dict[str, str]:
    """The run's params: the spec's name, roles and counts, backend, max_steps or epochs,
    strategy, and the command (unexpanded, secret-looking arguments masked)."""
    counts: dict[str, int] = {}
    for task in plan.tasks:
        counts[task.type] = counts.get(task.type, 0) + 1
    params = {"name": spec.name, "backend": spec.backend, "strategy": spec.strategy,
              "roles": ",".join(f"{r}:{n}" for r, n in counts.items()),
              "max_steps": str(plan.max_steps)}
    params.update({f"tasks.{role}": str(n) for role, n in counts.items()})
    if spec.epochs is not None:
        params.update(epochs=str(spec.epochs), examples=str(spec.examples),
                      batch_size=str(spec.batch_size))
    commands = {role: shlex.join(masked_argv(spec.command_for(role, command)))
                for role in counts}
    main = max(set(commands.values()), key=list(commands.values()).count)
    params["command"] = main
    params.update({f"command.{r}": c for r, c in commands.items() if c != main})
    return params
