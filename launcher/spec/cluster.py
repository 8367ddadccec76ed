"""The job's shape: ``cluster``, ``evaluator``, ``name``, its end (``max_steps`` or epochs),
``keras`` and ``strategy``: the keys whose rules read each other, written by hand."""

from __future__ import annotations

import os
import re
from typing import Any

from launcher.checks import (
    Address,
    expect_dict,
    expect_int,
    expect_str,
    fail,
    parse_address,
    type_name,
)
from launcher.spec.sections import KERAS_JAX, KERAS_ROUTES, STRATEGIES
from orchestrator.roles import JOB_NAMES, TRAINERS

NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
_NAME_RE = re.compile(NAME_PATTERN)


def parse_cluster(raw: Any) -> dict[str, list[Address]]:
    cluster = expect_dict(raw, "cluster")
    if not cluster:
        raise fail("cluster", "must name at least one job (chief, worker, ps)")
    out: dict[str, list[Address]] = {}
    for job, value in cluster.items():
        where = f"cluster.{job}"
        if job == "evaluator":
            raise fail(where, "the evaluator is given apart from cluster, as the top-level "
                               "key \"evaluator\" (TensorFlow keeps it outside the cluster)")
        if job not in JOB_NAMES:
            raise fail(where, f"unknown job name (allowed: {', '.join(JOB_NAMES)})")
        if isinstance(value, bool) or not isinstance(value, (int, list)):
            raise fail(where, "must be a list of addresses or a count of tasks on localhost, "
                               f"got {type_name(value)}")
        if isinstance(value, int):
            if value < 1:
                raise fail(where, f"task count must be at least 1, got {value}")
            if value > 4096:
                raise fail(where, f"task count {value} is more than 4096")
            out[job] = [Address("localhost") for _ in range(value)]
        else:
            if not value:
                raise fail(where, "must list at least one address (leave the job out instead)")
            out[job] = [parse_address(a, f"{where}[{i}]") for i, a in enumerate(value)]
    for job in ("chief", "master"):
        if job in out and len(out[job]) > 1:
            raise fail(f"cluster.{job}", f"at most one {job} task, got {len(out[job])}")
    if "master" in out and "chief" in out:
        raise fail("cluster.master", "legacy 'master' cannot be used together with 'chief'")
    if not any(j in out for j in TRAINERS):
        raise fail("cluster", "needs a task that trains: chief, master or worker")
    return out


def check_duplicates(cluster: dict[str, list[Address]], evaluator: Address | None) -> None:
    seen: dict[tuple[str, int], str] = {}
    entries = [(f"cluster.{j}[{i}]", a) for j, addrs in cluster.items() for i, a in
               enumerate(addrs)]
    if evaluator is not None:
        entries.append(("evaluator", evaluator))
    for where, addr in entries:
        if addr.port is None:
            continue
        key = (addr.host.lower(), addr.port)
        if key in seen:
            raise fail(where, f"address {addr} is already used by {seen[key]}")
        seen[key] = where


def parse_evaluator(spec_obj: dict, cluster: dict[str, list[Address]]) -> Address | None:
    if spec_obj.get("evaluator") is None:
        return None
    evaluator = parse_address(spec_obj["evaluator"], "evaluator")
    if "master" in cluster:
        raise fail("evaluator", "legacy 'master' cannot be used together with an evaluator")
    return evaluator


def parse_name(spec_obj: dict, source: str | None) -> str:
    default_name = os.path.splitext(os.path.basename(source))[0] if source else "job"
    name = expect_str(spec_obj.get("name", default_name), "name")
    if not _NAME_RE.match(name):
        raise fail("name", f"{name!r} must be letters, digits, '_', '.', '-' (at most 63)")
    return name


def parse_steps(spec_obj: dict) -> tuple[int | None, int | None, int | None, int | None]:
    """max_steps, or epochs, examples and batch_size (max_steps is derived from them)."""
    max_steps = None
    if spec_obj.get("max_steps") is not None:
        max_steps = expect_int(spec_obj["max_steps"], "max_steps")
    epoch_keys = [k for k in ("epochs", "examples", "batch_size") if spec_obj.get(k) is not None]
    if not epoch_keys:
        return max_steps, None, None, None
    if max_steps is not None:
        raise fail(epoch_keys[0], "give either max_steps or epochs/examples/batch_size, "
                                  "not both")
    missing = [k for k in ("epochs", "examples", "batch_size") if k not in epoch_keys]
    if missing:
        raise fail(missing[0], f"is required together with {', '.join(epoch_keys)} "
                               "(max_steps is derived from epochs, examples, batch_size)")
    return (None, expect_int(spec_obj["epochs"], "epochs"),
            expect_int(spec_obj["examples"], "examples"),
            expect_int(spec_obj["batch_size"], "batch_size"))


def parse_keras(spec_obj: dict, cluster: dict[str, list[Address]],
                 evaluator: Address | None) -> str | None:
    """``keras``: tf-keras, jax or absent. Keras 3 on JAX is one collective of chief and
    workers: no ps, no evaluator beside it (docs/keras.md)."""
    if spec_obj.get("keras") is None:
        return None
    keras = expect_str(spec_obj["keras"], "keras")
    if keras not in KERAS_ROUTES:
        raise fail("keras", f"unknown Keras {keras!r} (allowed: {', '.join(KERAS_ROUTES)})")
    if keras == KERAS_JAX:
        if "ps" in cluster:
            raise fail("keras", "jax runs chief and workers as one collective of JAX "
                                "processes: it has no parameter servers (remove cluster.ps)")
        if evaluator is not None:
            raise fail("keras", "jax runs chief and workers as one collective of JAX "
                                "processes: an evaluator cannot join it (remove evaluator; "
                                "evaluate in the script, or in a job of its own)")
        if "master" in cluster:
            raise fail("keras", "jax takes chief and workers, not the legacy master")
        if spec_obj.get("strategy", "multi_worker_mirrored") != "multi_worker_mirrored":
            raise fail("keras", "jax training is collective: every process takes each step "
                                "(strategy multi_worker_mirrored, the default; remove "
                                "strategy)")
    elif spec_obj.get("strategy") == "estimator":
        raise fail("keras", "tf-keras is for TensorFlow 2 strategies (multi_worker_mirrored, "
                            "parameter_server); an Estimator job runs on TensorFlow <= 2.15, "
                            "whose tf.keras is Keras 2 already")
    return keras


def parse_strategy(spec_obj: dict, cluster: dict[str, list[Address]],
                    keras: str | None = None) -> str:
    n_trainers = sum(len(cluster.get(j, [])) for j in TRAINERS)
    inferred = ("multi_worker_mirrored" if "ps" not in cluster and
                (n_trainers > 1 or keras is not None)
                else "parameter_server" if keras is not None and "worker" in cluster
                else "estimator")
    strategy = expect_str(spec_obj.get("strategy", inferred), "strategy")
    if strategy not in STRATEGIES:
        raise fail("strategy", f"unknown strategy {strategy!r} (allowed: "
                               f"{', '.join(STRATEGIES)})")
    if strategy == "parameter_server" and ("ps" not in cluster or "worker" not in cluster):
        raise fail("strategy", "parameter_server needs at least one ps and one worker")
    if strategy == "multi_worker_mirrored" and "ps" in cluster:
        raise fail("strategy", "multi_worker_mirrored takes no ps (remove cluster.ps)")
    return strategy
