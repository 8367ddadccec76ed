"""Each backend's options (the spec's ``ssh``, ``slurm``, ``kubernetes``, ``docker``
sections) are declared with the spec's own ``key()`` and parsed by its ``parse_section``:
one declaration system. The errors below are those the launcher gave before the two systems
were folded into one (measured on main at a86bc60), word for word."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from launcher.api import parse_spec
from launcher.backends import backend_class, names
from launcher.backends.docker import Mount
from launcher.errors import SpecError
from launcher.spec.declared import declared, properties

REPO = Path(__file__).resolve().parents[3]
SCHEMA = json.loads((REPO / "cluster_specs" / "schema.json").read_text())
WITH_OPTIONS = [n for n in names() if backend_class(n).OPTIONS is not None]

BAD = [
    ("ssh", {"user": "-x"}, "ssh.user: '-x' is not a user name"),
    ("ssh", {"user": 5}, "ssh.user: must be a string, got an integer"),
    ("ssh", {"user": "a\nb"}, "ssh.user: must be one line"),
    ("ssh", {"port": 0}, "ssh.port: must be at least 1, got 0"),
    ("ssh", {"port": 70000}, "ssh.port: must be at most 65535, got 70000"),
    ("ssh", {"port": True}, "ssh.port: must be an integer, got a boolean"),
    ("ssh", {"identity_file": ""}, "ssh.identity_file: must not be empty"),
    ("ssh", {"strict_host_key_checking": "maybe"},
     "ssh.strict_host_key_checking: must be true, false or \"accept-new\", got 'maybe'"),
    ("ssh", {"strict_host_key_checking": 1},
     'ssh.strict_host_key_checking: must be true, false or "accept-new", got 1'),
    ("ssh", {"connect_timeout": 0.5}, "ssh.connect_timeout: must be at least 1, got 0.5"),
    ("ssh", {"options": {"Port": "1"}}, "ssh.options.Port: set by tfcluster; use ssh.port"),
    ("ssh", {"options": {"a-b": "x"}},
     "ssh.options.a-b: is not an OpenSSH option name (letters and digits)"),
    ("ssh", {"options": {"ServerAliveInterval": "a\nb"}},
     "ssh.options.ServerAliveInterval: must be one line"),
    ("ssh", {"options": []}, "ssh.options: must be an object, got a list"),
    ("ssh", {"multiplex": "yes"}, "ssh.multiplex: must be true or false, got a string"),
    ("ssh", {"sync": 1}, 'ssh.sync: must be true, false or "force", got 1'),
    ("ssh", {"sync_dir": "a\x00b"}, "ssh.sync_dir: must be one line"),
    ("ssh", {"usr": "x"}, "ssh.usr: unknown key (allowed: config_file, connect_timeout, "
     "identity_file, known_hosts_file, multiplex, options, port, python, "
     "strict_host_key_checking, sync, sync_dir, user)"),
    ("ssh", "x", "ssh: must be an object, got a string"),
    ("slurm", {"partition": "a b"},
     "slurm.partition: 'a b' must be one word that does not start with '-'"),
    ("slurm", {"time": 5}, "slurm.time: must be a string, got an integer"),
    ("slurm", {"allocation_timeout": -1}, "slurm.allocation_timeout: must be at least 1, got -1"),
    ("slurm", {"salloc_args": []}, "slurm.salloc_args: must be a non-empty list of strings "
     "(the program and its arguments)"),
    ("slurm", {"salloc_args": ["rm"]},
     "slurm.salloc_args[0]: 'rm' is not an option: write each as --name=value"),
    ("slurm", {"srun_args": [1]}, "slurm.srun_args[0]: must be a string, got an integer"),
    ("slurm", {"signal_lead": 1.5}, "slurm.signal_lead: must be an integer, got a number"),
    ("slurm", {"steps": "nodes"}, "slurm.steps: must be one of node, task, got 'nodes'"),
    ("kubernetes", {"image": "a b"}, "kubernetes.image: 'a b' must not contain spaces"),
    ("kubernetes", {"namespace": "Bad_NS"}, "kubernetes.namespace: 'Bad_NS' is not a valid "
     "Kubernetes name (lower case letters, digits, '-')"),
    ("kubernetes", {"mode": "x"}, "kubernetes.mode: must be one of tfjob, plain, jobset, "
     "got 'x'"),
    ("kubernetes", {"ttl_seconds_after_finished": -1},
     "kubernetes.ttl_seconds_after_finished: must be at least 0, got -1"),
    ("kubernetes", {"node_selector": {"a": "x\ny"}},
     "kubernetes.node_selector.a: must be one line"),
    ("kubernetes", {"image_pull_secrets": "x"},
     "kubernetes.image_pull_secrets: must be a list of names"),
    ("kubernetes", {"image_pull_secrets": ["Bad"]},
     "kubernetes.image_pull_secrets[0]: 'Bad' is not a Kubernetes object name"),
    ("kubernetes", {"pod_group": 1},
     "kubernetes.pod_group: must be one of None, volcano, coscheduling, got 1"),
    ("docker", {"volumes": ["x"]},
     "docker.volumes[0]: 'x' must be SOURCE:TARGET or SOURCE:TARGET:ro"),
    ("docker", {"volumes": ["/a:/b", "/c:/b/"]},
     "docker.volumes[1]: target '/b' is mounted twice"),
    ("docker", {"network": "a/b"}, "docker.network: 'a/b' is not a network name"),
    ("local", {"x": 1}, "local.x: unknown key: backend 'local' takes no options"),
]


@pytest.mark.parametrize("backend, section, error", BAD,
                         ids=[f"{b}-{i}" for i, (b, _, _) in enumerate(BAD)])
def test_a_bad_option_gets_its_one_line(backend, section, error):
    with pytest.raises(SpecError) as raised:
        backend_class(backend).validate_options(section, backend)
    assert str(raised.value) == error


def test_good_options_are_kept_as_the_backends_use_them():
    ssh = backend_class("ssh").validate_options(
        {"identity_file": "~/k", "options": {"Compression": True, "ServerAliveInterval": 5},
         "strict_host_key_checking": "accept-new", "connect_timeout": 3}, "ssh")
    assert ssh.identity_file == os.path.expanduser("~/k") != "~/k"
    assert ssh.options == {"Compression": "yes", "ServerAliveInterval": "5"}
    assert (ssh.strict_host_key_checking, ssh.connect_timeout) == ("accept-new", 3.0)
    assert ssh.sync_dir == "~/.cache/tfcluster/sync" and ssh.multiplex is True
    docker = backend_class("docker").validate_options({"volumes": ["/a:/b:ro", "v:/c"]},
                                                      "docker")
    assert docker.volumes == (Mount("/a", "/b", True), Mount("v", "/c"))
    k8s = backend_class("kubernetes").validate_options(None, "kubernetes")
    again = backend_class("kubernetes").validate_options({}, "kubernetes")
    assert k8s == again and k8s.port == 2222 and k8s.pod_group is None
    assert k8s.node_selector is not again.node_selector      # a default made anew each time


@pytest.mark.parametrize("backend", WITH_OPTIONS)
def test_every_option_is_declared_once_with_key(backend):
    """All the fields of a backend's options are keys; the schema's section is theirs."""
    options = backend_class(backend).OPTIONS
    assert declared(options) == list(dataclasses.fields(options))
    section = SCHEMA["properties"][backend]
    assert section["properties"] == properties(options, with_defaults=False)
    assert section["additionalProperties"] is False


@pytest.mark.parametrize("given, port", [(True, None), ({}, None), ({"port": None}, None),
                                         ({"port": 6006}, 6006)])
def test_tensorboard_is_declared_and_still_takes_a_null_port(given, port):
    spec = parse_spec(json.dumps({"cluster": {"worker": 1}, "model_dir": "m",
                                  "tensorboard": given}))
    assert spec.tensorboard is not None and spec.tensorboard.port == port


@pytest.mark.parametrize("given, error", [
    ({"port": 70000}, "tensorboard.port: must be at most 65535, got 70000"),
    ({"port": True}, "tensorboard.port: must be an integer, got a boolean"),
    ({"host": 1}, "tensorboard.host: unknown key (allowed: port)"),
    ("yes", 'tensorboard: must be true, false or {"port": N}, got a string'),
])
def test_a_bad_tensorboard_gets_its_one_line(given, error):
    with pytest.raises(SpecError) as raised:
        parse_spec(json.dumps({"cluster": {"worker": 1}, "model_dir": "m",
                               "tensorboard": given}))
    assert str(raised.value) == error
