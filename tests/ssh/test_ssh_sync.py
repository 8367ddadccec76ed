"""``"ssh": {"sync": true}`` on real hosts (network namespaces with their own sshd) that do
not see the workdir (each has an empty tmpfs over its folder) and keep their copies apart
(each its own tmpfs over the copy area; h3's holds 2 MB). Without sync a missing script is
one line naming the host; with it the job runs in each host's copy, a second launch sends
nothing and a changed file sends only that file; a host whose copy area fills up is
refused with nothing of its copy left; an interpreter without TensorFlow is named; a real
Estimator job (chief + ps) runs over synced hosts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from infra.netns_hosts import NetnsHosts, missing_prerequisites, start_hosts
from support import PY_TF215, PY_TF221, REPO, local_ssh_processes, run_launch, wait_gone

from launcher.backends.workdir_sync import human

SMALL_AREA = "2m"      # h3's copy area fills up at this size
NO_PATH = "/nowhere"   # h4's PATH: no program found there, tar included

STANDIN = r'''"""Stand-in task: records where it ran and what its copy holds, then exits 0."""
import json, os, socket, stat, sys
if False:
    import tensorflow  # the check asks each interpreter for its TensorFlow
from pkg.helper import WORD
area, out = sys.argv[1], sys.argv[2]
task = os.environ["TFCLUSTER_TASK"].replace(":", "-")
files = sorted(os.path.relpath(os.path.join(d, f), ".") for d, _, fs in os.walk(".")
               for f in fs if "__pycache__" not in d)   # the task's own imports write there
record = {"host": socket.gethostname(), "cwd": os.getcwd(), "word": WORD, "files": files,
          "tool_mode": stat.S_IMODE(os.stat("tool.sh").st_mode),
          "area_mode": stat.S_IMODE(os.stat(area).st_mode),
          "scratch": os.listdir(os.path.join(area, "incoming")) +
                     os.listdir(os.path.join(area, "tmp"))}
with open(os.path.join(out, task + ".json"), "w") as f:
    json.dump(record, f)
'''


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    """Four hosts; none sees ``hidden`` (where the workdirs lie), each has its own copy
    area (h3's of SMALL_AREA); h4's sessions find nothing on their PATH (no tar)."""
    why = missing_prerequisites()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"SSH test hosts cannot be made: {why}")
        pytest.skip(f"SSH test hosts cannot be made: {why}")
    base = tmp_path_factory.mktemp("sync")
    hidden, area = base / "hidden", base / "area"
    hidden.mkdir()
    area.mkdir()
    private = {i: f"{hidden}{os.pathsep}{area}" for i in (1, 2, 4)}
    private[3] = f"{hidden}{os.pathsep}{area}={SMALL_AREA}"
    hosts = start_hosts(base / "bed", count=4, private=private,
                        sshd_extra={4: f"SetEnv PATH={NO_PATH}"})
    hosts.hidden, hosts.area = hidden, area    # type: ignore[attr-defined]
    yield hosts
    hosts.stop()


@pytest.fixture(autouse=True)
def nothing_left(bed):
    yield
    left = bed.leftovers(timeout=15)
    local = wait_gone(local_ssh_processes, timeout=10)
    if left or local:
        bed.kill_all()
        for proc in local:
            proc.kill()
        pytest.fail(f"left running: on hosts {left}; local ssh {[p.pid for p in local]}")


def on_host(bed: NetnsHosts, host: int, *argv: str) -> str:
    """Run ``argv`` on host ``host`` over ssh (no shell: each word quoted)."""
    import shlex

    section = bed.ssh_section()
    done = subprocess.run(
        ["ssh", "-F", "/dev/null", "-i", section["identity_file"], "-o", "BatchMode=yes",
         "-o", f"UserKnownHostsFile={section['known_hosts_file']}", "-l", "root",
         bed.hosts[host - 1].address, shlex.join(argv)],
        capture_output=True, text=True, timeout=30)
    return done.stdout + done.stderr


def workdir(bed, name: str) -> Path:
    """A workdir the hosts do not see: the stand-in, a module it imports, an executable
    tool, and what sync leaves out (.git, a venv, __pycache__, what .tfclusterignore
    names)."""
    root = bed.hidden / name
    (root / "pkg").mkdir(parents=True)
    (root / "standin.py").write_text(STANDIN)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "helper.py").write_text("WORD = 'synced'\n")
    (root / "tool.sh").write_text("#!/bin/sh\necho tool\n")
    (root / "tool.sh").chmod(0o750)
    for skipped in (".git", "venv", "pkg/__pycache__", "data"):
        (root / skipped).mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (root / "pkg" / "__pycache__" / "helper.cpython-311.pyc").write_bytes(b"\0" * 64)
    (root / "data" / "big.bin").write_bytes(b"\1" * 4096)
    (root / "notes.log").write_text("a log\n")
    (root / ".tfclusterignore").write_text("# left out\n*.log\n/data/\n")
    return root


def spec(bed, where: Path, cluster: dict[str, list[int]], command: list[str], sync=True,
         **fields) -> Path:
    shared = bed.hidden.parent / f"shared-{where.name}"   # every host sees it
    shared.mkdir(exist_ok=True)
    doc = {"name": "sync-test", "backend": "ssh",
           "cluster": {job: [bed.hosts[i - 1].address for i in hosts]
                       for job, hosts in cluster.items()},
           "model_dir": str(shared / "model"), "run_dir": str(shared / "runs"),
           "command": command,
           "ssh": bed.ssh_section(**({"sync": sync, "sync_dir": str(bed.area)} if sync
                                     else {})),
           "timeouts": {"kill": 2, "finish": 10, "start": 60}, **fields}
    path = shared / "cluster.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


def test_without_sync_a_missing_script_is_one_line_naming_host_and_ssh_sync(bed):
    root = workdir(bed, "nosync")
    path = spec(bed, root, {"chief": [1], "worker": [2]}, [PY_TF215, "standin.py"],
                sync=False)
    done = run_launch(str(path), timeout=120, cwd=root)
    assert done.returncode == 2, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if "standin.py not found" in ln]
    assert len(lines) == 2, done.stderr
    assert bed.hosts[0].address in lines[0] and bed.hosts[1].address in lines[1]
    assert all("ssh.sync" in ln for ln in lines)
    assert "nothing was started" in done.stderr
    assert not (path.parent / "model").exists()


def test_sync_runs_every_host_in_its_copy_and_sends_only_what_changed(bed):
    root = workdir(bed, "synced")
    out = bed.hidden.parent / "out-synced"     # every host sees it
    out.mkdir()
    command = ["python", "standin.py", str(bed.area), str(out)]
    path = spec(bed, root, {"chief": [1], "worker": [2]}, command,
                roles={"chief": {"command": [PY_TF215, *command[1:]]},
                       "worker": {"command": [PY_TF221, *command[1:]]}})
    first = run_launch(str(path), timeout=120, cwd=root)
    assert first.returncode == 0, first.stderr
    size = sum(f.stat().st_size for f in (root / "standin.py", root / "pkg" / "helper.py",
                                           root / "pkg" / "__init__.py", root / "tool.sh",
                                           root / ".tfclusterignore"))
    assert f"sent {human(2 * size)} to 2 of 2 hosts" in first.stderr
    assert "TensorFlow differs between hosts: 2.15" in first.stderr
    records = {task: json.loads((out / f"{task}.json").read_text())
               for task in ("chief-0", "worker-0")}
    assert {r["host"] for r in records.values()} == {"h1", "h2"}
    for record in records.values():
        assert record["cwd"].startswith(f"{bed.area}/trees/")
        assert record["word"] == "synced"
        assert record["files"] == [".tfclusterignore", "pkg/__init__.py", "pkg/helper.py",
                                   "standin.py", "tool.sh"]
        assert record["tool_mode"] == 0o700          # the owner's bits kept, no one else's
        assert record["area_mode"] == 0o700
        assert record["scratch"] == []
    second = run_launch(str(path), timeout=120, cwd=root)
    assert second.returncode == 0, second.stderr
    assert "every host (2) had it already" in second.stderr
    changed = "WORD = 'changed'\n"
    (root / "pkg" / "helper.py").write_text(changed)
    third = run_launch(str(path), timeout=120, cwd=root)
    assert third.returncode == 0, third.stderr
    assert f"sent {human(2 * len(changed))} to 2 of 2 hosts" in third.stderr
    assert json.loads((out / "chief-0.json").read_text())["word"] == "changed"


@pytest.mark.parametrize("megabytes, says", [
    (1.5, "cannot build the copy in {area}: No space left on device"),   # fills while copying
    (3, "no room for the copy in {area} on this host"),                  # seen before sending
])
def test_a_host_whose_copy_area_fills_is_refused_and_keeps_nothing(bed, megabytes, says):
    root = workdir(bed, f"large{megabytes}")
    (root / "weights.bin").write_bytes(os.urandom(int(megabytes * 2**20)))
    out = bed.hidden.parent / f"out-large{megabytes}"
    out.mkdir()
    path = spec(bed, root, {"chief": [1], "worker": [3]},
                [PY_TF215, "standin.py", str(bed.area), str(out)])
    done = run_launch(str(path), timeout=120, cwd=root)
    assert done.returncode == 2, done.stderr
    line = next(ln for ln in done.stderr.splitlines() if bed.hosts[2].address in ln)
    assert says.format(area=bed.area) in line, line
    assert "nothing of the copy is used" in line or "nothing was copied" in line
    assert bed.hosts[0].address not in done.stderr
    assert list(out.iterdir()) == []
    left = on_host(bed, 3, "ls", "-A", f"{bed.area}/incoming", f"{bed.area}/tmp",
                   f"{bed.area}/trees")
    assert [ln for ln in left.splitlines() if ln and not ln.endswith(":")] == [], left


def test_a_host_without_tar_is_one_line_and_keeps_nothing(bed):
    """The copy goes through `tar -x` on the host: a host that has no tar (h4: nothing on
    its PATH) is named in one line, exit 2, nothing started, nothing of the copy left."""
    root = workdir(bed, "notar")
    out = bed.hidden.parent / "out-notar"
    out.mkdir()
    path = spec(bed, root, {"chief": [1], "worker": [4]},
                [PY_TF215, "standin.py", str(bed.area), str(out)])
    done = run_launch(str(path), timeout=120, cwd=root)
    assert done.returncode == 2, done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if bed.hosts[3].address in ln]
    assert f"ssh.sync: no tar on this host (needed to copy the workdir into {bed.area}); " \
        "nothing was copied" in line, done.stderr
    assert bed.hosts[0].address not in done.stderr and "nothing was started" in done.stderr
    assert list(out.iterdir()) == []
    parts = [f"{bed.area}/{d}" for d in ("incoming", "tmp", "trees")]   # as the fill test
    left = on_host(bed, 4, "/usr/bin/find", *parts, "-mindepth", "1")
    assert [ln for ln in left.splitlines() if ln.startswith(str(bed.area))] == [], left


def test_an_interpreter_without_tensorflow_is_named_with_its_host(bed):
    root = workdir(bed, "notf")
    (root / "train.py").write_text("import tensorflow as tf\nprint(tf.__version__)\n")
    path = spec(bed, root, {"chief": [1], "ps": [2]}, [PY_TF215, "train.py"],
                roles={"ps": {"command": ["/usr/bin/python3", "train.py"]}})
    done = run_launch(str(path), timeout=120, cwd=root)
    assert done.returncode == 2, done.stderr
    assert f"{bed.hosts[1].address} (ps:0): ps:0: /usr/bin/python3 cannot import " \
        "tensorflow" in done.stderr
    assert bed.hosts[0].address not in done.stderr


def test_bad_workdirs_are_one_line_before_any_host_is_asked(bed, tmp_path):
    root = workdir(bed, "badlink")
    os.symlink("/etc/passwd", root / "passwd")
    path = spec(bed, root, {"chief": [1]}, [PY_TF215, "standin.py"])
    done = run_launch(str(path), timeout=60, cwd=root)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"launch: error: workdir {root}: symlink passwd points out of the folder (to "
        "/etc/passwd): ssh.sync never follows it (list it in .tfclusterignore, or remove "
        "it; \"ssh\": {\"sync\": true} copies the workdir)"]
    missing = spec(bed, root / "gone", {"chief": [1]}, [PY_TF215, "standin.py"],
                   workdir=str(root / "gone"))
    done = run_launch(str(missing), timeout=60, cwd=root)
    assert done.returncode == 2
    assert f"workdir {root / 'gone'} does not exist" in done.stderr


@pytest.mark.tf
def test_estimator_job_over_synced_hosts(bed):
    """The Estimator example, copied from a folder the hosts do not see: chief on h1, ps
    on h2; 600 examples in batches of 50 (12 steps)."""
    root = bed.hidden / "examples"
    shutil.copytree(REPO / "examples", root, ignore=shutil.ignore_patterns("mwms", "pss"))
    data = bed.hidden.parent / "estimator-data"
    path = spec(bed, root, {"chief": [1], "ps": [2]},
                [PY_TF215, "estimator/train.py", "--data-dir", str(data)],
                epochs=1, examples=600, batch_size=50,
                timeouts={"kill": 3, "finish": 60, "start": 60})
    done = run_launch(str(path), timeout=400, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ssh.sync: workdir" in done.stderr and "to 2 of 2 hosts" in done.stderr
    assert "TensorFlow 2.15.1 on every host (2)" in done.stderr
    assert (path.parent / "model" / "checkpoint").exists()
