"""Readiness and liveness of the tasks, asked of TensorFlow's own gRPC server.

Every ps, chief, master and worker of a TensorFlow cluster serves gRPC at its TF_CONFIG
address. One unary call of ``/tensorflow.WorkerService/GetStatus`` with an empty request
(raw bytes: no protobuf needed) answers in milliseconds from a live task, runs into its
deadline (DEADLINE_EXCEEDED) when the process is frozen or its host cut off, and fails at
once (UNAVAILABLE) when nothing listens there yet.

- ``GrpcProber`` asks many addresses at once (one channel per address, kept between polls),
  so a poll takes at most one deadline however many tasks are silent.
- ``wait_ready`` (readiness): poll until every given task answered, within a timeout;
  ``NotReady`` names the first one that never did.
- ``Liveness`` (rules, no I/O, injected clock): a task that answered once since it started
  and then has not answered for ``unresponsive`` seconds is lost; one that never answered
  is still starting (importing TensorFlow), never lost.
- ``LivenessMonitor``: probes every task with a TF server every ``period`` seconds in a
  thread of its own and tells the job loop, which never waits for it, which task is lost.

Backends whose tasks the launcher cannot reach (Kubernetes, from outside the cluster) set
``Backend.reachable = False``: there the job relies on the engine's state alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Callable, Protocol

GET_STATUS = "/tensorflow.WorkerService/GetStatus"
SERVER_ROLES = ("ps", "chief", "master", "worker")   # the evaluator runs no TF server
PROBE_PERIOD = 2.0        # seconds between liveness polls
PROBE_DEADLINE = 1.0      # seconds one GetStatus call may take
READY_PERIOD = 0.1        # seconds between readiness polls
# No proxy (grpcio honours http_proxy), and a short reconnect backoff so a task that starts
# listening is seen within a second instead of after grpc's default backoff (up to 120 s).
CHANNEL_OPTIONS = (
    ("grpc.enable_http_proxy", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


@dataclass(frozen=True)
class Answer:
    """One probe: ``ok`` when the server answered; ``code`` is grpc's status name
    (OK, DEADLINE_EXCEEDED: frozen or cut off, UNAVAILABLE: nothing listens)."""

    ok: bool
    code: str
    took: float = 0.0


class Prober(Protocol):
    def ask_all(self, addresses: Iterable[str]) -> dict[str, Answer]: ...

    def forget(self, address: str) -> None: ...

    def close(self) -> None: ...


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


# --------------------------------------------------------------------------- readiness
class NotReady(Exception):
    """A task did not answer TensorFlow's gRPC within the readiness timeout."""

    def __init__(self, task: str, address: str, waited: float, code: str):
        self.task, self.address, self.waited, self.code = task, address, waited, code
        super().__init__(f"{task} ({address}) did not answer TensorFlow's gRPC within "
                         f"timeouts.start = {waited:g} s (last answer: {code}); trainers "
                         f"not started: is its command starting a TensorFlow server?")


def wait_ready(targets: dict[str, str], prober: Prober, timeout: float, *,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep,
               check: Callable[[], None] | None = None,
               period: float = READY_PERIOD) -> dict[str, float]:
    """Poll ``targets`` (task name -> address) until each answered; return the clock time at
    which each first answered. ``check`` runs between polls and may raise to abandon the
    wait (a task exited, the launcher was interrupted). Raises NotReady for the first task
    still silent after ``timeout`` seconds."""
    started = clock()
    pending = dict(targets)
    answered: dict[str, float] = {}
    last: dict[str, str] = {}
    while pending:
        answers = prober.ask_all(pending.values())
        now = clock()
        for name, address in list(pending.items()):
            answer = answers.get(address)
            if answer is not None and answer.ok:
                answered[name] = now
                del pending[name]
            else:
                last[name] = answer.code if answer else "no answer"
        if not pending:
            break
        if check is not None:
            check()
        if now - started >= timeout:
            name, address = next(iter(pending.items()))
            raise NotReady(name, address, timeout, last.get(name, "no answer"))
        sleep(period)
    return answered


# --------------------------------------------------------------------------- liveness
@dataclass
class Watched:
    """One running task with a TF server, since its last start."""

    name: str
    address: str
    since: float                      # when it started (the generation of this watch)
    answered_at: float | None = None  # its last answer
    first_answer: float | None = None
    code: str = "not asked"           # the last probe's outcome

    @property
    def answering(self) -> bool:
        return self.code == "OK"


@dataclass(frozen=True)
class Lost:
    name: str
    address: str
    since: float          # the start of the task that was lost
    silent_for: float     # seconds since its last answer
    code: str             # the last probe's outcome


def lost_reason(name: str, address: str, unresponsive: float) -> str:
    return f"{name} ({address}) has not answered TensorFlow's gRPC for {unresponsive:g} s"


class Liveness:
    """The rules (see the module docstring); thread-safe, clock injected."""

    def __init__(self, unresponsive: float, clock: Callable[[], float] = time.monotonic):
        self.unresponsive = unresponsive
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

    def targets(self) -> dict[str, str]:
        with self._lock:
            return {n: w.address for n, w in self._watched.items()}

    def record(self, answers: dict[str, Answer], at: float | None = None) -> list[Watched]:
        """Note one poll's answers (task name -> Answer); return the tasks that answered
        for the first time since they started."""
        at = self.clock() if at is None else at
        first = []
        with self._lock:
            for name, answer in answers.items():
                w = self._watched.get(name)
                if w is None:
                    continue
                w.code = answer.code
                if answer.ok:
                    if w.first_answer is None:
                        w.first_answer = at
                        first.append(w)
                    w.answered_at = at
        return first

    def lost(self) -> list[Lost]:
        """Tasks that answered once and then nothing for ``unresponsive`` seconds."""
        now = self.clock()
        with self._lock:
            return [Lost(w.name, w.address, w.since, now - w.answered_at, w.code)
                    for w in self._watched.values()
                    if w.answered_at is not None and not w.answering
                    and now - w.answered_at >= self.unresponsive]

    def not_answering(self) -> list[Watched]:
        """Tasks that answered once and did not answer the last probe."""
        with self._lock:
            return [w for w in self._watched.values()
                    if w.answered_at is not None and not w.answering]


class LivenessMonitor:
    """Probes the running tasks' TF servers in its own thread (see the module docstring).

    ``update(targets)`` (from the job loop's thread) says which tasks run now;
    ``take_lost()`` returns each newly lost task once; ``take_events()`` the events seen
    since the last call (first answers, losses) for the job's event log."""

    def __init__(self, unresponsive: float, period: float = PROBE_PERIOD,
                 prober: Prober | None = None, clock: Callable[[], float] = time.monotonic):
        self.period = period
        self.liveness = Liveness(unresponsive, clock)
        self.prober = prober
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reported: set[tuple[str, float]] = set()
        self._events: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self.polls = 0

    def update(self, targets: dict[str, tuple[str, float]]) -> None:
        for gone in self.liveness.watch(targets):
            if self.prober is not None:
                self.prober.forget(gone.address)
        if self._thread is None:
            if self.prober is None:
                self.prober = GrpcProber()
            self._thread = threading.Thread(target=self._loop, name="liveness", daemon=True)
            self._thread.start()

    def poll_once(self) -> None:
        targets = self.liveness.targets()
        if not targets or self.prober is None:
            return
        answers = self.prober.ask_all(targets.values())
        at = self.clock()
        by_name = {n: answers[a] for n, a in targets.items() if a in answers}
        first = self.liveness.record(by_name, at)
        self.polls += 1
        with self._lock:
            for w in first:
                self._events.append(("task_answering", {
                    "task": w.name, "address": w.address,
                    "after": round(at - w.since, 3)}))

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.poll_once()
            except Exception as e:  # noqa: BLE001 - never let a probe error end the thread
                with self._lock:
                    self._events.append(("liveness_error", {"error": f"{type(e).__name__}: "
                                                                     f"{e}"}))
            self._stop.wait(max(0.0, self.period - (time.monotonic() - began)))

    def take_lost(self) -> list[Lost]:
        out = []
        for lost in self.liveness.lost():
            key = (lost.name, lost.since)
            if key in self._reported:
                continue
            self._reported.add(key)
            out.append(lost)
            with self._lock:
                self._events.append(("task_unresponsive", {
                    "task": lost.name, "address": lost.address, "code": lost.code,
                    "silent_for": round(lost.silent_for, 3)}))
        return out

    def take_events(self) -> list[tuple[str, dict[str, Any]]]:
        with self._lock:
            events, self._events = self._events, []
        return events

    def reason(self, lost: Lost) -> str:
        return lost_reason(lost.name, lost.address, self.liveness.unresponsive)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.period + PROBE_DEADLINE + 5)
        if self.prober is not None:
            self.prober.close()
