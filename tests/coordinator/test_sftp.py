"""Checkpoint reading through sftp:// against a real sshd (a network-namespace host from
tests/infra/netns_hosts.py; it shares this machine's filesystem, so the test writes the
files locally and the reader sees them only through SFTP)."""

from __future__ import annotations

import os

import fsspec
import pytest
from infra.netns_hosts import missing_prerequisites, start_hosts
from tf_writes import FakeTrainer

from orchestrator.checkpoints import CheckpointReader


@pytest.fixture(scope="module")
def sftp_host(tmp_path_factory):
    why = missing_prerequisites()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"an SSH host cannot be made: {why}")
        pytest.skip(f"an SSH host cannot be made: {why}")
    bed = start_hosts(tmp_path_factory.mktemp("sftp-host"), count=1)
    yield bed
    bed.stop()


def test_newest_complete_checkpoint_over_sftp(sftp_host, tmp_path):
    host = sftp_host.hosts[0]
    options = {"username": "root", "key_filename": str(sftp_host.client_key),
               "look_for_keys": False, "allow_agent": False, "timeout": 10}
    trainer = FakeTrainer(fsspec.filesystem("file"), str(tmp_path / "model"), shards=2)
    reader = CheckpointReader(f"sftp://{host.address}{tmp_path}/model", options)
    try:
        trainer.save(100)
        ckpt = reader.newest_complete()
        assert (ckpt.name, ckpt.step, ckpt.shards) == ("model.ckpt-100", 100, 2)
        assert ckpt.path == f"sftp://{host.address}{tmp_path}/model/model.ckpt-100"
        trainer.save(200, skip_shards=(0,))
        scan = reader.scan()
        assert scan.complete.step == 100
        assert scan.missing == {"model.ckpt-200": ["model.ckpt-200.data-00000-of-00002"]}
    finally:
        reader.fs.client.close()
