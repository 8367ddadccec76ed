"""Every bad input of the corpus: exit status 2, exactly the expected message, nothing
started, nothing written into model_dir. And a property-based fuzz of the spec parser: it
ends in a Spec or a SpecError, never in a traceback."""

from __future__ import annotations

import functools
import json
import os
import socket
import sys
import time
from pathlib import Path

import pytest
from bad_input_corpus import CASES, DROP, LEASE_CASES, RUN_CASES, Raw
from bad_input_corpus import Path as SpecPath
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher import cli
from launcher.api import parse_spec, validate
from launcher.errors import SpecError
from launcher.spec import Spec


def base_spec(tmp_path: Path) -> dict:
    marker = tmp_path / "started"
    return {"name": "bad", "cluster": {"chief": 1, "worker": 1, "ps": 1},
            "command": [sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
            "model_dir": str(tmp_path / "model"), "max_steps": 10,
            "run_dir": str(tmp_path / "runs")}


def fill(value, subs: dict[str, str]):
    if isinstance(value, str):
        for key, sub in subs.items():
            value = value.replace("{" + key + "}", sub)
        return value
    if isinstance(value, dict):
        return {k: fill(v, subs) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, subs) for v in value]
    return value


def write_case(tmp_path: Path, spec, subs: dict[str, str]) -> Path:
    path = tmp_path / "cluster.json"
    if isinstance(spec, Raw):
        path.write_text(spec.text)
    elif isinstance(spec, SpecPath):
        path = tmp_path / f"spec-{spec.kind}.json"
        if spec.kind == "directory":
            path.mkdir()
        elif spec.kind == "not-utf8":
            path.write_bytes(b'{"name": "\xff\xfe"}')
        elif spec.kind == "proc-mem":
            path = Path("/proc/self/mem")
    else:
        doc = base_spec(tmp_path)
        for key, value in fill(spec, subs).items():
            if value is DROP:
                doc.pop(key, None)
            else:
                doc[key] = value
        path.write_text(json.dumps(doc))
    return path


@functools.cache
def resolver_error(host: str) -> str:
    """What getaddrinfo (and so OpenSSH) says about a host name that does not resolve."""
    try:
        socket.getaddrinfo(host, 22)
    except socket.gaierror as e:
        return e.strerror
    return "(it resolved)"


def run_main(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as e:     # argparse's own usage errors
        return int(e.code)


@pytest.mark.parametrize("case_id, spec, argv, expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_clear_error(tmp_path, capsys, case_id, spec, argv, expected):
    (tmp_path / "a-file").write_text("not a directory")
    holder = socket.socket()
    holder.bind(("", 0))
    holder.listen()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "train.sh").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "bin" / "train.sh").chmod(0o755)
    (tmp_path / "bin" / "no-shebang").write_text("echo training\n")
    (tmp_path / "bin" / "no-shebang").chmod(0o755)
    subs = {"tmp": str(tmp_path), "port": str(holder.getsockname()[1]),
            "path": os.environ.get("PATH", os.defpath)}
    if "{resolver}" in expected:   # a name lookup can take seconds here: only when needed
        subs["resolver"] = resolver_error("nosuch-host.invalid")
    try:
        path = write_case(tmp_path, spec, subs)
        subs["spec"] = str(path)
        status = run_main([str(path), *fill(argv, subs)])
    finally:
        holder.close()
    err = capsys.readouterr().err
    assert status == 2, err
    lines = fill(expected, subs).splitlines()
    assert err.strip().splitlines()[-len(lines):] == lines
    assert "Traceback" not in err
    assert not (tmp_path / "started").exists()            # no task ran
    assert not (tmp_path / "model").exists()              # model_dir untouched


def write_runs(root: Path) -> None:
    """A run of this version (ok-run, one task), one of another version (old-run) and one
    whose state.json is cut short (cut-run)."""
    from launcher.records.registry import VERSION

    for name, version in (("ok-run", VERSION), ("old-run", 0)):
        (root / name / "logs").mkdir(parents=True)
        (root / name / "state.json").write_text(json.dumps({
            "version": version, "run_id": name, "name": "bad", "backend": "local",
            "state": "succeeded", "tasks": [{"task": "chief:0", "address": "localhost:1",
                                             "state": "0", "log": "logs/chief-0.log"}]}))
    (root / "cut-run").mkdir()
    (root / "cut-run" / "state.json").write_text('{"version": 1, "run_id": "cut-run", "na')


@pytest.mark.parametrize("case_id, argv, expected", RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_bad_run_commands_are_one_clear_error(tmp_path, capsys, monkeypatch, case_id, argv,
                                              expected):
    write_runs(tmp_path / "runs")
    monkeypatch.setenv("TFCLUSTER_RUNS", str(tmp_path / "runs"))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    status = run_main(fill(argv, {"tmp": str(tmp_path)}))
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.strip().splitlines() == [fill(expected, {"tmp": str(tmp_path)})]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("case_id, lease, argv, expected", LEASE_CASES,
                         ids=[c[0] for c in LEASE_CASES])
def test_a_held_or_damaged_lease_is_one_clear_error(tmp_path, capsys, monkeypatch, case_id,
                                                    lease, argv, expected):
    from launcher.records.lease import LEASE_FILE

    monkeypatch.setenv("TFCLUSTER_RUNS", str(tmp_path / "runs"))
    model = tmp_path / "model"
    model.mkdir()
    if lease == "held":     # this process, with a heartbeat a little ahead: "0s ago"
        lease = json.dumps({"run_id": "holder-run", "host": socket.gethostname(),
                            "pid": os.getpid(), "started": time.time(),
                            "heartbeat": time.time() + 30})
    (model / LEASE_FILE).write_text(lease)
    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps(base_spec(tmp_path)))
    subs = {"tmp": str(tmp_path), "host": socket.gethostname(), "pid": str(os.getpid())}
    status = run_main([str(spec), *argv])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.strip().splitlines()[-1:] == [fill(expected, subs)]
    assert "Traceback" not in err
    assert not (tmp_path / "started").exists()                    # no task ran
    assert [p.name for p in model.iterdir()] == [LEASE_FILE]       # model_dir as it was
    assert (model / LEASE_FILE).read_text() == lease
    assert not (tmp_path / "runs").exists()                       # no run recorded


def test_corpus_is_large_and_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) >= 40 and len(set(ids)) == len(ids)


def test_unreadable_spec_file_as_an_ordinary_user(tmp_path):
    """Root reads every file; an ordinary user gets 'permission denied'."""
    import subprocess

    path = tmp_path / "secret.json"
    path.write_text("{}")
    path.chmod(0)
    tmp_path.chmod(0o755)
    code = "import sys; from launcher import cli; sys.exit(cli.main(sys.argv[1:]))"
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           sys.executable, "-c", code, str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        f"launch: error: spec file is not readable (permission denied): {path}")


# ------------------------------------------------------------------ fuzz
json_scalars = st.none() | st.booleans() | st.integers(-10, 70000) | st.floats() | \
    st.text(max_size=12)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=12)
KEYS = ["name", "cluster", "evaluator", "command", "model_dir", "max_steps", "epochs",
        "examples", "batch_size", "backend", "env", "workdir", "run_dir", "timeouts",
        "restart", "resources", "check_storage", "ssh", "slurm", "kubernetes"]
JOBS = ["chief", "master", "worker", "ps", "evaluator"]
addresses = st.one_of(st.integers(-2, 5), st.lists(
    st.one_of(st.sampled_from(["localhost", "localhost:2222", "[::1]:2223", "h:0", "::1",
                               "a:b", "[x", "h1:65536", " h", "127.0.0.1:2224"]),
              st.text(max_size=10), json_scalars), max_size=3), json_values)
near_valid = st.fixed_dictionaries(
    {"cluster": st.dictionaries(st.sampled_from(JOBS), addresses, max_size=4),
     "model_dir": st.one_of(st.just("m"), json_scalars)},
    optional={
        k: st.one_of(json_values,
                     st.dictionaries(st.sampled_from(JOBS + ["kill", "stall", "poll", "policy",
                                                             "max_restarts", "backoff"]),
                                     st.one_of(json_values, st.sampled_from(
                                         ["never", "always", "on-failure"])), max_size=3))
        for k in KEYS if k not in ("cluster", "model_dir")})


def parses_or_spec_error(call) -> None:
    try:
        assert isinstance(call(), Spec)
    except SpecError as e:
        assert str(e) and e.exit_status == 2


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(near_valid)
def test_fuzz_near_valid_specs(doc):
    parses_or_spec_error(lambda: validate(doc))
    parses_or_spec_error(lambda: parse_spec(json.dumps(doc)))


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_fuzz_any_json_document(doc):
    parses_or_spec_error(lambda: validate(doc))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80) | st.sampled_from(['{"cluster": {"worker": 1}, "model_dir": "m"',
                                              '{"cluster": {"worker": 1e400}, "model_dir": 1}',
                                              '{"cluster": {"worker": [' + '[' * 2000]))
def test_fuzz_any_text(text):
    parses_or_spec_error(lambda: parse_spec(text, source="fuzz.json"))
