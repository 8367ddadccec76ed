"""The evaluator loop with fake checkpoints: skip what vanished, stop at the final step,
never loop for ever, resume after a restart. The metrics file format."""

from __future__ import annotations

import json

from support import FakeClock

from orchestrator.evaluation import CheckpointGone, follow_checkpoints
from orchestrator.metrics_file import (
    METRICS_FILE,
    MetricsRecord,
    MetricsWriter,
    clean_metrics,
    latest_by_split,
    read_metrics,
)


class FakeDir:
    """A model_dir whose newest checkpoint advances on every look; some get deleted."""

    def __init__(self, sequence: list[str | None], steps: dict[str, int], gone: set[str]):
        self.sequence = list(sequence)
        self.steps = steps
        self.gone = gone
        self.evaluated: list[tuple[str, str]] = []

    def newest(self) -> str | None:
        return self.sequence.pop(0) if len(self.sequence) > 1 else self.sequence[0]

    def evaluate(self, path: str, split: str) -> tuple[int, dict[str, float]]:
        if path in self.gone:
            raise CheckpointGone(path)
        self.evaluated.append((path, split))
        step = self.steps[path]
        return step, {"accuracy": step / 1000}


def run(fake: FakeDir, tmp_path, **kw):
    clock = FakeClock()
    return follow_checkpoints(fake.newest, fake.evaluate, MetricsWriter(str(tmp_path)),
                              clock=clock, sleep=clock.sleep, log=lambda m: None, **kw)


def test_skips_a_deleted_checkpoint_and_stops_at_the_final_one(tmp_path):
    fake = FakeDir([None, "m/ckpt-1", "m/ckpt-1", "m/ckpt-2", "m/ckpt-3", "m/ckpt-4"],
                   {"m/ckpt-1": 100, "m/ckpt-3": 300, "m/ckpt-4": 400}, gone={"m/ckpt-2"})
    outcome = run(fake, tmp_path, splits=("eval", "train"), max_steps=300)
    assert outcome.reason == "final"
    assert outcome.skipped == ["m/ckpt-2"]
    assert fake.evaluated == [("m/ckpt-1", "eval"), ("m/ckpt-1", "train"),
                              ("m/ckpt-3", "eval"), ("m/ckpt-3", "train")]
    lines = (tmp_path / METRICS_FILE).read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [100, 100, 300, 300]
    first = json.loads(lines[0])
    assert set(first) == {"step", "checkpoint", "split", "metrics", "time"}
    assert first["split"] == "eval" and first["metrics"] == {"accuracy": 0.1}


def test_gives_up_when_no_new_checkpoint_comes(tmp_path):
    fake = FakeDir(["m/ckpt-1"], {"m/ckpt-1": 100}, gone=set())
    outcome = run(fake, tmp_path, max_steps=1000, idle_timeout=30, poll_secs=1)
    assert outcome.reason == "idle"
    assert [r.step for r in outcome.records] == [100]


def test_a_restarted_evaluator_does_not_evaluate_again(tmp_path):
    writer = MetricsWriter(str(tmp_path))
    writer.append(MetricsRecord(100, "m/ckpt-1", "eval", {"accuracy": 0.5}, 1.0))
    fake = FakeDir(["m/ckpt-1", "m/ckpt-2"], {"m/ckpt-1": 100, "m/ckpt-2": 200}, set())
    outcome = run(fake, tmp_path, max_steps=200)
    assert fake.evaluated == [("m/ckpt-2", "eval")]
    assert [r.step for r in read_metrics(str(tmp_path))] == [100, 200]
    again = FakeDir(["m/ckpt-2"], {"m/ckpt-2": 200}, set())
    assert run(again, tmp_path, max_steps=200).reason == "final"
    assert again.evaluated == [] and outcome.reason == "final"


def test_reader_skips_a_half_written_line_and_picks_the_latest(tmp_path):
    good = MetricsRecord(5, "m/ckpt-5", "eval", {"auc": 0.7}, 2.0).to_json()
    older = MetricsRecord(3, "m/ckpt-3", "eval", {"auc": 0.6}, 1.0).to_json()
    (tmp_path / METRICS_FILE).write_text(f"{good}\n{older}\nnot json\n{{\"step\": 9, \"che")
    records = read_metrics(str(tmp_path))
    assert [r.step for r in records] == [5, 3]
    assert latest_by_split(records)["eval"].metrics == {"auc": 0.7}
    assert read_metrics(str(tmp_path / "missing")) == []


def test_clean_metrics_drops_step_and_what_json_cannot_hold():
    import math

    assert clean_metrics({"global_step": 7, "loss": 0.5, "auc": math.nan, "name": "x",
                          "n": 3}) == {"loss": 0.5, "n": 3.0}


def test_writer_works_through_fsspec_memory():
    writer = MetricsWriter("memory://evaltest/model")
    writer.append(MetricsRecord(1, "c", "train", {"loss": 1.0}, 1.0))
    writer.append(MetricsRecord(2, "c2", "train", {"loss": 0.5}, 2.0))
    assert [r.step for r in read_metrics("memory://evaltest/model")] == [1, 2]
