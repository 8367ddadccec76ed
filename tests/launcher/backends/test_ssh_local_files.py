"""ssh's files on this machine (``identity_file``, ``known_hosts_file``, ``config_file``)
are checked before any host is asked: one that is missing, or a folder, is one line that
names the option."""

from __future__ import annotations

import json

import pytest

from launcher.api import parse_spec
from launcher.backends.ssh import SSHBackend
from launcher.backends.ssh_openssh import SSHOptions
from launcher.errors import PreflightError
from launcher.plan import build_plan

KEYS = ("identity_file", "known_hosts_file", "config_file")


@pytest.mark.parametrize("key", KEYS)
def test_a_missing_file_or_a_folder_is_named_by_its_option(tmp_path, key):
    for path in (tmp_path / "gone", tmp_path):
        backend = SSHBackend(SSHOptions(**{key: str(path)}))
        spec = parse_spec(json.dumps({"cluster": {"chief": ["tfc-nohost.invalid"]},
                                      "command": ["python3", "t.py"],
                                      "model_dir": str(tmp_path / "m")}))
        plan = build_plan(spec, port_for=backend.allocate_port, place=backend.place)
        with pytest.raises(PreflightError) as raised:       # before any host is asked
            backend.preflight(plan)
        assert str(raised.value) == f"ssh.{key}: file not found: {path}"


def test_files_that_exist_pass_the_check(tmp_path):
    files = {key: tmp_path / key for key in KEYS}
    for f in files.values():
        f.write_text("")
    backend = SSHBackend(SSHOptions(**{k: str(f) for k, f in files.items()}))
    backend._check_local_files()        # the step alone: preflight would go on to the hosts
