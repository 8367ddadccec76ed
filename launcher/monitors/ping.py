"""The cheap liveness probe: an HTTP/2 PING to a task's TensorFlow gRPC server.

A GetStatus call through grpcio costs the launcher 0.6-0.9 ms of CPU (docs/benchmarks.md,
"Scale"). Once a task answered GetStatus (it serves TensorFlow's gRPC), whether it is
still alive is asked more cheaply: a fresh TCP connection, HTTP/2's client preface, an
empty SETTINGS frame and a PING; the server's transport answers with the PING's ACK. A
frozen process (SIGSTOP) cannot answer, though its kernel still accepts the connection (so
a connect alone proves nothing): the PING runs into its deadline. One connection per
probe, closed with a GOAWAY: a server counts repeated PINGs on one connection as abuse.

``PingProber`` asks many addresses at once through one selector, as ``GrpcProber`` does,
with the same answers: OK, DEADLINE_EXCEEDED (frozen or cut off), UNAVAILABLE (nothing
listens, or what listens does not speak HTTP/2).
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from launcher.monitors.probe import PROBE_DEADLINE, Answer
from orchestrator.roles import split_address

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS, PING, GOAWAY = 0x4, 0x6, 0x7
ACK = 0x1
FRAME_HEADER = 9


def frame(kind: int, payload: bytes = b"", flags: int = 0) -> bytes:
    """One HTTP/2 frame on stream 0."""
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + b"\0\0\0\0" + payload


GOODBYE = frame(GOAWAY, b"\0\0\0\0" + b"\0\0\0\0")     # last stream 0, NO_ERROR


Sockaddr = tuple[int, tuple]     # (family, sockaddr) as getaddrinfo gives them


@dataclass
class Probe:
    """One PING under way, to the first of ``candidates`` that takes the connection."""

    address: str
    candidates: list[Sockaddr]
    opaque: bytes
    sock: socket.socket | None = None
    tried: Sockaddr | None = None
    sent: bool = False
    frames: int = 0         # frames received
    received: bytearray = field(default_factory=bytearray)


class PingProber:
    """HTTP/2 PINGs, all addresses at once (``Prober``, launcher/monitors/liveness.py).
    An address that resolves to several (IPv6 and IPv4 localhost) is tried in turn until
    one takes the connection; the one that answered is tried first next time."""

    def __init__(self, deadline: float = PROBE_DEADLINE):
        self.deadline = deadline
        self._resolved: dict[str, list[Sockaddr]] = {}

    def _sockaddrs(self, address: str) -> list[Sockaddr]:
        found = self._resolved.get(address)
        if found is None:
            host, port = split_address(address)
            found = self._resolved[address] = list(dict.fromkeys(
                (family, sockaddr) for family, _, _, _, sockaddr in
                socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)))
        return found

    def ask_all(self, addresses: Iterable[str]) -> dict[str, Answer]:
        return PingRound(self, addresses).answers

    def answered(self, probe: Probe) -> None:
        """``probe.tried`` took the connection and answered: it comes first next time."""
        if probe.tried is not None:
            found = self._resolved.get(probe.address, [])
            self._resolved[probe.address] = [probe.tried, *(c for c in found
                                                            if c != probe.tried)]

    def forget(self, address: str) -> None:
        """Resolve ``address`` afresh next time (its task restarts)."""
        self._resolved.pop(address, None)

    def close(self) -> None:
        self._resolved.clear()


class PingRound:
    """One ``ask_all``: every PING sent at once, answered within one deadline."""

    def __init__(self, prober: PingProber, addresses: Iterable[str]):
        self.prober = prober
        self.started = time.monotonic()
        self.answers: dict[str, Answer] = {}
        self.selector = selectors.DefaultSelector()
        try:
            for address in dict.fromkeys(addresses):
                try:
                    candidates = list(prober._sockaddrs(address))
                except (OSError, ValueError):
                    candidates = []
                self._connect(Probe(address, candidates, os.urandom(8)))
            while self.selector.get_map():
                left = self.started + prober.deadline - time.monotonic()
                if left <= 0:
                    break
                for key, _ in self.selector.select(left):
                    self._step(key.data)
            for key in list(self.selector.get_map().values()):
                self._answer(key.data, "DEADLINE_EXCEEDED")
        finally:
            self.selector.close()

    def _connect(self, probe: Probe) -> None:
        """Connect to the next candidate that does not refuse at once; UNAVAILABLE when
        none is left."""
        while probe.candidates:
            probe.tried = probe.candidates.pop(0)
            family, sockaddr = probe.tried
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError:
                continue
            sock.setblocking(False)
            if sock.connect_ex(sockaddr) in (0, errno.EINPROGRESS):
                probe.sock = sock
                self.selector.register(sock, selectors.EVENT_WRITE, probe)
                return
            sock.close()
        self._answer(probe, "UNAVAILABLE")          # nothing listens

    def _drop(self, probe: Probe) -> None:
        if probe.sock is not None:
            try:
                self.selector.unregister(probe.sock)
            except (KeyError, ValueError):
                pass
            probe.sock.close()
            probe.sock = None

    def _answer(self, probe: Probe, code: str) -> None:
        if code == "OK" and probe.sock is not None:
            try:
                probe.sock.send(GOODBYE)
            except OSError:
                pass
            self.prober.answered(probe)
        self._drop(probe)
        self.answers[probe.address] = Answer(code == "OK", code,
                                             round(time.monotonic() - self.started, 4))

    def _step(self, probe: Probe) -> None:
        """The probe's socket is ready: send the PING once connected, then read frames
        until its ACK."""
        sock = probe.sock
        assert sock is not None
        if not probe.sent:
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                self._drop(probe)                   # refused: the next candidate
                self._connect(probe)
                return
            try:
                sock.send(PREFACE + frame(SETTINGS) + frame(PING, probe.opaque))
            except OSError:
                self._answer(probe, "UNAVAILABLE")
                return
            probe.sent = True
            self.selector.modify(sock, selectors.EVENT_READ, probe)
            return
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._answer(probe, "UNAVAILABLE")      # closed: not an HTTP/2 server
            return
        probe.received += data
        while len(probe.received) >= FRAME_HEADER:
            length = int.from_bytes(probe.received[:3], "big")
            kind, flags = probe.received[3], probe.received[4]
            if not probe.frames and kind != SETTINGS:
                self._answer(probe, "UNAVAILABLE")  # an HTTP/2 server begins with SETTINGS
                return
            if len(probe.received) < FRAME_HEADER + length:
                return
            payload = bytes(probe.received[FRAME_HEADER:FRAME_HEADER + length])
            del probe.received[:FRAME_HEADER + length]
            probe.frames += 1
            if kind == PING and flags & ACK and payload == probe.opaque:
                self._answer(probe, "OK")
                return
            if kind == GOAWAY:
                self._answer(probe, "UNAVAILABLE")
                return
