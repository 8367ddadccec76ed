"""The preemption notice inside a task (orchestrator/preemption.py, armed by
orchestrator/preempt_site/sitecustomize.py), on plain Python processes: armed only when
the environment asks, once per task, the other sitecustomize still run, an answer to each
notice, and a ps in TERM mode that serves on while its chief answers. The TensorFlow
side (a MonitoredSession that stops and saves): tests/preemption."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.preemption import NOTHING_TO_SAVE, POLLED

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "orchestrator" / "preempt_site"


def python(code: str, env: dict[str, str], extra_path: str = "") -> subprocess.Popen:
    full = {k: v for k, v in os.environ.items() if not k.startswith("TFCLUSTER_")}
    full.update(env, PYTHONPATH=os.pathsep.join(p for p in (str(SITE), extra_path) if p))
    return subprocess.Popen([sys.executable, "-c", code], env=full, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


CHIEF = {"TFCLUSTER_PREEMPT": "URG", "TFCLUSTER_TASK_TYPE": "chief",
         "TFCLUSTER_TASK_INDEX": "0"}
# prints what SIGURG's handler is, takes the notice, then says whether it was asked
TAKE_NOTICE = ("import os, signal, time, sys\n"
               "print('handler', signal.getsignal(signal.SIGURG) is not signal.SIG_DFL,"
               " flush=True)\n"
               "{poll}\n"
               "os.kill(os.getpid(), signal.SIGURG)\n"
               "time.sleep(0.3)\n"
               "print('child armed', os.environ.get('TFCLUSTER_PREEMPT_ARMED') is not None)\n")


def test_without_the_environment_nothing_is_armed():
    proc = python(TAKE_NOTICE.format(poll=""), {})
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "handler False" in out and err == ""


def test_a_chief_without_a_session_answers_that_nothing_saves():
    proc = python(TAKE_NOTICE.format(poll=""), CHIEF)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "handler True" in out
    assert err.strip() == NOTHING_TO_SAVE
    # its children see that the task is armed already: they are left alone
    assert "child armed True" in out


def test_a_loop_that_asks_requested_says_it_saves_itself():
    poll = "from orchestrator.preemption import requested\nassert requested() is False"
    proc = python(TAKE_NOTICE.format(poll=poll) + "print('requested', requested())\n",
                  CHIEF, str(REPO))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert err.strip() == POLLED and "requested True" in out


def test_a_loop_that_passes_its_step_to_requested_ends_at_max_steps_by_itself():
    """With or without a launcher following the task: ``requested(step)`` is True from the
    spec's max_steps on, without a notice (and without one to answer)."""
    code = ("from orchestrator.preemption import requested\n"
            "print([requested(s) for s in (0, 299, 300, 301)], requested())\n")
    proc = python(code, dict(CHIEF, TFCLUSTER_MAX_STEPS="300"), str(REPO))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err == "", err
    assert out.strip() == "[False, False, True, True] False"


def test_a_worker_is_not_armed_where_a_chief_saves():
    env = dict(CHIEF, TFCLUSTER_TASK_TYPE="worker",
               TF_CONFIG=json.dumps({"cluster": {"chief": ["h:1"], "worker": ["h:2"]}}))
    out, _ = python(TAKE_NOTICE.format(poll=""), env).communicate(timeout=60)
    assert "handler False" in out


def test_the_sitecustomize_it_hides_still_runs(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("print('the other sitecustomize ran')\n")
    proc = python("print('main')", CHIEF, str(tmp_path))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines() == ["the other sitecustomize ran", "main"]


def test_a_ps_in_term_mode_serves_on_while_the_chief_answers():
    chief = socket.socket()
    chief.bind(("127.0.0.1", 0))
    chief.listen()
    port = chief.getsockname()[1]
    env = {"TFCLUSTER_PREEMPT": "URG,TERM", "TFCLUSTER_TASK_TYPE": "ps",
           "TFCLUSTER_TASK_INDEX": "0", "TFCLUSTER_PREEMPT_GRACE": "60",
           "TF_CONFIG": json.dumps({"cluster": {"chief": [f"127.0.0.1:{port}"],
                                                "ps": ["127.0.0.1:1"]}})}
    # a ps blocks in server.join(): here a blocking read, where no Python handler runs
    proc = python("import os, sys; print('serving', flush=True); os.read(0, 1)", env)
    try:
        assert proc.stdout.readline().strip() == "serving"
        proc.send_signal(signal.SIGTERM)
        time.sleep(2)
        assert proc.poll() is None, "the ps ended while its chief still answered"
        chief.close()
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        chief.close()
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
