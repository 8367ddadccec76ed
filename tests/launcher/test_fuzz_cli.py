"""A fuzz of the command line and of the environment ``launch`` runs in: every draw ends in
an exit status and at most a usage message, never in a traceback, and nothing starts."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher import cli

BAD_PROGRAMS = ["no-such-trainer", "{tmp}/a-file", "{tmp}", "", " ", "./x", "python3.99",
                "~/nope", "-c"]
OPTIONS = ["--dry-run", "--json", "--local", "--run-dir", "--quiet", "-q", "--retrain",
           "--version", "--help", "-h", "--", "--verbose", "-", "--run-dir=", "report",
           "--model-dir", "--out"]
PLACES = ["runs", "{tmp}/a-file", "{tmp}/a-file/x", "/proc/x", "", "nosuchfs://b/m",
          "gs://b/m", "s3://", "simplecache::", "::", "m", "file:///", "memory://m",
          "{tmp}/spec.json"]
ENV_KEYS = {
    "PATH": st.sampled_from(["", ":", "/nonexistent", "{tmp}", "::/usr/bin", "\x7f"]),
    "HOME": st.sampled_from(["", "/nonexistent", "{tmp}/a-file"]),
    "TMPDIR": st.sampled_from(["", "/nonexistent", "{tmp}/a-file"]),
    "COLUMNS": st.sampled_from(["", "0", "-5", "abc", "100000"]),
    "LANG": st.sampled_from(["", "C", "xx_XX.bogus"]),
    "TF_CONFIG": st.sampled_from(["", "{", '{"cluster": 1}']),
    "TFCLUSTER_RUN_ID": st.text(alphabet="ab\x01 ", max_size=8),
    "FSSPEC_CONFIG_DIR": st.sampled_from(["/nonexistent", "{tmp}/a-file"]),
}
texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                       blacklist_characters="\x00"), max_size=12)
# PATH as the draws may set it: a drawn program must not be a real one ("w", "ls")
SEARCHED = os.pathsep.join(["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin",
                            os.environ.get("PATH", "")])
programs = st.sampled_from(BAD_PROGRAMS) | texts.filter(
    lambda t: shutil.which(t, path=SEARCHED) is None)
commands = st.tuples(programs, st.lists(st.sampled_from(BAD_PROGRAMS) | texts, max_size=2)) \
    .map(lambda t: [t[0], *t[1]])
argvs = st.lists(st.one_of(st.sampled_from(OPTIONS), st.sampled_from(PLACES), texts),
                 max_size=6)
specs = st.fixed_dictionaries(
    {"cluster": st.sampled_from([{"chief": 1}, {"worker": 2, "ps": 1}, {"chief": 1, "ps": 1}]),
     "command": commands,
     "model_dir": st.sampled_from(PLACES)},
    optional={"run_dir": st.sampled_from(PLACES), "workdir": st.sampled_from(PLACES),
              "env": st.dictionaries(st.sampled_from(["PATH", "A", "HOME"]),
                                     st.sampled_from(PLACES), max_size=2),
              "roles": st.just({"ps": {"command": ["no-such-ps"]}}),
              "max_steps": st.integers(1, 5)})
envs = st.fixed_dictionaries({}, optional=ENV_KEYS)


def fill(value, tmp: str):
    if isinstance(value, str):
        return value.replace("{tmp}", tmp)
    if isinstance(value, dict):
        return {k: fill(v, tmp) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, tmp) for v in value]
    return value


@contextlib.contextmanager
def environment(changes: dict[str, str], cwd: str):
    saved, old_cwd = dict(os.environ), os.getcwd()
    os.environ.update(changes)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(saved)


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(spec=specs, argv=argvs, env=envs, command=st.none() | st.just([]) | commands)
def test_fuzz_command_line_and_environment(tmp_path_factory, spec, argv, env, command):
    tmp = tmp_path_factory.mktemp("fuzz")
    (tmp / "a-file").write_text("x")
    (tmp / "spec.json").write_text(json.dumps(fill(spec, str(tmp))))
    argv = [str(tmp / "spec.json"), *fill(argv, str(tmp))]
    if command is not None:
        argv += ["--", *fill(command, str(tmp))]
    err, out = io.StringIO(), io.StringIO()
    with environment(fill(env, str(tmp)), str(tmp)), contextlib.redirect_stderr(err), \
            contextlib.redirect_stdout(out):
        try:
            status = cli.main(argv)
        except SystemExit as e:             # argparse: --help, --version, usage errors
            status = e.code if isinstance(e.code, int) else 2
    message = err.getvalue()
    assert "Traceback" not in message and "Traceback" not in out.getvalue()
    assert status in (0, 2), (argv, env, message)
    if status == 2:
        assert message.strip(), "a refusal says why"
        assert message.strip().splitlines()[-1].startswith(("launch", "usage")), message
    if status == 2 and spec.get("run_dir") != "m" and "m" not in argv:
        assert not (tmp / "m").exists(), "a refused job writes nothing into model_dir"


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(argv=st.lists(st.one_of(st.sampled_from(["--model-dir", "--out", "-h", "{tmp}",
                                                "{tmp}/a-file", "{tmp}/run", "gs://b/m",
                                                "nosuchfs://x", "/proc/x"]), texts),
                     max_size=4),
       plan=st.sampled_from(["{}", "[", '{"model_dir": "gs://b/m"}', '{"model_dir": 3}',
                             '{"model_dir": "{tmp}/a-file"}', None]))
def test_fuzz_report_command_line(tmp_path_factory, argv, plan):
    tmp = tmp_path_factory.mktemp("report")
    (tmp / "a-file").write_text("x")
    (tmp / "run").mkdir()
    if plan is not None:
        (tmp / "run" / "plan.json").write_text(fill(plan, str(tmp)))
    err, out = io.StringIO(), io.StringIO()
    with environment({}, str(tmp)), contextlib.redirect_stderr(err), \
            contextlib.redirect_stdout(out):
        try:
            status = cli.main(["report", str(tmp / "run"), *fill(argv, str(tmp))])
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else 2
    assert "Traceback" not in err.getvalue() + out.getvalue()
    assert status in (0, 2), (argv, plan, err.getvalue())
