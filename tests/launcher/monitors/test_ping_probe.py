"""The cheap liveness probe (launcher/monitors/ping.py): an HTTP/2 PING that a live gRPC
server answers and a frozen one cannot, though its kernel still accepts the connection;
the liveness monitor asks GetStatus until a task first answered, then PINGs it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from launcher.backends.processes import free_port
from launcher.monitors.liveness import LivenessMonitor
from launcher.monitors.ping import PingProber
from orchestrator.decisions import LOST, TaskState

TESTS = str(Path(__file__).resolve().parents[2])
SERVER = ("import sys, time; sys.path.insert(0, sys.argv[1]); "
          "from fake_tf_server import serve_get_status; server = serve_get_status(); "
          "print('up', flush=True); time.sleep(600)")


def test_a_listener_that_never_answers_is_not_alive():
    """What the kernel of a frozen process does: it accepts, nobody reads."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        answer = PingProber(deadline=0.3).ask_all([address])[address]
    assert (answer.ok, answer.code) == (False, "DEADLINE_EXCEEDED") and answer.took >= 0.3


def test_nothing_listening_or_no_http2_is_unavailable_at_once():
    closed = f"127.0.0.1:{free_port()}"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        http1 = f"127.0.0.1:{listener.getsockname()[1]}"

        def answer_http1() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        thread = threading.Thread(target=answer_http1)
        thread.start()
        answers = PingProber(deadline=5).ask_all([closed, http1])
        thread.join()
    assert {a: (r.ok, r.code) for a, r in answers.items()} == \
        {closed: (False, "UNAVAILABLE"), http1: (False, "UNAVAILABLE")}
    assert all(r.took < 2 for r in answers.values())


def test_a_frozen_task_is_found_by_its_pings_after_answering_get_status():
    port = free_port()
    address = f"localhost:{port}"
    config = {"cluster": {"ps": [address]}, "task": {"type": "ps", "index": 0}}
    proc = subprocess.Popen([sys.executable, "-c", SERVER, TESTS], stdout=subprocess.PIPE,
                            env=dict(os.environ, TF_CONFIG=json.dumps(config)),
                            start_new_session=True)
    now = [0.0]
    pinger = PingProber(deadline=0.5)
    monitor = LivenessMonitor(3, period=1, pinger=pinger, clock=lambda: now[0],
                              threaded=False)
    task = [TaskState("ps:0", "ps", address, started_at=0.0, running=True)]
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        monitor.tick(task)
        monitor.poll_once()                             # GetStatus: it serves TF's gRPC
        assert monitor.answered("ps:0", 0.0) and monitor.not_answering() == []
        pings: list[list[str]] = []
        original = pinger.ask_all

        def ask_all(addresses):
            pings.append(list(addresses))
            return original(pings[-1])
        pinger.ask_all = ask_all                        # type: ignore[method-assign]
        now[0] = 1.0
        monitor.poll_once()
        assert pings == [[address]] and monitor.not_answering() == []
        os.killpg(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED and \
                time.monotonic() < deadline:
            time.sleep(0.01)
        decisions = []
        for second in range(2, 6):
            now[0] = float(second)
            monitor.poll_once()
            decisions.append(monitor.tick(task))
        lost = [d for d in decisions if d is not None]
        assert len(lost) == 1 and lost[0].action == LOST and lost[0].tasks == ("ps:0",)
        assert monitor.liveness.last_code("ps:0") == "DEADLINE_EXCEEDED"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        monitor.close()


def test_an_address_is_tried_on_each_of_its_families_until_one_answers(monkeypatch):
    """localhost may resolve to ::1 first while the server listens on IPv4 only."""
    from concurrent import futures

    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    refused = free_port()
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port_, **kw: [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", refused)),
        (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", port, 0, 0)),
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))])
    try:
        prober = PingProber(deadline=5)
        first = prober.ask_all(["somehost:1"])["somehost:1"]
        again = prober.ask_all(["somehost:1"])["somehost:1"]
    finally:
        server.stop(None)
    assert first.ok and again.ok
