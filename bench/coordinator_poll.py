"""Time and storage requests of one coordinator poll, with few and with many old files in
model_dir, on local disk and on S3 (a real SeaweedFS server started for the run).

    .venv/bin/python bench/coordinator_poll.py [--files 10 10000] [--polls 200]

Per storage and number of old files (old checkpoint files no longer named by the state
file, as a job with keep_checkpoint_max=None leaves them), it measures:
- steady poll: nothing new since the last poll (the common case);
- new-checkpoint poll: a new checkpoint was named since the last poll (2 ps shards);
- events listing: finding the chief's events file (done at most every 30 s, not per poll).
The cases of one storage are measured interleaved (round after round), so that the noise of
a busy machine falls on all of them alike.
Requests are storage calls: S3 API operations (counted at s3fs's ``_call_s3``), and fsspec
method calls on local disk. Goal: the 10,000-file poll within 1.5x of the 10-file poll.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "coordinator")]

import fsspec  # noqa: E402
from infra.s3 import start_s3  # noqa: E402
from tf_writes import FakeTrainer  # noqa: E402

from orchestrator.checkpoints import CheckpointReader  # noqa: E402
from orchestrator.coordinator import EVENTS_PREFIX, Coordinator  # noqa: E402


class Counter:
    def __init__(self):
        self.calls: collections.Counter = collections.Counter()

    def total(self) -> int:
        return sum(self.calls.values())


class CountingFS:
    """Local disk: count every fsspec call the coordinator makes."""

    def __init__(self, fs, counter: Counter):
        self._fs, self._counter = fs, counter

    def __getattr__(self, name):
        attr = getattr(self._fs, name)
        if not callable(attr) or name.startswith("_") or name == "unstrip_protocol":
            return attr

        def wrapped(*args, **kwargs):
            self._counter.calls[name] += 1
            return attr(*args, **kwargs)
        return wrapped

    def _strip_protocol(self, path):
        return self._fs._strip_protocol(path)


def count_s3(fs, counter: Counter) -> None:
    """S3: count API operations (GET, HEAD, LIST...) as s3fs sends them."""
    original = fs._call_s3

    async def counted(method, *args, **kwargs):
        counter.calls[method] += 1
        return await original(method, *args, **kwargs)
    fs._call_s3 = counted


def fill(fs, url: str, old_files: int) -> FakeTrainer:
    """model_dir with ``old_files`` old checkpoint files, an events file, a metrics file and
    3 checkpoints named by the state file."""
    fs.makedirs(url, exist_ok=True)
    files = {}
    for i in range(old_files):
        n, part = divmod(i, 4)
        suffix = (".index", ".meta", ".data-00000-of-00002", ".data-00001-of-00002")[part]
        files[f"{url}/model.ckpt-{n}{suffix}"] = b"old"
    files[f"{url}/events.out.tfevents.1796030000.host"] = b"e" * 100
    files[f"{url}/tfcluster_metrics.jsonl"] = (
        b'{"step": 1, "checkpoint": "model.ckpt-1", "split": "eval", '
        b'"metrics": {"auc": 0.5}, "time": 1.0}\n')
    items = list(files.items())
    for start in range(0, len(items), 500):
        fs.pipe(dict(items[start:start + 500]))
    trainer = FakeTrainer(fs, url, shards=2, keep_max=3)
    for step in (1_000_000, 1_000_100, 1_000_200):
        trainer.save(step)
    return trainer


@dataclass
class Case:
    label: str
    coordinator: Coordinator
    trainer: FakeTrainer
    counter: Counter
    steady: list = field(default_factory=list)
    steady_requests: int = 0
    steady_kinds: collections.Counter = field(default_factory=collections.Counter)
    new: list = field(default_factory=list)
    new_requests: int = 0
    listing: list = field(default_factory=list)
    listing_requests: int = 0


def timed(case: Case, fn) -> tuple[float, collections.Counter]:
    case.counter.calls.clear()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0, collections.Counter(case.counter.calls)


def measure(cases: list[Case], polls: int) -> list[dict]:
    """Interleaved: every round polls each case once, so load on the machine (and the
    server's background work) falls on all cases alike."""
    for case in cases:
        case.coordinator.poll_once()
        case.coordinator.poll_once()
    for _ in range(polls):
        for case in cases:
            secs, calls = timed(case, case.coordinator.poll_once)
            case.steady.append(secs)
            case.steady_requests += sum(calls.values())
            case.steady_kinds.update(calls)
    step = 2_000_000
    for _ in range(max(5, polls // 5)):
        step += 100
        for case in cases:
            case.trainer.save(step)
            secs, calls = timed(case, case.coordinator.poll_once)
            assert case.coordinator.progress().step == step, case.coordinator.progress()
            case.new.append(secs)
            case.new_requests += sum(calls.values())
    for _ in range(5):
        for case in cases:
            secs, calls = timed(case, lambda c=case: c.coordinator.reader.list_prefix(
                EVENTS_PREFIX))
            case.listing.append(secs)
            case.listing_requests = sum(calls.values())
    return [{"label": c.label, "steady_ms": statistics.median(c.steady) * 1000,
             "steady_p95_ms": sorted(c.steady)[int(0.95 * (len(c.steady) - 1))] * 1000,
             "steady_requests": c.steady_requests / len(c.steady),
             "steady_kinds": {k: v / len(c.steady) for k, v in c.steady_kinds.items()},
             "new_ms": statistics.median(c.new) * 1000,
             "new_requests": c.new_requests / len(c.new),
             "listing_ms": statistics.median(c.listing) * 1000,
             "listing_requests": c.listing_requests} for c in cases]


def local_case(old_files: int, tmp: Path) -> Case:
    url = str(tmp / f"local-{old_files}" / "model")
    fs = fsspec.filesystem("file")
    trainer = fill(fs, url, old_files)
    counter = Counter()
    reader = CheckpointReader(url, fs=CountingFS(fs, counter))
    return Case(f"local, {old_files} old files", Coordinator(url, max_steps=10**9,
                                                             reader=reader), trainer, counter)


def s3_case(server, old_files: int) -> Case:
    url = server.url(f"bench-{old_files}/model")
    t0 = time.perf_counter()
    trainer = fill(server.filesystem(), url, old_files)
    print(f"  (wrote {old_files} files to S3 in {time.perf_counter() - t0:.1f}s)",
          file=sys.stderr)
    counter = Counter()
    reader = CheckpointReader(url, dict(server.storage_options(), skip_instance_cache=True))
    count_s3(reader.fs, counter)
    return Case(f"S3, {old_files} old files", Coordinator(url, max_steps=10**9, reader=reader),
                trainer, counter)


def table(rows: list[dict]) -> str:
    head = ("storage, model_dir", "steady poll (median / p95)", "requests", "new-ckpt poll",
            "requests", "events listing", "requests")
    lines = [head]
    for r in rows:
        lines.append((r["label"], f"{r['steady_ms']:.2f} / {r['steady_p95_ms']:.2f} ms",
                      f"{r['steady_requests']:.0f}", f"{r['new_ms']:.2f} ms",
                      f"{r['new_requests']:.0f}", f"{r['listing_ms']:.2f} ms",
                      str(r["listing_requests"])))
    widths = [max(len(x[i]) for x in lines) for i in range(len(head))]
    out = ["| " + " | ".join(c.ljust(w) for c, w in zip(x, widths)) + " |" for x in lines]
    out.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, nargs="+", default=[10, 10_000])
    ap.add_argument("--polls", type=int, default=200, help="steady polls per case (local)")
    ap.add_argument("--s3-polls", type=int, default=60, help="steady polls per case (S3)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="coordinator-poll-") as tmp:
        rows += measure([local_case(n, Path(tmp)) for n in args.files], args.polls)
        server = start_s3(Path(tmp) / "seaweedfs")
        try:
            rows += measure([s3_case(server, n) for n in args.files], args.s3_polls)
        finally:
            server.stop()
    print(table(rows))
    for storage in ("local", "S3"):
        mine = [r for r in rows if r["label"].startswith(storage)]
        if len(mine) >= 2:
            ratio = mine[-1]["steady_ms"] / mine[0]["steady_ms"]
            new_ratio = mine[-1]["new_ms"] / mine[0]["new_ms"]
            print(f"{storage}: {mine[-1]['label'].split(', ')[1]} vs "
                  f"{mine[0]['label'].split(', ')[1]}: steady poll x{ratio:.2f}, "
                  f"new-checkpoint poll x{new_ratio:.2f}")
    print("steady poll requests:",
          {r["label"]: r["steady_kinds"] for r in rows})


if __name__ == "__main__":
    main()
