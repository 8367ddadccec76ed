"""The steps of a chief's events file read as series: a step below the one before means a
restore.

TF1's ``MonitoredTrainingSession`` recovers from a session error by restoring the newest
checkpoint: its summaries then start again from that step, in the same events file, and
another writer's summaries can go on interleaved with them (``… 1452, 1477, 37, 62, 67, 91,
118, 136, 1554 …``). The highest step ever seen (1554) is then not where the model is.

``StepSeries`` reads the steps in file order (a step repeated by the next record, several
summaries at one step, is one). A step at or below every series starts a new one (a
restore). A step above the newest series' latest step continues it, unless that is a jump
more than JUMP times the largest one seen between two steps of a series while an older
series lies closer below: then it continues that older one (an interleaved writer). Any other
step continues the series whose latest step is closest below it. An older series that the
newest caught up with is done. The newest series (the one started last) is
where the model is: its highest step is the step shown. Events may say "max_steps
reached" only while the newest series is read alone: once an older series was written to
after a restore (``interleaved``), only a checkpoint can say so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

MAX_SERIES = 8      # older series beyond these are forgotten
JUMP = 4            # a jump this many times the largest step gap is another writer's


@dataclass
class StepSeries:
    """The series of steps read so far (see the module docstring)."""

    lasts: list[int] = field(default_factory=list)   # each series' latest step, oldest first
    restores: list[tuple[int, int]] = field(default_factory=list)  # (from, to) per restore
    interleaved: bool = False   # a step went on an older series after a newer one started
    previous: int | None = None  # the step of the record read last
    gap: int = 0                 # the largest step increase seen within one series

    @property
    def newest(self) -> int | None:
        """The newest series' highest step (where the model is)."""
        return self.lasts[-1] if self.lasts else None

    @property
    def monotonic(self) -> bool:
        """One series only: the steps never went backwards."""
        return not self.restores

    def add(self, steps: Iterable[int]) -> list[tuple[int, int]]:
        """Read these steps in file order; return the restores they show (from, to)."""
        found = []
        for step in steps:
            if step == self.previous:
                continue
            self.previous = step
            below = [i for i, last in enumerate(self.lasts) if last < step]
            if not below:
                if self.lasts:
                    found.append((max(self.lasts), step))
                self.lasts = (self.lasts + [step])[-MAX_SERIES:]
                continue
            newest = len(self.lasts) - 1
            i = max(below, key=lambda j: self.lasts[j])
            if newest in below and step - self.lasts[newest] <= JUMP * max(self.gap, 1):
                i = newest
            self.gap = max(self.gap, step - self.lasts[i])
            if i != newest:
                self.interleaved = True
            self.lasts[i] = step
            newest = self.lasts[-1]
            self.lasts = [last for last in self.lasts[:-1] if last > newest] + [newest]
        self.restores += found
        return found
