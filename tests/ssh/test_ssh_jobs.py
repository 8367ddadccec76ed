"""`launch` with the ssh backend on real hosts (network namespaces with their own sshd):
arguments arrive verbatim, preflight refuses bad hosts before anything starts, a failed
task, Ctrl-C and the launcher's SIGKILL leave nothing on any host, a host with a private
model_dir is refused, and a real Estimator job runs across the hosts."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest
from ssh_specs import write_spec
from support import PY_TF215, REPO, launch_cmd, run_launch

from launcher.backends.agent.entry import SSH_STUB as STUB

JOBS = Path(__file__).resolve().parent / "jobs"
SLEEPER = str(JOBS / "sleeper.py")


def events(spec_dir: Path) -> list[dict]:
    logs = list((spec_dir / "runs").glob("*/events.jsonl"))
    return [json.loads(line) for p in logs for line in p.read_text().splitlines()]


def tasks_by_host(bed) -> dict[str, set[str]]:
    """Which tfcluster task runs in which host (from each process's environment)."""
    seen: dict[str, set[str]] = {}
    for host in bed.hosts:
        for proc in bed.processes(host):
            try:
                task = proc.environ().get("TFCLUSTER_TASK")
            except psutil.Error:
                continue
            if task:
                seen.setdefault(host.name, set()).add(task)
    return seen


def wait_running(bed, expected: dict[str, set[str]], proc: subprocess.Popen,
                 timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"launch ended early ({proc.returncode}): {proc.stderr.read()}")
        seen = tasks_by_host(bed)
        if all(expected[h] <= seen.get(h, set()) for h in expected):
            return
        time.sleep(0.1)
    pytest.fail(f"tasks did not all start on their hosts: {tasks_by_host(bed)}")


def test_arguments_and_environment_arrive_verbatim(hosts, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    pwned = tmp_path / "pwned"
    tricky_args = ["a b", "it's \"quoted\"", f"$(touch {pwned})", f"`touch {pwned}`",
                   "line1\nline2", "*", f"; touch {pwned}", "", "--", "$HOME", "é ✓"]
    tricky_env = f"$(touch {pwned}) 'single' \"double\" \\ \n next line"
    spec = write_spec(tmp_path, hosts, {"chief": ["h1"], "worker": ["h2"]},
                      command=[PY_TF215, str(JOBS / "record_args.py"), str(out), *tricky_args],
                      env={"TRICKY": tricky_env})
    done = run_launch(str(spec), timeout=120)
    assert done.returncode == 0, done.stderr
    for task, host in (("chief-0", "h1"), ("worker-0", "h2")):
        record = json.loads((out / f"{task}.json").read_text())
        assert record["argv"] == tricky_args
        assert record["tricky"] == tricky_env
        assert record["host"] == host
        assert record["cwd"] == str(REPO)
    assert not pwned.exists()
    # Output comes back line by line with the task's prefix.
    assert "[chief:0] recorded 11 arguments on h1" in done.stdout
    assert "[worker:0] recorded 11 arguments on h2" in done.stdout


def test_unreachable_host_and_wrong_host_key_refused_before_anything_starts(hosts, tmp_path):
    unreachable = str(hosts.subnet.network_address + 250)     # no namespace has it
    h2 = hosts.hosts[1]
    known = tmp_path / "known_hosts"      # h2's entry holds h3's key: an impostor
    known.write_text("".join(
        f"{h.address} {(hosts.hosts[2] if h is h2 else h).hostkey_pub}\n" for h in hosts.hosts))
    out = tmp_path / "out"
    out.mkdir()
    spec = write_spec(tmp_path, hosts, {"chief": ["h1"], "worker": [unreachable], "ps": ["h2"]},
                      command=[PY_TF215, str(JOBS / "record_args.py"), str(out)],
                      ssh=hosts.ssh_section(known_hosts_file=str(known), connect_timeout=4))
    done = run_launch(str(spec), timeout=120)
    assert done.returncode == 2, done.stderr
    err = done.stderr
    assert "ssh preflight failed on 2 of 3 hosts; nothing was started" in err
    assert f"{unreachable} (worker:0): cannot connect" in err
    assert f"{h2.address} (ps:0): host key verification failed: the host's key does not " \
           f"match the one in {known}" in err
    assert hosts.hosts[0].address not in err          # h1 is fine and not named
    assert len(err.strip().splitlines()) == 3, err    # one message
    assert list(out.iterdir()) == []                  # nothing ran, not even on h1
    assert not [e for e in events(tmp_path) if e["event"] == "task_started"]


def test_user_ssh_config_and_proxy_jump_are_used(hosts, tmp_path):
    """Settings come from an ssh config file, as from ~/.ssh/config, and the connection to
    h2 goes through h1 (ProxyJump): h2's sshd sees it coming from h1's address."""
    h1, h2 = hosts.hosts[0], hosts.hosts[1]
    out = tmp_path / "out"
    out.mkdir()
    spec = write_spec(tmp_path, hosts, {"chief": ["h2"]},
                      command=[PY_TF215, str(JOBS / "record_args.py"), str(out), "via h1"],
                      ssh={"config_file": str(hosts.ssh_config()),
                           "options": {"ProxyJump": h1.address}})
    done = run_launch(str(spec), timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "chief-0.json").read_text())["host"] == "h2"
    assert f"Accepted publickey for root from {h1.address} " in hosts.sshd_log(h2)


def test_key_that_is_not_authorized_refused(hosts, tmp_path):
    stranger = hosts.workdir / "hostkey_h2"     # a valid key, not in authorized_keys
    spec = write_spec(tmp_path, hosts, {"chief": ["h1"]}, command=[PY_TF215, "-c", "pass"],
                      ssh=hosts.ssh_section(identity_file=str(stranger)))
    done = run_launch(str(spec), timeout=60)
    assert done.returncode == 2
    assert f"{hosts.hosts[0].address} (chief:0): authentication failed (" in done.stderr
    assert "check ssh.user and ssh.identity_file" in done.stderr


def test_host_that_never_answers_is_refused_after_the_timeout(hosts, tmp_path):
    """A host whose port 22 accepts connections and then says nothing (a hung sshd)."""
    silent = str(hosts.subnet.network_address + 1)     # the bridge: this machine's side
    held = []
    with socket.create_server((silent, 22)) as server:
        server.settimeout(0.2)

        def accept():
            while not done_event.is_set():
                with contextlib.suppress(OSError):
                    held.append(server.accept()[0])

        done_event = threading.Event()
        acceptor = threading.Thread(target=accept, daemon=True)
        acceptor.start()
        spec = write_spec(tmp_path, hosts, {"chief": ["h1"], "worker": [silent]},
                          command=[PY_TF215, "-c", "pass"],
                          ssh=hosts.ssh_section(connect_timeout=2),
                          timeouts={"start": 4, "kill": 2})
        done = run_launch(str(spec), timeout=120)
        done_event.set()
        acceptor.join()
        for conn in held:
            conn.close()
    assert done.returncode == 2, done.stderr
    assert "ssh preflight failed on 1 of 2 hosts; nothing was started" in done.stderr
    line = next(ln for ln in done.stderr.splitlines() if f"{silent} (worker:0): " in ln)
    assert "timed out" in line or "in time" in line      # ssh's ConnectTimeout, or ours
    assert held, done.stderr                     # ssh did connect, and got no answer


def test_host_key_checking_is_on_unless_turned_off(hosts, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    command = [PY_TF215, str(JOBS / "record_args.py"), str(out)]
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    spec = write_spec(tmp_path, hosts, {"chief": ["h1"]}, command=command,
                      ssh=hosts.ssh_section(known_hosts_file=str(empty)))
    done = run_launch(str(spec), timeout=60)
    assert done.returncode == 2
    assert "host key verification failed: no key for this host" in done.stderr
    assert empty.read_text() == ""          # nothing was added to known_hosts
    ssh = hosts.ssh_section(strict_host_key_checking=False)
    del ssh["known_hosts_file"]
    spec = write_spec(tmp_path, hosts, {"chief": ["h1"]}, command=command, ssh=ssh)
    done = run_launch(str(spec), timeout=60)
    assert done.returncode == 0, done.stderr
    assert (out / "chief-0.json").exists()


def test_missing_working_directory_and_program_refused(hosts, tmp_path):
    spec = write_spec(tmp_path, hosts, {"chief": ["h1"], "worker": ["h2"]},
                      command=[PY_TF215, "-c", "pass"], workdir="/no/such/dir")
    done = run_launch(str(spec), timeout=60)
    assert done.returncode == 2
    assert "ssh preflight failed on 2 of 2 hosts" in done.stderr
    assert "chief:0: working directory /no/such/dir does not exist" in done.stderr
    assert "worker:0: working directory /no/such/dir does not exist" in done.stderr
    spec = write_spec(tmp_path, hosts, {"chief": ["h1"]},
                      command=["/no/such/python", "-c", "pass"])
    done = run_launch(str(spec), timeout=60)
    assert done.returncode == 2
    assert "(chief:0): /no/such/python (the task's Python) cannot run on this host" \
        in done.stderr
    spec = write_spec(tmp_path, hosts, {"chief": ["h1"]}, command=["/no/such/program"])
    done = run_launch(str(spec), timeout=60)
    assert done.returncode == 2
    assert "chief:0: program /no/such/program not found" in done.stderr


def test_explicit_port_taken_on_its_host_refused(hosts, tmp_path):
    h2 = hosts.hosts[1]
    taken = subprocess.Popen(["ip", "netns", "exec", h2.netns, PY_TF215, "-c",
                              "import socket, time; s = socket.create_server(('', 2345)); "
                              "print('listening', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert taken.stdout.readline().strip() == "listening"
        spec = write_spec(tmp_path, hosts, {"chief": ["h1:2345"], "ps": ["h2:2345"]},
                          command=[PY_TF215, "-c", "pass"])
        done = run_launch(str(spec), timeout=60)
    finally:
        taken.kill()
        taken.wait()
    assert done.returncode == 2
    assert f"{h2.address} (ps:0): ps:0: port 2345 is already in use on this host" \
        in done.stderr
    assert "chief:0" not in done.stderr        # the same port is free on h1


def test_failed_task_stops_every_host(hosts, tmp_path):
    spec = write_spec(tmp_path, hosts, {"chief": ["h1"], "worker": ["h2"], "ps": ["h3"]},
                      command=[PY_TF215, SLEEPER, "--fail", "worker:0", "--stubborn", "ps:0"])
    done = run_launch(str(spec), timeout=120)
    assert done.returncode == 1, done.stderr
    assert "worker:0 failed with exit status 3" in done.stderr
    assert "[worker:0] worker:0 fails now" in done.stdout
    # nothing_left_on_hosts checks every host (the stubborn ps needed SIGKILL)


def logins(bed) -> dict[str, int]:
    """Connections each host's sshd accepted so far (its log)."""
    return {h.name: bed.sshd_log(h).count("Accepted publickey") for h in bed.hosts}


def bootstraps(bed) -> dict[str, int]:
    """tfcluster bootstraps running on each host (what `ps` there shows)."""
    return {h.name: sum(STUB in " ".join(p.cmdline()) for p in bed.processes(h))
            for h in bed.hosts}


@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
def test_interrupt_or_kill_of_launcher_leaves_nothing(hosts, tmp_path, how):
    """Several tasks on a host share one connection (a master, its socket in the run's
    control directory) and one bootstrap there; an interrupted launcher closes the masters
    and removes that directory; a killed one leaves no ssh process either."""
    spec = write_spec(tmp_path, hosts,
                      {"chief": ["h1"], "worker": ["h2", "h3", "h3"], "ps": ["h3"]},
                      evaluator="h1",
                      command=[PY_TF215, SLEEPER, "--stubborn", "ps:0"])
    before = logins(hosts)
    proc = subprocess.Popen(launch_cmd(str(spec)), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_running(hosts, {"h1": {"chief:0", "evaluator:0"}, "h2": {"worker:0"},
                             "h3": {"worker:1", "worker:2", "ps:0"}}, proc)
        assert bootstraps(hosts) == {"h1": 1, "h2": 1, "h3": 1}
        assert {h: n - before[h] for h, n in logins(hosts).items()} == \
            {"h1": 1, "h2": 1, "h3": 1}
        (control,) = glob.glob(f"/tmp/tfc-ssh-{proc.pid}-*")
        assert len(os.listdir(control)) == 3              # a master's socket per host
        proc.send_signal(getattr(signal, how))
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == (130 if how == "SIGINT" else -signal.SIGKILL)
    assert hosts.leftovers(timeout=20) == {}
    if how == "SIGINT":
        assert not os.path.exists(control)
    # nothing_left_on_hosts: no ssh process (master or session) is left here either


def test_private_model_dir_refused_by_storage_check(hosts, tmp_path, private_dir):
    """h3 sees an empty tmpfs over private_dir: a ps there would write its half of every
    checkpoint where the chief never looks."""
    out = tmp_path / "out"
    out.mkdir()
    spec = write_spec(tmp_path, hosts, {"chief": ["h1"], "ps": ["h3"]},
                      model_dir=str(private_dir / "model"),
                      command=[PY_TF215, str(JOBS / "record_args.py"), str(out)])
    done = run_launch(str(spec), timeout=120)
    assert done.returncode == 2, done.stderr
    assert "model_dir is not the same storage for every task" in done.stderr
    assert f"ps:0 on host {hosts.hosts[2].address} (h3)" in done.stderr
    assert "chief:0" not in done.stderr
    assert list(out.iterdir()) == []


@pytest.mark.tf
def test_estimator_job_across_three_hosts(hosts, tmp_path):
    """The Estimator example: chief on h1, a worker and the evaluator on h2, the ps on h3
    (every role, each host; two tasks sharing one). One epoch of 3000 examples in batches of
    50 is 60 steps; the chief saves at the end (and TensorFlow's first checkpoint), so the
    evaluator evaluates once or twice."""
    data = tmp_path / "data"
    spec = write_spec(tmp_path, hosts,
                      {"chief": ["h1"], "worker": ["h2"], "ps": ["h3"]},
                      evaluator="h2",
                      command=[PY_TF215, "examples/estimator/train.py", "--data-dir", str(data),
                               "--save-steps", "60"],
                      epochs=1, examples=3000, batch_size=50,
                      timeouts={"kill": 3, "finish": 60, "evaluator": 120, "start": 60})
    seen: dict[str, set[str]] = {}
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            for host, tasks in tasks_by_host(hosts).items():
                seen.setdefault(host, set()).update(tasks)
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        done = run_launch(str(spec), timeout=400)
    finally:
        stop.set()
        watcher.join()
    assert done.returncode == 0, done.stderr[-3000:]
    assert seen == {"h1": {"chief:0"}, "h2": {"worker:0", "evaluator:0"}, "h3": {"ps:0"}}
    summary = json.loads(next((tmp_path / "runs").glob("*/summary.json")).read_text())
    status = {t["task"]: (t["exit"], t["stopped"]) for t in summary["tasks"]}
    assert status["chief:0"] == (0, False)
    assert status["ps:0"][1] is True                   # the ps was stopped by the launcher
    assert (tmp_path / "model" / "checkpoint").exists()
    assert hosts.leftovers(timeout=20) == {}
