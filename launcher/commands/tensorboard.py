"""``launch tensorboard RUN``: serve any run's model_dir with TensorBoard on this machine."""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str]) -> int:
    """``launch tensorboard RUN``: serve a run's model_dir here until Ctrl-C."""
    import json

    from launcher.backends import backend_class
    from launcher.backends.processes import free_port
    from launcher.records.registry import RunError, find_run
    from launcher.tensorboard import TensorBoard, board_task, here_python, local_logdir, python_of

    p = argparse.ArgumentParser(
        prog="launch tensorboard",
        description="Serve a run's model_dir with TensorBoard on this machine until Ctrl-C: "
                    "any run, running or finished.")
    p.add_argument("run", metavar="RUN", help="run id (or a unique prefix), or run directory")
    p.add_argument("--root", metavar="DIR",
                   help="the run root (default: $TFCLUSTER_RUNS, else .tfcluster/runs)")
    p.add_argument("--port", type=int, default=None, help="default: a free port")
    args = p.parse_args(argv)
    run_dir = find_run(args.run, args.root)
    path = os.path.join(run_dir, "plan.json")
    try:
        with open(path, encoding="utf-8") as f:
            plan = json.load(f)
        logdir = local_logdir(plan["storage"]["url"])
        primary = next(t for t in plan["tasks"] if t["type"] in ("chief", "master", "worker"))
    except FileNotFoundError:
        raise RunError(f"{run_dir} has no plan.json: the run never started") from None
    except (OSError, ValueError, KeyError, TypeError, StopIteration) as e:
        raise RunError(f"{path} cannot be read ({type(e).__name__}: {e})") from None
    if "://" not in logdir and not os.path.isdir(logdir):
        raise RunError(f"model_dir {logdir} is not on this machine: run `launch tensorboard` "
                       "on a host that has it")
    python = python_of(primary["command"])
    python = here_python(python)
    env = {"TFCLUSTER_RUN_ID": plan.get("run_id", "")}
    board = TensorBoard(board_task(python, env, None, "localhost", logdir,
                                   args.port or free_port()),
                        backend_class("local")(), os.path.join(run_dir, "logs", "tensorboard.log"),
                        lambda line: print(f"tfcluster: {line}", file=sys.stderr, flush=True),
                        own_backend=True)
    try:
        board.start()
        board.wait()
    except KeyboardInterrupt:
        pass
    finally:
        board.stop()
    return 2 if board.served.state == "not installed" else 0
