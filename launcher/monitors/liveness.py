"""Readiness and liveness of the tasks, asked of TensorFlow's own gRPC server.

Every ps, chief, master and worker of a TensorFlow cluster serves gRPC at its TF_CONFIG
address. One unary call of ``/tensorflow.WorkerService/GetStatus`` with an empty request
(raw bytes: no protobuf needed) answers in milliseconds from a live task, runs into its
deadline (DEADLINE_EXCEEDED) when the process is frozen or its host cut off, and fails at
once (UNAVAILABLE) when nothing listens there yet.

- ``PingProber`` (launcher/monitors/ping.py) asks many addresses at once with an HTTP/2
  PING (~0.1 ms of the launcher's CPU); ``GrpcProber`` asks GetStatus, through one channel
  per address. Every probe is a PING; a task that answers it and has not answered
  GetStatus since its start is asked GetStatus once (readiness: it serves TensorFlow's
  gRPC), whose channel is then closed. No gRPC channel retries its connection to a task
  still importing TensorFlow; a poll takes at most two deadlines.
- ``Liveness`` (rules, no I/O, injected clock): a task that answered once since it started
  and then has not answered for ``unresponsive`` seconds is lost; one that never answered
  is still starting (importing TensorFlow), never lost. A task is asked every
  ``READY_PERIOD`` s until it first answered (for the first ``timeouts.start`` s), then
  every ``period`` s.
- At scale the probes keep to ``PROBE_RATE`` calls a second (a PING costs ~0.1 ms of the
  launcher's CPU, a GetStatus call ~0.6 ms), so the periods grow with the number of tasks N: every
  ``max(period, N / PROBE_RATE)`` s, a ps not answered yet every
  ``max(READY_PERIOD, ps / PROBE_RATE)`` s and the others not answered yet no faster than
  ``READY_PERIOD`` s times their count over ``PROBE_RATE``. A task is lost only after two
  periods without an answer (``unresponsive`` or two periods, the longer): at N = 1,000,
  a probe every 62.5 s and a frozen task lost after 125 s (docs/reliability.md).
- ``LivenessMonitor`` (a job-loop monitor): probes every running task with a TF server in a
  thread of its own, answers ``lost`` for a task gone silent, and tells the job loop
  whether a ps answered since its start (``answered``: readiness, bounded by
  ``timeouts.start``).

Backends whose tasks the launcher cannot reach (Kubernetes, from outside the cluster) set
``Backend.reachable = False``: there the job relies on the engine's state alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Callable

from launcher.monitors.probe import PROBE_DEADLINE, Answer, Prober
from orchestrator.decisions import LOST, Decision, TaskState

GET_STATUS = "/tensorflow.WorkerService/GetStatus"
SERVER_ROLES = ("ps", "chief", "master", "worker")   # the evaluator runs no TF server
PROBE_PERIOD = 2.0        # seconds between liveness polls
READY_PERIOD = 0.2        # seconds between probes of a task that has not answered yet
PROBE_RATE = 16.0         # at most about this many probes a second (PINGs: ~0.15 % of a core)
# No proxy (grpcio honours http_proxy), and a short reconnect backoff so a task that starts
# listening is seen within a second instead of after grpc's default backoff (up to 120 s).
CHANNEL_OPTIONS = (
    ("grpc.enable_http_proxy", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
)


class GrpcProber:
    """GetStatus calls through ``grpc.insecure_channel``, all addresses at once."""

    def __init__(self, deadline: float = PROBE_DEADLINE):
        import grpc  # here, not at import time: `launch --help` stays fast

        self._grpc = grpc
        self.deadline = deadline
        self._calls: dict[str, tuple[Any, Any]] = {}
        self._lock = threading.Lock()

    def _call(self, address: str):
        with self._lock:
            found = self._calls.get(address)
            if found is None:
                channel = self._grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
                found = (channel, channel.unary_unary(GET_STATUS))
                self._calls[address] = found
            return found[1]

    def ask_all(self, addresses: Iterable[str]) -> dict[str, Answer]:
        started = time.monotonic()
        done: dict[str, float] = {}
        futures = {}
        for address in dict.fromkeys(addresses):
            future = self._call(address).future(b"", timeout=self.deadline)
            future.add_done_callback(lambda _f, a=address: done.setdefault(a, time.monotonic()))
            futures[address] = future
        answers = {}
        for address, future in futures.items():
            try:
                future.result()
                ok, code = True, "OK"
            except self._grpc.RpcError as e:
                ok, code = False, e.code().name
            except self._grpc.FutureCancelledError:
                ok, code = False, "CANCELLED"
            took = done.get(address, time.monotonic()) - started
            answers[address] = Answer(ok, code, round(took, 4))
        return answers

    def ask(self, address: str) -> Answer:
        return self.ask_all([address])[address]

    def forget(self, address: str) -> None:
        """Close the channel to ``address`` (its task restarts: start afresh)."""
        with self._lock:
            found = self._calls.pop(address, None)
        if found is not None:
            found[0].close()

    def close(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, {}
        for channel, _ in calls.values():
            channel.close()


# --------------------------------------------------------------------------- rules
def lost_reason(name: str, address: str, unresponsive: float) -> str:
    return f"{name} ({address}) has not answered TensorFlow's gRPC for {unresponsive:g} s"


def not_ready_reason(name: str, address: str, waited: float, code: str) -> str:
    return (f"{name} ({address}) did not answer TensorFlow's gRPC within timeouts.start = "
            f"{waited:g} s (last probe: {code}); the trainers cannot train without it (does "
            f"its command run a TensorFlow server? timeouts.unresponsive = 0 turns the gRPC "
            f"checks off)")


@dataclass
class Watched:
    """One running task with a TF server, since its last start."""

    name: str
    address: str
    since: float                      # when it started (the generation of this watch)
    answered_at: float | None = None  # its last answer
    first_answer: float | None = None
    asked_at: float | None = None     # the last probe sent
    code: str = "not asked yet"       # the last probe's outcome

    @property
    def answering(self) -> bool:
        return self.code == "OK"


@dataclass(frozen=True)
class Lost:
    """A task that stopped answering its liveness probes."""

    name: str
    address: str
    since: float          # the start of the task that was lost
    silent_for: float     # seconds since its last answer
    code: str             # the last probe's outcome


class Liveness:
    """The rules (see the module docstring); thread-safe, clock injected."""

    def __init__(self, unresponsive: float, period: float = PROBE_PERIOD,
                 startup: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.unresponsive = unresponsive
        self.period = period
        self.startup = startup
        self.clock = clock
        self._watched: dict[str, Watched] = {}
        self._lock = threading.Lock()

    def watch(self, targets: dict[str, tuple[str, float]]) -> list[Watched]:
        """The tasks to watch now: name -> (address, start time). A task with a new start
        time starts afresh; tasks not given are dropped. Returns the dropped or restarted."""
        with self._lock:
            gone = [w for n, w in self._watched.items()
                    if n not in targets or (w.address, w.since) != targets[n]]
            for w in gone:
                del self._watched[w.name]
            for name, (address, since) in targets.items():
                if name not in self._watched:
                    self._watched[name] = Watched(name, address, since)
            return gone

    def periods(self, now: float) -> tuple[float, float, float]:
        """Seconds between probes now: (answered tasks, ps not answered yet, other tasks
        not answered yet), grown with the number of tasks to keep to ``PROBE_RATE``."""
        starting = [w for w in self._watched.values()
                    if w.first_answer is None and now - w.since < self.startup]
        ps = sum(1 for w in starting if w.name.startswith("ps:"))
        period = max(self.period, len(self._watched) / PROBE_RATE)
        return (period, max(READY_PERIOD, ps / PROBE_RATE),
                min(period, max(READY_PERIOD, (len(starting) - ps) / PROBE_RATE)))

    @property
    def lost_after(self) -> float:
        """Seconds of silence that make an answered task lost: ``unresponsive``, or two
        probe periods when the periods grew longer (many tasks)."""
        with self._lock:
            return max(self.unresponsive,
                       2 * len(self._watched) / PROBE_RATE if self._watched else 0.0)

    def due(self, now: float | None = None) -> dict[str, tuple[str, float]]:
        """The tasks to ask now (name -> (address, start time)): one not answered yet every
        READY_PERIOD s during its first ``startup`` s, every ``period`` s otherwise (both
        longer with many tasks: ``periods``)."""
        now = self.clock() if now is None else now
        with self._lock:
            out = {}
            period, ps_ready, ready = self.periods(now)
            for w in self._watched.values():
                fast = w.first_answer is None and now - w.since < self.startup
                every = (ps_ready if w.name.startswith("ps:") else ready) if fast else period
                if w.asked_at is None or now - w.asked_at >= every - 1e-6:
                    out[w.name] = (w.address, w.since)
                    w.asked_at = now
            return out

    def record(self, answers: dict[str, Answer], at: float | None = None,
               asked: dict[str, float] | None = None) -> list[Watched]:
        """Note one poll's answers (task name -> Answer); return the tasks that answered
        for the first time since they started. ``asked``: the start time of each task when
        it was asked; an answer for a task restarted meanwhile is dropped."""
        at = self.clock() if at is None else at
        first = []
        with self._lock:
            for name, answer in answers.items():
                w = self._watched.get(name)
                if w is None or (asked is not None and asked.get(name) != w.since):
                    continue
                w.code = answer.code
                if answer.ok:
                    if w.first_answer is None:
                        w.first_answer = at
                        first.append(w)
                    w.answered_at = at
        return first

    def lost(self) -> list[Lost]:
        """Tasks that answered once and then nothing for ``lost_after`` seconds."""
        now = self.clock()
        after = self.lost_after
        with self._lock:
            return [Lost(w.name, w.address, w.since, now - w.answered_at, w.code)
                    for w in self._watched.values()
                    if w.answered_at is not None and not w.answering
                    and now - w.answered_at >= after]

    def answered(self, name: str, since: float | None) -> bool:
        """Whether ``name``, started at ``since``, answered since then."""
        with self._lock:
            w = self._watched.get(name)
            return w is not None and w.since == since and w.first_answer is not None

    def last_code(self, name: str) -> str:
        with self._lock:
            w = self._watched.get(name)
            return w.code if w is not None else "not asked yet"

    def not_answering(self) -> list[str]:
        """Tasks that answered once and did not answer the last probe."""
        with self._lock:
            return [w.name for w in self._watched.values()
                    if w.answered_at is not None and not w.answering]


# --------------------------------------------------------------------------- monitor
class LivenessMonitor:
    """The job loop's liveness monitor and readiness source (see the module docstring).

    ``tick`` (the job loop's thread) hands the running tasks to the probe thread, writes
    what it saw to the event log (``task_answering``: first answer after a start, with the
    seconds it took; ``task_unresponsive``) and answers ``lost`` once per start of a task
    gone silent. ``poll_once`` is one round of the probe thread (tests call it directly
    with ``threaded=False``)."""

    def __init__(self, unresponsive: float, events=None, *, period: float = PROBE_PERIOD,
                 startup: float = 60.0, prober: Prober | None = None,
                 pinger: Prober | None = None,
                 clock: Callable[[], float] = time.monotonic, threaded: bool = True):
        """``pinger`` asks every probe, ``prober`` GetStatus of a task that answered the
        PING and not yet GetStatus (given a ``prober`` alone, it asks every probe; by
        default ``PingProber`` and ``GrpcProber``)."""
        self.liveness = Liveness(unresponsive, period, startup, clock)
        self.events = events
        self.prober = prober
        self.pinger = pinger if pinger is not None or prober is None else prober
        self.clock = clock
        self.threaded = threaded
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reported: set[tuple[str, float]] = set()
        self._seen: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self.polls = 0

    # ---------------------------------------------------------------- job loop side
    def tick(self, tasks: list[TaskState]) -> Decision | None:
        targets = {t.name: (t.address, t.started_at) for t in tasks
                   if t.type in SERVER_ROLES and t.running and not t.stopped
                   and t.started_at is not None}
        for gone in self.liveness.watch(targets):
            for prober in self._probers():
                prober.forget(gone.address)
        if self.threaded and self._thread is None and targets:
            self._thread = threading.Thread(target=self._loop, name="liveness", daemon=True)
            self._thread.start()
        decision = None
        for lost in self.liveness.lost():
            if (lost.name, lost.since) in self._reported:
                continue
            self._reported.add((lost.name, lost.since))
            self._note("task_unresponsive", task=lost.name, address=lost.address,
                       code=lost.code, silent_for=round(lost.silent_for, 3))
            decision = Decision(LOST, self.reason(lost), (lost.name,))
            break       # one per turn: the next turn sees what the job loop did
        self._flush()
        return decision

    def answered(self, name: str, since: float | None) -> bool:
        return self.liveness.answered(name, since)

    def not_ready_reason(self, name: str, address: str) -> str:
        return not_ready_reason(name, address, self.liveness.startup,
                                self.liveness.last_code(name))

    def not_answering(self) -> list[str]:
        return self.liveness.not_answering()

    def reason(self, lost: Lost) -> str:
        return lost_reason(lost.name, lost.address, self.liveness.lost_after)

    def _probers(self) -> list[Prober]:
        """The probers made so far, each once."""
        return list({id(p): p for p in (self.prober, self.pinger) if p is not None}.values())

    def _note(self, event: str, **fields: Any) -> None:
        with self._lock:
            self._seen.append((event, fields))

    def _flush(self) -> None:
        with self._lock:
            seen, self._seen = self._seen, []
        if self.events is not None:
            for event, fields in seen:
                self.events.write(event, **fields)

    # ---------------------------------------------------------------- probe thread side
    def poll_once(self) -> None:
        targets = self.liveness.due()
        if not targets:
            return
        if self.pinger is None:
            from launcher.monitors.ping import PingProber

            self.pinger = PingProber()
        answers = self.pinger.ask_all(a for a, _ in targets.values())
        if self.pinger is not self.prober:
            # one that listens and never answered GetStatus is asked it once (does it serve
            # TensorFlow's gRPC?); that channel is closed once it answered
            listening = [a for n, (a, since) in targets.items()
                         if a in answers and answers[a].ok
                         and not self.liveness.answered(n, since)]
            if listening:
                if self.prober is None:
                    self.prober = GrpcProber()
                checked = self.prober.ask_all(listening)
                answers.update(checked)
                for address, answer in checked.items():
                    if answer.ok:
                        self.prober.forget(address)
        at = self.clock()
        by_name = {n: answers[a] for n, (a, _) in targets.items() if a in answers}
        asked = {n: since for n, (_, since) in targets.items()}
        for w in self.liveness.record(by_name, at, asked):
            self._note("task_answering", task=w.name, address=w.address,
                       after=round(at - w.since, 3))
        self.polls += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception as e:  # noqa: BLE001 - a probe error must not end the thread
                self._note("liveness_error", error=f"{type(e).__name__}: {e}")
            self._stop.wait(READY_PERIOD)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * PROBE_DEADLINE + 5)
        for prober in self._probers():
            prober.close()


def liveness_monitor(plan, backend, events=None) -> LivenessMonitor | None:
    """The liveness monitor for a plan, or None: the backend cannot reach its tasks
    (Kubernetes from outside: the engine's state alone), or ``timeouts.unresponsive`` is 0
    (gRPC checks off)."""
    unresponsive = plan.timeouts.unresponsive
    if not backend.reachable or unresponsive <= 0:
        return None
    return LivenessMonitor(unresponsive, events, startup=plan.timeouts.start)
