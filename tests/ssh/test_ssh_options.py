"""The spec's ``ssh`` section and the ssh command lines it gives (no hosts needed)."""

from __future__ import annotations

import json
import shlex

import pytest
from support import run_launch

from launcher.backends.agent.entry import SSH_STUB as STUB
from launcher.backends.ssh import SSHBackend, explain_ssh_error, remote_command
from launcher.errors import SpecError


def backend(section: dict | None = None) -> SSHBackend:
    return SSHBackend(SSHBackend.validate_options(section, "ssh"))


@pytest.mark.parametrize("section, field, words", [
    ({"usr": "root"}, "ssh.usr", "unknown key"),
    ({"port": "22"}, "ssh.port", "must be an integer"),
    ({"port": 70000}, "ssh.port", "at most 65535"),
    ({"user": "-oProxyCommand=x"}, "ssh.user", "not a user name"),
    ({"user": "root@h1"}, "ssh.user", "not a user name"),
    ({"strict_host_key_checking": "no"}, "ssh.strict_host_key_checking",
     'must be true, false or "accept-new"'),
    ({"connect_timeout": 0}, "ssh.connect_timeout", "at least 1"),
    ({"options": {"StrictHostKeyChecking": "no"}}, "ssh.options.StrictHostKeyChecking",
     "use ssh.strict_host_key_checking"),
    ({"options": {"batchmode": "no"}}, "ssh.options.batchmode", "cannot be changed"),
    ({"options": {"Proxy Jump": "x"}}, "ssh.options.Proxy Jump", "not an OpenSSH option"),
    ({"options": {"ProxyJump": "a\nb"}}, "ssh.options.ProxyJump", "one line"),
    ({"multiplex": "yes"}, "ssh.multiplex", "must be true or false"),
])
def test_bad_ssh_section_names_the_field(section, field, words):
    with pytest.raises(SpecError) as err:
        SSHBackend.validate_options(section, "ssh")
    assert err.value.field == field
    assert words in err.value.message


def test_host_key_checking_on_by_default_and_batch_mode_always():
    argv = backend().ssh_argv("10.0.0.1", "true")
    assert "StrictHostKeyChecking=yes" in argv
    assert "BatchMode=yes" in argv
    assert argv[-3:] == ["--", "10.0.0.1", "true"]
    off = backend({"strict_host_key_checking": False}).ssh_argv("10.0.0.1")
    assert "StrictHostKeyChecking=no" in off and "UserKnownHostsFile=/dev/null" in off
    new = backend({"strict_host_key_checking": "accept-new"}).ssh_argv("10.0.0.1")
    assert "StrictHostKeyChecking=accept-new" in new


def test_section_maps_to_ssh_options():
    argv = backend({"user": "alice", "port": 2222, "identity_file": "/k/id 1%",
                    "known_hosts_file": "/k/known hosts", "config_file": "/k/config",
                    "connect_timeout": 2.5, "options": {"ProxyJump": "bastion", "Compression": True}
                    }).ssh_argv("10.0.0.1")
    line = shlex.join(argv)
    assert "-l alice" in line and "-p 2222" in line and "-F /k/config" in line
    assert "-i '/k/id 1%%'" in line and "IdentitiesOnly=yes" in line
    assert "'UserKnownHostsFile=\"/k/known hosts\"'" in line
    assert "ConnectTimeout=3" in line
    # The user's options come first: for OpenSSH the first value given wins.
    assert argv.index("ProxyJump=bastion") < argv.index("BatchMode=yes")
    assert "Compression=yes" in argv


def test_remote_command_holds_nothing_of_the_task():
    """Arguments and environment go as JSON on stdin; the remote shell sees only the stub."""
    assert remote_command("python3") == f"exec python3 -I -S -c {shlex.quote(STUB)}"
    assert remote_command("/opt/my python/bin/python3").startswith(
        "exec '/opt/my python/bin/python3' -I -S -c ")


def test_ssh_errors_explained():
    changed = ("@@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
               "Host key verification failed.\n")
    opts = SSHBackend.validate_options({"known_hosts_file": "/k/kh"}, "ssh")
    assert "does not match the one in /k/kh" in explain_ssh_error(changed, opts)
    assert explain_ssh_error("root@h: Permission denied (publickey).", opts).startswith(
        "authentication failed")
    assert explain_ssh_error("ssh: connect to host h port 22: Connection refused", opts) == \
        "cannot connect: ssh: connect to host h port 22: Connection refused"


def test_dry_run_connects_to_nothing_and_shows_the_ssh_command(tmp_path):
    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps({
        "cluster": {"chief": ["192.0.2.1"], "ps": ["192.0.2.2"]}, "backend": "ssh",
        "command": ["python3", "train.py"], "model_dir": "/shared/model",
        "ssh": {"user": "tf", "connect_timeout": 1}}))
    done = run_launch(str(spec), "--dry-run", timeout=30)
    assert done.returncode == 0, done.stderr
    assert "ssh -F" not in done.stdout
    assert "-l tf -- 192.0.2.1 'exec python3 -I -S -c" in done.stdout
    assert "-l tf -- 192.0.2.2 'exec python3 -I -S -c" in done.stdout
