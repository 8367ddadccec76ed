"""One live run per model_dir: the lease.

Two runs that train into one model_dir delete each other's checkpoints (each one's
``keep_checkpoint_max``), flip the ``checkpoint`` state file between them and leave an
evaluator or a restart reading a mix. TensorFlow has no guard, so the launcher keeps one:
before any task starts, a run writes ``model_dir/.tfcluster-lease.json`` (run id, host,
launcher pid, start time, heartbeat) and holds it until the run ends, whatever the end
(success, failure, Ctrl-C, ``launch cancel``). The ps, the evaluator and a restarted
cluster are part of the same run; a run that comes back under the same run id (a Slurm
requeue) renews its own lease, and a requeued run keeps it while it waits.

- **Exclusive create** where the store has one: ``O_EXCL`` on a local filesystem (the
  whole file appears at once: it is written aside, then linked into place); a conditional
  put (``If-None-Match: *``) on S3. Any other fsspec store gets a documented best effort:
  look, then write.
- **Heartbeat**: the launcher rewrites the lease every ``HEARTBEAT_EVERY`` (30 s). A lease
  whose heartbeat is older than ``STALE_AFTER`` (3 heartbeats, 90 s) is taken to be left
  by a launcher that is gone, as is one whose launcher pid is dead on this host. Hosts'
  clocks must agree within that bound. A run that its engine still holds (a requeued
  batch job waiting in the queue: the holder keeps the run's backend and handle, and the
  caller's ``holds`` asks the engine) keeps its lease however old its heartbeat.
- **Refusal**: a second run on a held model_dir is refused in one line that names the run
  holding it, its host and how to follow it (exit 2, nothing started). ``--force`` takes
  over a lease whose holder cannot be proven gone, with a warning; two takers racing for a
  stale lease at the same instant are not told apart (best effort).
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from launcher.errors import UsageError

LEASE_FILE = ".tfcluster-lease.json"
HEARTBEAT_EVERY = 30.0
STALE_AFTER = 3 * HEARTBEAT_EVERY
FIELDS = ("run_id", "host", "pid", "started", "heartbeat")


class LeaseError(UsageError):
    """model_dir is held by another run, or its lease cannot be read: exit 2."""


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: the run and its launcher process."""

    run_id: str
    host: str
    pid: int
    started: float
    heartbeat: float
    pid_started: float | None = None     # the launcher's process start (pid reuse)
    run_dir: str = ""
    backend: str = ""                    # the run's backend and its handle in the engine:
    handle: dict[str, Any] = field(default_factory=dict)    # the run holds while it has it

    @classmethod
    def me(cls, run_id: str, run_dir: str = "", backend: str = "",
           handle: dict[str, Any] | None = None) -> Holder:
        """This launcher process as the holder of ``run_id``."""
        from launcher.records.registry import process_started

        now = time.time()
        return cls(run_id, socket.gethostname(), os.getpid(), now, now,
                   process_started(os.getpid()), run_dir, backend, dict(handle or {}))

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1).encode()

    @classmethod
    def parse(cls, raw: bytes) -> Holder:
        """The holder in a lease file; ValueError saying what is wrong with it."""
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ValueError(f"not JSON: {e}") from None
        if not isinstance(doc, dict):
            raise ValueError(f"not a JSON object but {type(doc).__name__}")
        missing = [k for k in FIELDS if k not in doc]
        if missing:
            raise ValueError(f"no {', '.join(missing)}")
        try:
            return cls(str(doc["run_id"]), str(doc["host"]), int(doc["pid"]),
                       float(doc["started"]), float(doc["heartbeat"]),
                       None if doc.get("pid_started") is None else float(doc["pid_started"]),
                       str(doc.get("run_dir") or ""), str(doc.get("backend") or ""),
                       dict(doc.get("handle") or {}))
        except (TypeError, ValueError) as e:
            raise ValueError(f"a field of the wrong type ({e})") from None

    def beat(self, now: float | None = None) -> Holder:
        return Holder(**{**asdict(self), "heartbeat": time.time() if now is None else now})


Holds = Callable[[Holder], bool]


def no_engine(_holder: Holder) -> bool:
    return False


def gone(holder: Holder, now: float, host: str | None = None,
         holds: Holds = no_engine) -> str | None:
    """Why the holder is provably gone, or None when it may still run: its launcher pid is
    dead on this host (or is another process now), or its heartbeat is older than
    STALE_AFTER. A run that its engine still holds (``holds``: queued, requeued, running)
    is not gone, whatever its launcher and heartbeat."""
    from launcher.records.registry import process_started

    if holder.handle and holds(holder):
        return None
    host = host or socket.gethostname()
    if holder.host == host:
        started = process_started(holder.pid)
        if started is None or (holder.pid_started is not None
                               and abs(started - holder.pid_started) >= 1.0):
            return f"its launcher (pid {holder.pid} on {holder.host}) is gone"
    age = now - holder.heartbeat
    if age > STALE_AFTER:
        return (f"its last heartbeat is {age:.0f}s old (a live launcher beats every "
                f"{HEARTBEAT_EVERY:.0f}s; the bound is {STALE_AFTER:.0f}s)")
    return None


def follow_command(holder: Holder) -> str:
    """How to follow the holding run from here: its run id, or its run directory when the
    id does not find it under this run root."""
    from launcher.records.registry import RunError, find_run

    try:
        if not holder.run_dir or os.path.samefile(find_run(holder.run_id), holder.run_dir):
            return f"launch status {holder.run_id}"
    except (RunError, OSError):
        if holder.run_dir and os.path.isdir(holder.run_dir):
            return f"launch status {holder.run_dir}"
    return f"launch status {holder.run_id}"


def describe(holder: Holder, now: float | None = None) -> str:
    age = (time.time() if now is None else now) - holder.heartbeat
    return (f"run {holder.run_id} (host {holder.host}, launcher pid {holder.pid}, "
            f"heartbeat {max(0.0, age):.0f}s ago)")


# ------------------------------------------------------------------ stores
class Store:
    """A lease file in some storage; ``exclusive`` says how ``create`` is guarded."""

    exclusive = "best effort (look, then write)"

    def __init__(self, fs: Any, path: str):
        self.fs = fs
        self.path = path

    def read(self) -> bytes | None:
        try:
            return self.fs.cat_file(self.path)
        except FileNotFoundError:
            return None

    def create(self, data: bytes) -> bool:
        """Write the lease unless one exists; False when one does."""
        if self.fs.exists(self.path):
            return False
        self.fs.makedirs(self.fs._parent(self.path), exist_ok=True)
        self.fs.pipe_file(self.path, data)
        return True

    def replace(self, data: bytes) -> None:
        self.fs.pipe_file(self.path, data)

    def remove(self) -> None:
        try:
            self.fs.rm_file(self.path)
        except FileNotFoundError:
            pass


class LocalStore(Store):
    exclusive = "O_EXCL"

    def __init__(self, path: str):
        super().__init__(None, path)

    def read(self) -> bytes | None:
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def _aside(self, data: bytes) -> str:
        """The lease written whole beside its place (a full disk leaves nothing behind)."""
        tmp = f"{self.path}.{os.getpid()}-{os.urandom(4).hex()}"
        try:
            with open(tmp, "xb") as f:
                f.write(data)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return tmp

    def create(self, data: bytes) -> bool:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        tmp = self._aside(data)
        try:
            os.link(tmp, self.path)        # fails when a lease exists: O_EXCL, whole file
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def replace(self, data: bytes) -> None:
        os.replace(self._aside(data), self.path)

    def remove(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class S3Store(Store):
    exclusive = "conditional put (If-None-Match: *)"

    def create(self, data: bytes) -> bool:
        try:
            self.fs.pipe_file(self.path, data, mode="create")
            return True
        except OSError as e:
            # s3fs turns 412 Precondition Failed into OSError(EINVAL, "At least one of the
            # pre-conditions you specified did not hold"); FileExistsError elsewhere
            said = f"{e} {e.__cause__!r}"
            if isinstance(e, FileExistsError) or re.search(r"pre-?condition|\b412\b", said,
                                                           re.I):
                return False
            raise


def store_for(storage, name: str = LEASE_FILE) -> Store:
    """The lease file of model_dir (a launcher.model_dir.ModelDir); ``name``: another file
    kept beside it the same way (the MLflow run's id, launcher/tracking/)."""
    url = storage.url.rstrip("/")
    if "://" not in url or url.startswith("file://"):
        return LocalStore(os.path.join(url.removeprefix("file://"), name))
    import fsspec

    fs, path = fsspec.core.url_to_fs(url, **storage.options)
    lease = f"{path}/{name}"
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return S3Store(fs, lease) if {"s3", "s3a"} & set(protocols) else Store(fs, lease)


def lease_url(url: str) -> str:
    """Where the lease of model_dir ``url`` is."""
    return f"{url.rstrip('/')}/{LEASE_FILE}"


# ------------------------------------------------------------------ reading
def read_holder(store: Store) -> Holder | None:
    """The holder of the lease, None when there is none; LeaseError (one line) when the
    file cannot be read or is not a lease."""
    raw = store.read()
    if raw is None:
        return None
    try:
        return Holder.parse(raw)
    except ValueError as e:
        raise LeaseError(corrupt_message(store, e)) from None


def corrupt_message(store: Store, why: Exception) -> str:
    return (f"model_dir lease {store.path} cannot be read ({why}): make sure no run uses "
            "this model_dir, then remove the file or launch again with --force")


def held_message(url: str, holder: Holder, now: float | None = None) -> str:
    return (f"model_dir {url} is in use by {describe(holder, now)}: follow it with "
            f"`{follow_command(holder)}`; wait for it to end (or --force if it is gone)")


def check(storage, run_id: str | None = None, force: bool = False,
          holds: Holds = no_engine) -> None:
    """Before anything is acquired: refuse (LeaseError) when model_dir is held by a live
    run other than ``run_id``. Writes nothing."""
    if force:
        return
    try:
        holder = read_holder(store_for(storage))
    except LeaseError:
        raise
    except Exception:  # noqa: BLE001 - the storage check and acquire() say what is wrong
        return
    if holder is None or holder.run_id == run_id:
        return
    if gone(holder, time.time(), holds=holds) is None:
        raise LeaseError(held_message(storage.url, holder))


def dry_run_line(storage, run_id: str, holds: Holds = no_engine) -> str:
    """What --dry-run says about the lease: free, held (and what launch would do)."""
    try:
        holder = read_holder(store_for(storage))
    except LeaseError as e:
        return f"lease: {e}"
    except Exception as e:  # noqa: BLE001 - a dry run reports, never fails, on storage
        return f"lease: {lease_url(storage.url)} cannot be read now ({type(e).__name__}: {e})"
    if holder is None:
        return f"lease: free ({lease_url(storage.url)})"
    if holder.run_id == run_id:
        return f"lease: held by this run ({describe(holder)}): it is renewed"
    why = gone(holder, time.time(), holds=holds)
    if why:
        return f"lease: left by {describe(holder)}, {why}: it would be taken over"
    return (f"lease: held by {describe(holder)}: launch would refuse to start "
            f"(follow it with `{follow_command(holder)}`)")


def status_line(state: dict, lost: bool) -> str | None:
    """What ``launch status`` says about the run's lease (state.json keeps where it is);
    ``lost``: the run's launcher died without recording its end."""
    lease = state.get("lease")
    if not isinstance(lease, dict) or not lease.get("file"):
        return None
    where = lease["file"]
    if not lease.get("held"):
        return f"lease: released ({where})"
    if lost:
        return (f"lease: left in {where}; the next run on this model_dir takes it over (its "
                "launcher is gone)")
    if "://" in where and not where.startswith("file://"):
        return f"lease: held ({where})"
    try:
        holder = read_holder(LocalStore(where.removeprefix("file://")))
    except (LeaseError, OSError) as e:
        return f"lease: {where}: {e}"
    if holder is None:
        return f"lease: {where} is missing"
    if holder.run_id != state.get("run_id"):
        return f"lease: taken by {describe(holder)} ({where})"
    return f"lease: held, heartbeat {time.time() - holder.heartbeat:.0f}s ago ({where})"


# ------------------------------------------------------------------ holding
class Lease:
    """A held lease: heartbeat on a thread of its own, release at the end."""

    def __init__(self, store: Store, holder: Holder, url: str):
        self.store = store
        self.holder = holder
        self.url = url
        self.lost_to: Holder | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def describe(self) -> dict[str, Any]:
        """For state.json: where the lease is and since when this run holds it."""
        return {"file": lease_url(self.url), "held": self._thread is not None
                and not self._stop.is_set() and self.lost_to is None,
                "since": self.holder.started, "heartbeat": self.holder.heartbeat,
                "lost_to": self.lost_to.run_id if self.lost_to else None}

    def beat(self) -> bool:
        """Renew the heartbeat; False (and ``lost_to`` set) when another run holds the
        lease now (it was taken with --force)."""
        try:
            raw = self.store.read()
            current = Holder.parse(raw) if raw is not None else None
        except ValueError:
            current = None
        if current is not None and current.run_id != self.holder.run_id:
            self.lost_to = current
            return False
        self.holder = self.holder.beat()
        self.store.replace(self.holder.to_json())
        return True

    def start_heartbeat(self, on_lost: Callable[[Holder], None] | None = None,
                        every: float | None = None) -> None:
        def loop() -> None:
            while not self._stop.wait(HEARTBEAT_EVERY if every is None else every):
                try:
                    if not self.beat():
                        if on_lost is not None and self.lost_to is not None:
                            on_lost(self.lost_to)
                        return
                except Exception:  # noqa: BLE001 - storage hiccup: the next beat retries
                    continue

        self._thread = threading.Thread(target=loop, name="tfcluster-lease", daemon=True)
        self._thread.start()

    def release(self, keep: bool = False) -> None:
        """Stop the heartbeat; remove the lease if it is still this run's (``keep``: a
        requeued run holds it until it comes back under the same run id)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if keep or self.lost_to is not None:
            return
        try:
            raw = self.store.read()
            if raw is None or Holder.parse(raw).run_id != self.holder.run_id:
                return
            self.store.remove()
        except Exception:  # noqa: BLE001 - a lease left behind is taken over (pid, heartbeat)
            pass


def acquire(storage, run_id: str, run_dir: str = "", force: bool = False,
            warn: Callable[[str], None] = lambda _m: None, backend: str = "",
            handle: dict[str, Any] | None = None, holds: Holds = no_engine) -> Lease:
    """Take the lease of model_dir for ``run_id`` (see the module docstring); LeaseError
    (one line) when another live run holds it and ``force`` is not given, or when the
    storage refuses the lease."""
    try:
        me = Holder.me(run_id, os.path.abspath(run_dir) if run_dir else "", backend, handle)
        return _acquire(storage, me, force, warn, holds)
    except LeaseError:
        raise
    except Exception as e:  # noqa: BLE001 - any store's error, in one line
        raise LeaseError(f"model_dir lease {lease_url(storage.url)} cannot be written "
                         f"({type(e).__name__}: {e})") from None


def _acquire(storage, me: Holder, force: bool, warn: Callable[[str], None],
             holds: Holds) -> Lease:
    store = store_for(storage)
    run_id = me.run_id
    for _ in range(5):
        if store.create(me.to_json()):
            return Lease(store, me, storage.url)
        raw = store.read()
        if raw is None:
            continue                                # released meanwhile: try again
        try:
            holder = Holder.parse(raw)
        except ValueError as e:
            if not force:
                raise LeaseError(corrupt_message(store, e)) from None
            warn(f"--force: the model_dir lease {store.path} could not be read ({e}); "
                 "this run takes it")
        else:
            if holder.run_id != run_id:
                why = gone(holder, time.time(), holds=holds)
                if why is None and not force:
                    raise LeaseError(held_message(storage.url, holder))
                if why is not None:
                    warn(f"model_dir lease taken over from {describe(holder)}: {why}")
                else:
                    warn(f"--force: model_dir lease taken from {describe(holder)}, which may "
                         "still run: two runs writing one model_dir lose or mix checkpoints")
            me = Holder(**{**asdict(me), "started": holder.started}) \
                if holder.run_id == run_id else me
        store.replace(me.to_json())
        return Lease(store, me, storage.url)
    raise LeaseError(f"model_dir lease {store.path} keeps appearing and vanishing; "
                     "another launcher is starting on this model_dir")
