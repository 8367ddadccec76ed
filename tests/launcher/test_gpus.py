"""GPU assignment (launcher/gpus.py): nvidia-smi's answer read, every task's devices decided
from what each machine has and what the spec asks, over-asks refused in one line."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launcher.api import parse_spec
from launcher.gpus import (
    Ask,
    Gpu,
    GpuError,
    Ledger,
    Machine,
    Placement,
    ask_of,
    assign,
    counted_devices,
    env_of,
    even_split,
    named_devices,
    parse_query,
    restrict,
    shared_round_robin,
)

TRAINERS = ("chief", "master", "worker")


def gpus(n: int) -> tuple[Gpu, ...]:
    return tuple(Gpu(i, f"GPU-{i:04d}", 81559) for i in range(n))


def machine(n: int | None, *tasks: str, name: str = "h1") -> Machine:
    return Machine(name, gpus(n) if n is not None else None, tasks)


def ask(task: str, **kw) -> Ask:
    return Ask(task, task.split(":")[0], **kw)


def devices(out: dict[str, Placement | None]) -> dict[str, str | None]:
    return {t: (p.visible if p is not None else None) for t, p in out.items()}


def test_parse_query_reads_nvidia_smis_csv():
    text = "0, GPU-1a2b, 81559\n1, GPU-3c4d, 81559\n\n"
    assert parse_query(text) == (Gpu(0, "GPU-1a2b", 81559), Gpu(1, "GPU-3c4d", 81559))
    assert parse_query("0, GPU-x, [N/A]\n") == (Gpu(0, "GPU-x", None),)
    with pytest.raises(ValueError):
        parse_query("NVIDIA-SMI has failed because it couldn't communicate with the driver")


def test_restrict_keeps_the_launchers_own_cuda_visible_devices():
    assert restrict(gpus(4), None) == gpus(4)
    assert [g.index for g in restrict(gpus(4), "1,GPU-0003")] == [1, 3]
    assert restrict(gpus(4), "") == ()


# (machine's GPUs, asks, expected CUDA_VISIBLE_DEVICES per task)
TABLE = [
    # the default: trainers split the host's GPUs; ps, evaluator on CPU
    (4, [ask("chief:0"), ask("worker:0"), ask("worker:1"), ask("ps:0"), ask("evaluator:0")],
     {"chief:0": "0,1", "worker:0": "2", "worker:1": "3", "ps:0": "", "evaluator:0": ""}),
    (6, [ask("worker:0"), ask("worker:1"), ask("ps:0")],
     {"worker:0": "0,1,2", "worker:1": "3,4,5", "ps:0": ""}),
    # more trainers than GPUs: one each while they last, the rest on CPU
    (1, [ask("chief:0"), ask("worker:0")], {"chief:0": "0", "worker:0": ""}),
    # counts first, then the defaults share what is left
    (4, [ask("chief:0", count=1), ask("worker:0"), ask("worker:1"), ask("evaluator:0", count=1)],
     {"chief:0": "0", "evaluator:0": "1", "worker:0": "2", "worker:1": "3"}),
    (2, [ask("ps:0", count=1), ask("worker:0")], {"worker:0": "1", "ps:0": "0"}),
    (2, [ask("worker:0", count=0), ask("worker:1")], {"worker:0": "", "worker:1": "0,1"}),
    # named devices, indices or UUIDs
    (4, [ask("worker:0", devices=("3",)), ask("worker:1", devices=("GPU-0000",)),
         ask("chief:0")],
     {"worker:0": "3", "worker:1": "GPU-0000", "chief:0": "1,2"}),
    (2, [ask("worker:0", devices=())], {"worker:0": ""}),
    # sharing on purpose: one GPU for every trainer, allow-growth
    (1, [ask("chief:0", share=True), ask("worker:0", share=True), ask("worker:1", share=True),
         ask("ps:0")],
     {"chief:0": "0", "worker:0": "0", "worker:1": "0", "ps:0": ""}),
    (2, [ask("worker:0", share=True), ask("worker:1", share=True), ask("worker:2", share=True)],
     {"worker:0": "0", "worker:1": "1", "worker:2": "0"}),
    (2, [ask("worker:0", devices=("0",), share=True), ask("worker:1", devices=("0",), share=True),
         ask("chief:0")],
     {"worker:0": "0", "worker:1": "0", "chief:0": "1"}),
]


@pytest.mark.parametrize(("n", "asks", "want"), TABLE)
def test_assignment_table(n, asks, want):
    out = assign([machine(n, *(a.task for a in asks))], asks, TRAINERS)
    assert devices(out) == want


def test_parameter_server_strategy_coordinator_runs_on_cpu():
    asks = [ask("chief:0"), ask("worker:0"), ask("worker:1"), ask("ps:0")]
    out = assign([machine(2, *(a.task for a in asks))], asks, ("worker",))
    assert devices(out) == {"chief:0": "", "worker:0": "0", "worker:1": "1", "ps:0": ""}


def test_a_host_without_gpus_sets_nothing():
    asks = [ask("chief:0"), ask("ps:0", count=0)]
    for n in (None, 0):
        out = assign([machine(n, "chief:0", "ps:0")], asks, TRAINERS)
        assert out == {"chief:0": None, "ps:0": None}


def test_each_machine_gives_out_its_own_gpus():
    asks = [ask("worker:0"), ask("worker:1"), ask("ps:0")]
    out = assign([machine(2, "worker:0", "ps:0", name="h1"), machine(1, "worker:1", name="h2")],
                 asks, TRAINERS)
    assert devices(out) == {"worker:0": "0,1", "worker:1": "0", "ps:0": ""}


@pytest.mark.parametrize(("n", "asks", "words"), [
    (2, [ask("worker:0", count=2), ask("worker:1", count=1)],
     ["host h1", "worker:0 (2 GPUs), worker:1 (1 GPU)", "3 GPUs", "2 GPUs (0, 1)"]),
    (None, [ask("worker:0", count=1)], ["host h1", "worker:0", "no nvidia-smi"]),
    (0, [ask("worker:0", devices=("0",))], ["worker:0", "nvidia-smi found none"]),
    (2, [ask("worker:0", devices=("7",))], ["no GPU '7'", "worker:0", "2 GPUs (0, 1)"]),
    (2, [ask("worker:0", devices=("1",)), ask("worker:1", devices=("1",))],
     ["GPU 1", "worker:0", "worker:1", "gpu_share"]),
    (2, [ask("worker:0", devices=("1",), share=True), ask("worker:1", devices=("1",))],
     ["GPU 1", "worker:1"]),
    (1, [ask("chief:0", count=1), ask("worker:0", share=True)], ["worker:0", "1 GPU (0)"]),
])
def test_over_asks_are_one_line_naming_host_tasks_and_what_it_has(n, asks, words):
    with pytest.raises(GpuError) as info:
        assign([machine(n, *(a.task for a in asks))], asks, TRAINERS)
    message = str(info.value)
    assert "\n" not in message and info.value.exit_status == 2
    for word in words:
        assert word in message


@given(n=st.integers(0, 16), trainers=st.integers(1, 12), ps=st.integers(0, 3),
       counts=st.lists(st.one_of(st.none(), st.integers(0, 3)), max_size=12))
def test_tasks_that_do_not_share_never_get_the_same_gpu(n, trainers, ps, counts):
    asks = [Ask(f"worker:{i}", "worker", count=counts[i] if i < len(counts) else None)
            for i in range(trainers)] + [ask(f"ps:{i}") for i in range(ps)]
    try:
        out = assign([machine(n, *(a.task for a in asks))], asks, TRAINERS)
    except GpuError:
        assert sum(c or 0 for c in counts[:trainers]) > n
        return
    given_out = [d for p in out.values() if p is not None for d in p.devices]
    assert len(given_out) == len(set(given_out))
    assert all(out[f"ps:{i}"] in (None, Placement(())) for i in range(ps))
    for a in asks:
        if a.count is not None and n:
            assert len(out[a.task].devices) == a.count
    if n and not any(c is not None for c in counts[:trainers]):
        assert len(given_out) == n          # the defaults leave no GPU idle...
        sizes = [len(out[a.task].devices) for a in asks if a.role == "worker"]
        assert max(sizes) - min(sizes) <= 1   # ...and split them evenly


def test_ask_of_reads_a_tasks_resources():
    spec = parse_spec(json.dumps({
        "cluster": {"worker": 2, "ps": 1}, "model_dir": "m", "command": ["x"],
        "resources": {"default": {"gpus": 2}, "worker": {"devices": ["0,1", ""],
                                                         "gpu_share": True}}}))
    from launcher.spec import resources_for

    assert ask_of("worker:1", "worker", 1, resources_for(spec.resources, "worker")) == \
        Ask("worker:1", "worker", devices=(), share=True)
    assert ask_of("worker:0", "worker", 0, resources_for(spec.resources, "worker")).devices == \
        ("0", "1")
    assert ask_of("ps:0", "ps", 0, resources_for(spec.resources, "ps")) == \
        Ask("ps:0", "ps", count=2)


def test_env_of_a_placement():
    assert env_of(None) == {}
    assert env_of(Placement(())) == {"CUDA_VISIBLE_DEVICES": ""}
    assert env_of(Placement(("0", "2"), share=True)) == {
        "CUDA_VISIBLE_DEVICES": "0,2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "TF_FORCE_GPU_ALLOW_GROWTH": "true"}


@pytest.mark.parametrize(("resources", "words"), [
    ({"worker": {"devices": ["0"]}}, ["resources.worker.devices", "1 entries for 2 worker"]),
    ({"evaluator": {"devices": ["0"]}}, ["resources.evaluator.devices", "0 evaluator tasks"]),
    ({"worker": {"devices": ["0,0", "1"]}}, ["resources.worker.devices[0]", "twice"]),
    ({"worker": {"gpus": 1, "devices": ["0", "1"]}}, ["not both"]),
])
def test_spec_refuses_device_lists_that_cannot_fit(resources, words):
    from launcher.errors import SpecError

    with pytest.raises(SpecError) as info:
        parse_spec(json.dumps({"cluster": {"worker": 2}, "model_dir": "m", "command": ["x"],
                               "resources": resources}))
    for word in words:
        assert word in str(info.value)


def test_each_step_of_a_machines_assignment_alone():
    """The four steps, each on a ledger of its own: named devices, counts from what nobody
    named, the quiet trainers' even split of the rest, sharing round-robin."""
    ledger = Ledger(machine(4, "chief:0", "worker:0", "worker:1", "ps:0"))
    named_devices(ledger, [ask("chief:0", devices=("3",))])
    assert devices(ledger.out) == {"chief:0": "3"} and ledger.owner == {3: "chief:0"}
    counted_devices(ledger, [ask("ps:0", count=1)])
    assert devices(ledger.out)["ps:0"] == "0" and [g.index for g in ledger.free()] == [1, 2]
    even_split(ledger, [ask("worker:0"), ask("worker:1"), ask("ps:1")], set(TRAINERS))
    assert devices(ledger.out) == {"chief:0": "3", "ps:0": "0", "worker:0": "1",
                                   "worker:1": "2"}
    shared = Ledger(machine(2, "worker:0", "worker:1", "worker:2"))
    shared_round_robin(shared, [ask(f"worker:{i}", share=True) for i in range(3)],
                       set(TRAINERS))
    assert devices(shared.out) == {"worker:0": "0", "worker:1": "1", "worker:2": "0"}
    with pytest.raises(GpuError, match="no GPU '7'"):
        named_devices(Ledger(machine(2, "chief:0")), [ask("chief:0", devices=("7",))])
