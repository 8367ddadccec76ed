"""The coordinator: where training stands, read from the one place every task shares.

A ``Coordinator`` polls model_dir in a thread of its own every ``poll`` seconds (through
``CheckpointReader``: cost independent of the number of files) and keeps a ``Progress``
snapshot: newest complete checkpoint, its step, the newest step in the chief's events file
(summaries come more often than checkpoints), steps per second, ETA, the latest evaluation
(``tfcluster_metrics.jsonl``), and when training last showed a sign of life (a new
checkpoint, or the chief's events file growing). ``judge(tasks)`` turns that snapshot
and the tasks' states (``TaskState``, given by whoever runs the tasks) into a ``Decision``
(orchestrator/decisions.py):

- ``finish`` when the newest complete checkpoint reached max_steps, or the step in the
  chief's events file did, read as series (orchestrator/step_series.py): steps that go
  backwards mean a restore, and the step is the newest series'; while an older series is
  still written to (interleaved), only a checkpoint says max_steps was reached;
- ``lost`` when a ps died while trainers still run (they would hang for ever): the
  restart policies decide what that means;
- ``fail`` when nothing moved for ``stall`` seconds (``startup`` + ``stall`` before the
  first checkpoint is named: starting TensorFlow takes its time), naming the silent tasks.

Nothing here blocks the caller: ``judge`` and ``progress`` read the last snapshot. A restart
policy can use ``newest_complete()`` (the checkpoint a restarted job resumes from).
"""

from __future__ import annotations

import collections
import json
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from orchestrator.checkpoints import Checkpoint, CheckpointReader
from orchestrator.decisions import FAIL, FINISH, LOST, Decision, TaskState
from orchestrator.evaluated import EvaluationFollower
from orchestrator.metrics_file import METRICS_FILE
from orchestrator.roles import TRAINERS, names_text
from orchestrator.step_series import StepSeries
from orchestrator.tfformats import EVENTS_PREFIX, event_steps
from orchestrator.writes import WriteWatch

RATE_WINDOW = 20           # step observations kept to estimate steps per second
RATE_SECS = 30.0           # ... over at most this many seconds before the newest one
RATE_MIN_SECS = 5.0        # ... and over at least this many (several polls, not two)
METRICS_TAIL_BYTES = 16384  # a new eval line is looked for in the file's last bytes
EVENTS_REDISCOVER_SECS = 30.0
EVENTS_FIRST_LOOK_SECS = 5.0   # s between looks while no events file is known
EVENTS_READ_MAX = 4 << 20   # bytes of new events read per poll at most
NEAR_END_POLL_MIN = 0.1     # s: the fastest poll, close to max_steps


@dataclass(frozen=True)
class Progress:
    """A snapshot of training as seen in model_dir."""

    max_steps: int | None = None
    checkpoint: Checkpoint | None = None
    steps_per_sec: float | None = None
    eta_secs: float | None = None
    last_activity: float = 0.0       # monotonic time of the last sign of training
    step_at: float | None = None     # monotonic time the newest step was first seen
    last_activity_what: str = "the coordinator started"
    latest_eval: dict[str, Any] | None = None
    events_step: int | None = None   # the chief's events file: its newest series' step
    restored: tuple[int, int] | None = None  # the last restore seen there: (from, to) step
    events_interleaved: bool = False  # an older series went on after a restore
    evaluated_step: int | None = None  # newest checkpoint step the evaluator evaluated
    named: str | None = None         # newest checkpoint the state file names
    incomplete: dict[str, list[str]] = field(default_factory=dict)  # name -> missing files
    polls: int = 0
    poll_errors: int = 0
    last_error: str | None = None    # the last poll failed: model_dir cannot be read now
    written_at: float | None = None  # once following writes: when model_dir last changed
    written: str | None = None       # ... and the file that changed

    @property
    def step(self) -> int | None:
        return self.checkpoint.step if self.checkpoint else None

    @property
    def latest_step(self) -> int | None:
        """The newest step known: from the events file (written every few summaries) or
        the newest complete checkpoint, whichever is further."""
        steps = [s for s in (self.step, self.events_step) if s is not None]
        return max(steps) if steps else None

    @property
    def reached_max_steps(self) -> bool:
        return self.max_steps is not None and self.step is not None and \
            self.step >= self.max_steps


class Coordinator:
    """Watches model_dir; see the module docstring."""

    def __init__(self, model_dir: str, max_steps: int | None = None, poll: float = 1.0,
                 stall: float = 300.0, storage_options: dict[str, Any] | None = None,
                 reader: CheckpointReader | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 tf2_number_is_step: bool = False, startup: float = 0.0,
                 on_change: Callable[[str, dict[str, Any]], None] | None = None):
        self.reader = reader or CheckpointReader(model_dir, storage_options,
                                                 tf2_number_is_step=tf2_number_is_step)
        self.fs = self.reader.fs
        self.poll_interval = poll
        self.stall = stall
        self.startup = startup
        self.clock = clock
        self.on_change = on_change
        self._progress = Progress(max_steps=max_steps, last_activity=clock())
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._state_text: str | None = None
        self._baseline = False       # the first poll's state file: there before this job
        self._history: collections.deque = collections.deque(maxlen=RATE_WINDOW)
        self._series = StepSeries()
        self._stale_events: int | None = None   # the events step a restart made stale
        self._events_file: str | None = None
        self._events_size = -1
        self._events_offset = 0
        self._events_readable = True
        self._events_looked = -1e18
        self._metrics_size = -1
        self._finish: Decision | None = None
        self._evaluations = EvaluationFollower(self.reader, clock=clock)
        self._reached_at: float | None = None
        self._writes: WriteWatch | None = None    # follow_writes(): after training

    # ------------------------------------------------------------------ thread
    def start(self) -> Coordinator:
        """Poll in a thread of its own; the stall clock starts now."""
        if self._thread is None:
            with self._lock:
                self._progress = replace(self._progress, last_activity=self.clock())
            self._thread = threading.Thread(target=self._loop, name="coordinator", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            p = self.poll_once()
            self._stop.wait(self.next_wait(p))

    def next_wait(self, p: Progress) -> float:
        """Seconds to the next poll: ``poll``, and a tenth of it (at least 0.1 s) from when
        max_steps is less than two polls ahead until two polls after it was reached, so
        that trainers that run past it are seen, and stopped, within fewer steps."""
        if p.reached_max_steps and self._reached_at is None:
            self._reached_at = self.clock()
        near = p.max_steps is not None and (
            (self._reached_at is not None and
             self.clock() - self._reached_at < 2 * self.poll_interval) or
            (not p.reached_max_steps and p.eta_secs is not None and
             p.eta_secs <= 2 * self.poll_interval))
        return max(NEAR_END_POLL_MIN, self.poll_interval / 10) if near else self.poll_interval

    # ------------------------------------------------------------------ reading
    def progress(self) -> Progress:
        with self._lock:
            return self._progress

    def note_restart(self) -> None:
        """Tasks were restarted: they get the startup time again before the stall clock
        runs with ``stall`` alone (until a checkpoint is named after the restart)."""
        with self._lock:
            self._history.clear()
            # the steps the events file held past the newest checkpoint were lost with the
            # restart: the step is the checkpoint's again until the events file moves
            self._stale_events = self._series.newest
            self._progress = replace(self._progress, last_activity=self.clock(),
                                     last_activity_what="a restart", named=None,
                                     steps_per_sec=None, eta_secs=None, step_at=None,
                                     events_step=None)

    def follow_writes(self) -> None:
        """From now on every poll also says when model_dir last changed (``written_at``):
        the end rules wait for trainers still writing there."""
        if self._writes is None:
            self._writes = WriteWatch(self.fs, self.reader.root)

    def newest_complete(self) -> Checkpoint | None:
        """The newest complete checkpoint seen (what a restarted job resumes from)."""
        return self.progress().checkpoint

    def poll_once(self) -> Progress:
        """Look at model_dir once; never raises (errors are kept in the snapshot)."""
        p = self.progress()
        try:
            p = self._poll(p)
            p = replace(p, polls=p.polls + 1, last_error=None)
        except Exception as e:  # noqa: BLE001 - storage errors of any fsspec backend
            p = replace(p, polls=p.polls + 1, poll_errors=p.poll_errors + 1,
                        last_error=f"{type(e).__name__}: {e}")
        with self._lock:
            self._progress = p
        return p

    def _poll(self, p: Progress) -> Progress:
        """One look at model_dir: the checkpoint state, the events file, the evaluations."""
        now = self.clock()
        p = self._read_checkpoints(now, p)
        p = self._read_events(now, p)
        p = replace(p, eta_secs=self._eta(p), latest_eval=self._latest_eval(p.latest_eval),
                    step_at=self._history[-1][0] if self._history else None)
        written = self._writes.look() if self._writes is not None else None
        if written is not None:
            p = replace(p, written_at=now, written=written)
        evaluated = _newest(self._evaluations.poll(), _step_of(p.latest_eval))
        if evaluated is not None and evaluated != p.evaluated_step:
            p = replace(p, evaluated_step=evaluated)
            self._emit("evaluated", step=evaluated)
        return p

    def _read_checkpoints(self, now: float, p: Progress) -> Progress:
        """The checkpoint state file's name, incomplete checkpoints, the newest complete."""
        scan = self.reader.scan()
        if not self._baseline:
            self._baseline, self._state_text = True, scan.state_text
        if scan.state_text != self._state_text:
            self._state_text = scan.state_text
            if scan.named is not None:
                p = replace(p, last_activity=now, last_activity_what=f"{scan.named} was named",
                            named=scan.named)
        # The .meta comes after the state file (Saver.save), so a missing .meta alone is a
        # save in progress; a missing index or data shard after it was named is not.
        broken = {n: f for n, f in scan.missing.items()
                  if any(not x.endswith(".meta") for x in f)}
        if broken != p.incomplete:
            for name, files in broken.items():
                if p.incomplete.get(name) != files:
                    self._emit("checkpoint_incomplete", name=name, missing=files)
            p = replace(p, incomplete=broken)
        ckpt = scan.complete
        if ckpt is not None and (p.checkpoint is None or ckpt.name != p.checkpoint.name):
            self._observe(now, ckpt.step)
            p = replace(p, checkpoint=ckpt, steps_per_sec=self._rate(), last_activity=now,
                        last_activity_what=f"checkpoint {ckpt.name}")
            self._emit("checkpoint", name=ckpt.name, step=ckpt.step, number=ckpt.number,
                       shards=ckpt.shards, path=ckpt.path)
        return p

    def _read_events(self, now: float, p: Progress) -> Progress:
        """The chief's events file: growth, restores, interleaved writers, its newest step."""
        grew, steps = self._follow_events(now, p)
        if grew:
            p = replace(p, last_activity=now, last_activity_what="the events file grew")
        for was, now_at in self._series.add(steps):
            self._history.clear()            # the rate of the restored series alone
            p = replace(p, restored=(was, now_at))
            self._emit("restore", step=was, restored_to=now_at)
        if self._series.interleaved and not p.events_interleaved:
            p = replace(p, events_interleaved=True)
            self._emit("events_interleaved", step=self._series.newest)
        step = self._series.newest
        if step is not None and step == self._stale_events:
            return p                         # the events have not moved since a restart
        self._stale_events = None
        if step is not None and step != p.events_step:
            self._observe(now, step)
            p = replace(p, events_step=step, steps_per_sec=self._rate(),
                        last_activity_what=f"step {step} in the events file")
        return p

    def _emit(self, event: str, **fields: Any) -> None:
        if self.on_change is not None:
            self.on_change(event, fields)

    def _observe(self, now: float, step: int | None) -> None:
        if step is not None and (not self._history or step > self._history[-1][1]):
            self._history.append((now, step))

    def _rate(self) -> float | None:
        """Steps per second over the recent observations (at most RATE_SECS old). The
        first observation since a (re)start or a restore is left out: the time up to it is
        TensorFlow starting, not training."""
        t1, s1 = self._history[-1] if self._history else (0.0, 0)
        recent = [(t, s) for t, s in list(self._history)[1:] if t1 - t <= RATE_SECS]
        if len(recent) < 2 or t1 - recent[0][0] < RATE_MIN_SECS:
            return None
        (t0, s0) = recent[0]
        return (s1 - s0) / (t1 - t0) if t1 > t0 and s1 >= s0 else None

    @staticmethod
    def _eta(p: Progress) -> float | None:
        if p.max_steps is None or p.latest_step is None or not p.steps_per_sec:
            return None
        return max(0.0, (p.max_steps - p.latest_step) / p.steps_per_sec)

    def _follow_events(self, now: float, p: Progress) -> tuple[bool, list[int]]:
        """(whether the chief's events file grew, the steps in what was added).

        The file is found with a listing of ``events.out.tfevents.*`` (limited to that
        prefix on S3) every 5 s while none is known, and at most every 30 s while training
        has been quiet (a newer file); then one ``info`` per poll, and one ranged read of the
        new bytes when it grew.
        """
        quiet = now - p.last_activity > min(self.stall / 3, EVENTS_REDISCOVER_SECS)
        every = EVENTS_FIRST_LOOK_SECS if self._events_file is None else EVENTS_REDISCOVER_SECS
        if (self._events_file is None or quiet) and now - self._events_looked >= every:
            self._events_looked = now
            found = self.reader.list_prefix(EVENTS_PREFIX)
            if found and found[-1] != self._events_file:
                self._events_file, self._events_size = found[-1], -1
                self._events_offset, self._events_readable = 0, True
        if self._events_file is None:
            return False, []
        try:
            size = int(self.fs.info(self._events_file).get("size") or 0)
        except FileNotFoundError:
            self._events_file = None
            return False, []
        grew = self._events_size >= 0 and size > self._events_size
        self._events_size = size
        steps: list[int] = []
        if self._events_readable and size > self._events_offset:
            end = min(size, self._events_offset + EVENTS_READ_MAX)
            data = self.fs.cat_file(self._events_file, start=self._events_offset, end=end)
            try:
                steps, used = event_steps(data)
                self._events_offset += used
            except ValueError:
                self._events_readable = False   # not a TFRecord file: its growth still counts
        return grew, steps

    def _latest_eval(self, current: dict[str, Any] | None) -> dict[str, Any] | None:
        """The newest ``split == "eval"`` line of tfcluster_metrics.jsonl; the file's size
        is looked up every poll and its tail read only when it grew."""
        path = self.reader._path(METRICS_FILE)
        try:
            size = int(self.fs.info(path).get("size") or 0)
        except FileNotFoundError:
            return current
        if size == self._metrics_size:
            return current
        self._metrics_size = size
        start = max(0, size - METRICS_TAIL_BYTES)
        tail = self.fs.cat_file(path, start=start, end=size).decode("utf-8", "replace")
        lines = tail.splitlines()
        if start > 0:
            lines = lines[1:]  # the first line may be cut
        for line in reversed(lines):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("split", "eval") == "eval" \
                    and isinstance(record.get("metrics"), dict):
                return record
        return current

    # ------------------------------------------------------------------ judging
    def judge(self, tasks: list[TaskState]) -> Decision | None:
        """finish / fail / None from the last snapshot and the tasks' liveness: training
        done (once said, said again), a dead ps, a stall, in that order."""
        p = self.progress()
        if self._finish is None:
            self._finish = self.training_done(p)
        if self._finish is not None:
            return self._finish
        trainers = [t for t in tasks if t.type in TRAINERS and t.alive]
        if not trainers:
            return None
        return self.ps_lost(p, tasks, trainers) or self.stalled(p, tasks, trainers)

    def training_done(self, p: Progress) -> Decision | None:
        """FINISH when a complete checkpoint reached max_steps, or the chief's events file
        did (summaries come more often than checkpoints: the end rules wait
        ``timeouts.finish`` for a checkpoint at max_steps before they stop trainers)."""
        if p.reached_max_steps:
            assert p.checkpoint is not None
            return Decision(FINISH, f"checkpoint {p.checkpoint.name} reached "
                                    f"max_steps {p.max_steps}")
        if p.max_steps is not None and p.events_step is not None and \
                p.events_step >= p.max_steps and not p.events_interleaved:
            return Decision(FINISH, f"step {p.events_step} in the chief's events file "
                                    f"reached max_steps {p.max_steps} ({self._where(p)})")
        return None

    def ps_lost(self, p: Progress, tasks: list[TaskState],
                trainers: list[TaskState]) -> Decision | None:
        """LOST when a ps died (not stopped by the launcher) while trainers still run."""
        dead_ps = [t for t in tasks if t.type == "ps" and not t.alive and not t.stopped]
        if not dead_ps:
            return None
        names = tuple(t.name for t in dead_ps)
        how = ", ".join(f"{t.name} ({t.address}) {t.exit_status or 'ended'}" for t in dead_ps)
        return Decision(LOST, f"parameter server died: {how}; "
                              f"{_names(trainers)} cannot train without it "
                              f"({self._where(p)})", names)

    def stalled(self, p: Progress, tasks: list[TaskState],
                trainers: list[TaskState]) -> Decision | None:
        """FAIL when nothing moved for timeouts.stall (before the first checkpoint:
        timeouts.start + timeouts.stall); blind (model_dir unreadable): no judgement on
        what it cannot see."""
        idle = self.clock() - p.last_activity
        limit = self.stall if p.named is not None else self.stall + self.startup
        if idle < limit or p.last_error is not None:
            return None
        silent = trainers + [t for t in tasks if t.type == "ps" and t.alive]
        names = tuple(t.name for t in silent)
        allowed = f"timeouts.stall = {self.stall:g}s" if p.named is not None else \
            f"before the first checkpoint: timeouts.start + timeouts.stall = {limit:g}s"
        reason = (f"training stalled: no new step or checkpoint for {idle:.0f}s "
                  f"({allowed}; last sign: "
                  f"{p.last_activity_what}; {self._where(p)}); silent tasks still "
                  f"running: {_names(silent)}")
        hint = self._incomplete_hint(p, tasks)
        return Decision(FAIL, reason + (f"; {hint}" if hint else ""), names)

    @staticmethod
    def _where(p: Progress) -> str:
        if p.checkpoint is None:
            return "no complete checkpoint yet"
        return f"newest complete checkpoint {p.checkpoint.name}"

    @staticmethod
    def _incomplete_hint(p: Progress, tasks: list[TaskState]) -> str:
        """Name the ps whose shard is missing: it does not write into the same storage."""
        if not p.incomplete:
            return ""
        name, missing = next(iter(p.incomplete.items()))
        shards = [f.rsplit(".data-", 1)[1] for f in missing if ".data-" in f]
        ps = [f"ps:{int(s.split('-of-')[0])}" for s in shards]
        known = {t.name for t in tasks}
        owners = [n for n in ps if n in known]
        who = f" (written by {', '.join(owners)}: is model_dir the same storage there?)" \
            if owners else ""
        return f"checkpoint {name} is incomplete, missing {', '.join(missing)}{who}"


def _step_of(record: dict[str, Any] | None) -> int | None:
    step = (record or {}).get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _newest(*steps: int | None) -> int | None:
    known = [s for s in steps if s is not None]
    return max(known) if known else None


def _names(tasks: list[TaskState]) -> str:
    return names_text([t.name for t in tasks])
