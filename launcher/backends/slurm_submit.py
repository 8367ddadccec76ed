"""``--detach`` on Slurm: a batch script (``sbatch``) with the attached run's allocation as
``#SBATCH`` lines, and one command, this launcher with ``--in-allocation``, which adopts the
job it runs in and starts every task as a job step of it, as an attached run does. The
script asks for ``--requeue`` and a warning signal (``--signal=B:TERM@N``) before the time
limit; a requeued job runs it again, in the same run id and run directory."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Any

from launcher.backends.engine import Submitter
from launcher.backends.slurm import SlurmBackend
from launcher.backends.slurm_follow import run_slurm
from launcher.errors import PreflightError
from launcher.plan import JobPlan


@dataclass(frozen=True)
class BatchScript:
    """The batch request: ``#SBATCH`` options, the launcher's command inside the job, and
    the job steps it will run there (as ``--dry-run`` shows them)."""

    options: tuple[str, ...]
    relaunch: tuple[str, ...]
    signal_lead: int
    steps: tuple[str, ...]
    path: str                       # where ``submit`` writes the script

    def script(self) -> str:
        lead = self.signal_lead
        return "\n".join([
            "#!/bin/bash",
            *(f"#SBATCH {opt}" for opt in self.options),
            "# tfcluster: the launcher runs inside this allocation and starts every task as a",
            "# job step (srun --overlap), ends the job at max_steps and stops the ps. The",
            f"# warning signal ({lead}s before the time limit) reaches the launcher alone; it",
            "# stops the tasks in order. A requeued job runs this script again: same run id,",
            "# the tasks resume from model_dir's newest checkpoint.",
            "exec " + shlex.join(self.relaunch), ""])

    def text(self) -> str:
        return "\n".join(["# Slurm --detach: sbatch of this batch script", "", self.script(),
                          "# inside it, the launcher runs the tasks as job steps:",
                          *self.steps])


class SlurmSubmitter(Submitter):
    """``sbatch`` of the batch script; the handle names the job."""

    backend: SlurmBackend

    def request(self, plan: JobPlan, run_dir: str, relaunch: list[str]) -> BatchScript:
        o = self.backend.options
        options = [*self.backend.allocation.options, *o.salloc_args,
                   f"--output={os.path.join(run_dir, 'launcher.log')}", "--open-mode=append",
                   f"--chdir={os.getcwd()}", "--export=ALL", "--requeue",
                   f"--signal=B:TERM@{o.signal_lead}"]
        return BatchScript(tuple(options), tuple(relaunch), o.signal_lead,
                           self.backend.step_lines(plan).steps,
                           os.path.join(run_dir, "batch.sh"))

    def submit(self, plan: JobPlan, request: BatchScript) -> dict[str, Any]:
        with open(request.path, "w", encoding="utf-8") as f:
            f.write(request.script())
        os.chmod(request.path, 0o755)
        done = run_slurm(["sbatch", "--parsable", request.path])
        if done.returncode != 0 or not done.stdout.strip():
            reason = (done.stderr or done.stdout).strip() or f"exit {done.returncode}"
            raise PreflightError(f"sbatch failed: {reason}")
        return {"slurm_job": done.stdout.strip().split(";")[0], "batch_script": request.path,
                "batch": True}
