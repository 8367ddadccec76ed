"""Each engine split by caller (launcher/backends/engine.py): ``--detach`` asks the registry
for the engine's submitter, whose batch request (plain data) is what ``--detach --dry-run``
prints and what ``submit`` hands the engine. Here without an engine: Slurm's ``sbatch`` and
Kubernetes' ``kubectl`` are small recording programs on PATH (the real ones: tests/slurm,
tests/kubernetes)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from launcher import api
from launcher.backends import submitter
from launcher.errors import PreflightError


def prepared(tmp_path: Path, backend: str, **overrides):
    spec = {"name": "pieces", "cluster": {"chief": ["a"], "worker": ["b", "b"], "ps": ["b"]},
            "command": ["python3", "train.py"], "model_dir": str(tmp_path / "model"),
            "max_steps": 10, "backend": backend, "check_storage": False,
            "env": {"HF_TOKEN": "s3cr3t"}, **overrides}
    spec_obj, attached = api.prepare(spec)
    return attached, api.make_plan(spec_obj, attached, None, run_id="r-1")


def program(tmp_path: Path, monkeypatch, name: str, script: str) -> Path:
    """``name`` on PATH: a shell script that records its arguments in ``name``.args."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / (name + ".args")}\n{script}\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return tmp_path / (name + ".args")


def test_slurm_dry_run_and_detached_dry_run_show_the_same_job_steps(tmp_path):
    """``--dry-run`` shows the allocation and its steps; ``--detach --dry-run`` the batch
    script and, inside it, the very same steps: both render one plain-data object."""
    attached, plan = prepared(tmp_path, "slurm", slurm={"partition": "debug"},
                              resources={"ps": {"gpus": 1}})
    lines = attached.step_lines(plan)
    request = submitter(attached).request(plan, str(tmp_path / "run"), ["launch", "again"])
    attached_text, detached_text = attached.describe(plan), request.text()
    assert lines.steps and attached_text == lines.text()
    shown = "\n".join(lines.steps)
    assert attached_text.count(shown) == 1 and detached_text.endswith(shown)
    assert any("ps:0" in step and "--gpus=1" in step for step in lines.steps)  # own step
    assert "#SBATCH --nodes=2" in detached_text and "#SBATCH --partition=debug" in \
        detached_text and "exec launch again" in detached_text
    assert "salloc" not in detached_text and "scancel" not in detached_text


def test_slurm_submit_runs_sbatch_on_the_script_the_dry_run_shows(tmp_path, monkeypatch):
    args = program(tmp_path, monkeypatch, "sbatch", 'echo "42;cluster"')
    attached, plan = prepared(tmp_path, "slurm")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    submits = submitter(attached)
    request = submits.request(plan, str(run_dir), ["launch", "again"])
    handle = submits.submit(plan, request)
    assert handle == {"slurm_job": "42", "batch_script": str(run_dir / "batch.sh"),
                      "batch": True}
    script = (run_dir / "batch.sh").read_text()
    assert request.text().split("\n\n", 1)[1].startswith(script)
    assert args.read_text().split() == ["--parsable", str(run_dir / "batch.sh")]


def test_a_refused_sbatch_is_one_line_with_its_words(tmp_path, monkeypatch):
    program(tmp_path, monkeypatch, "sbatch", 'echo "invalid partition specified" >&2; exit 1')
    attached, plan = prepared(tmp_path, "slurm")
    submits = submitter(attached)
    (tmp_path / "run").mkdir()
    with pytest.raises(PreflightError, match="^sbatch failed: invalid partition specified$"):
        submits.submit(plan, submits.request(plan, str(tmp_path / "run"), ["launch"]))


@pytest.mark.parametrize("mode", ["tfjob", "jobset"])
def test_kubernetes_submit_applies_the_objects_the_dry_run_shows(tmp_path, monkeypatch,
                                                                 mode):
    """The request's text is the dry run's YAML with secrets masked; what is applied has
    them, and the handle names the objects for ``launch status`` and ``cancel``."""
    applied = tmp_path / "applied.json"
    program(tmp_path, monkeypatch, "kubectl",
            f'case "$1" in apply) cat > {applied};; esac; exit 0')
    attached, plan = prepared(tmp_path, "kubernetes", kubernetes={"mode": mode})
    submits = submitter(attached)
    request = submits.request(plan, str(tmp_path / "run"), ["launch"])
    assert request.text() == attached.describe(plan)
    assert "s3cr3t" not in request.text() and "***" in request.text()
    handle = submits.submit(plan, request)
    assert "s3cr3t" in applied.read_text()
    k8s = handle["kubernetes"]
    assert (k8s["kind"], k8s["name"], k8s["namespace"]) == (mode, "pieces", "default")
    assert k8s["run"] == "r-1"


def test_kubernetes_plain_jobs_keep_their_launcher(tmp_path):
    attached, _ = prepared(tmp_path, "kubernetes", kubernetes={"mode": "plain"})
    assert submitter(attached) is None


def test_slurm_takes_one_partition_and_time_for_the_whole_allocation(tmp_path):
    """A role's own partition or time limit is refused unless it is the allocation's (from
    the slurm section, else resources.default); resources.default's is the allocation's."""
    from launcher.errors import SpecError

    for resources, field in (({"worker": {"time": "10"}}, "resources.worker.time"),
                             ({"default": {"partition": "a"}, "ps": {"partition": "b"}},
                              "resources.ps.partition")):
        with pytest.raises(SpecError, match=f"^{field}: the Slurm backend runs every task in "
                                            "one allocation"):
            prepared(tmp_path, "slurm", resources=resources)
    attached, _ = prepared(tmp_path, "slurm", resources={"default": {"partition": "a"},
                                                          "worker": {"partition": "a"}})
    assert "--partition=a" in attached.allocation.options
    attached, _ = prepared(tmp_path, "slurm", slurm={"time": "30"},
                           resources={"chief": {"time": "30"}})
    assert "--time=30" in attached.allocation.options
