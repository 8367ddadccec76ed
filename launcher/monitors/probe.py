"""What a liveness probe answers (launcher/monitors/liveness.py asks through it; the
probes: ``GrpcProber`` there, ``PingProber`` in launcher/monitors/ping.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

PROBE_DEADLINE = 1.0      # seconds one probe may take


@dataclass(frozen=True)
class Answer:
    """One probe: ``ok`` when the server answered; ``code`` is grpc's status name
    (OK, DEADLINE_EXCEEDED: frozen or cut off, UNAVAILABLE: nothing listens)."""

    ok: bool
    code: str
    took: float = 0.0


class Prober(Protocol):
    def ask_all(self, addresses: Iterable[str]) -> dict[str, Answer]: ...

    def forget(self, address: str) -> None: ...

    def close(self) -> None: ...
