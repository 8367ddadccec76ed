"""Real SSH hosts on this machine for tests and benchmarks: network namespaces on a private
/24, bridged to the root namespace, each running its own sshd (a generated host key per
host, key-only root login). The filesystem is the same everywhere; only the network (and,
when asked, a private tmpfs over one directory, or an /etc/hosts of its own that names every
host of the bed) differs from host to host.

    with netns_hosts(workdir, count=3, private={3: "/some/dir"}, named={1, 2}) as bed:
        bed.hosts[0].address       # "10.A.B.11"
        bed.ssh_section()          # the spec's "ssh" section: client key, known_hosts
        bed.processes(bed.hosts[0])  # what runs in that host (its sshd listener excluded)

Needs root, iproute2 and openssh-server. ``stop`` kills every process in the namespaces and
deletes them and the bridge; namespaces left by a killed run are removed by the next start.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

SSHD = "/usr/sbin/sshd"
NETNS_DIR = Path("/run/netns")
PREFIX = "tfcssh"          # namespaces: tfcssh-<creator pid>-<token>-h<i>
FIRST_HOST = 11            # h1 is .11, h2 .12, ...; the bridge is .1
SSHD_CONFIG = """\
ListenAddress {address}
Port 22
HostKey {hostkey}
PidFile {pidfile}
AuthorizedKeysFile {authorized_keys}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
MaxStartups 200
MaxSessions 64
Subsystem sftp internal-sftp
"""


def missing_prerequisites() -> str | None:
    """Why these hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in (SSHD, shutil.which("ip"), shutil.which("ssh"), shutil.which("ssh-keygen"),
                 shutil.which("unshare")):
        if not tool or not os.path.exists(tool):
            return "needs openssh-server, openssh-client, iproute2 and util-linux"
    return None


def _keygen(path: Path, comment: str) -> None:
    for old in (path, Path(f"{path}.pub")):
        old.unlink(missing_ok=True)
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path))


def _run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done.stdout


@dataclass
class Host:
    name: str              # h1, h2...
    address: str           # 10.A.B.11
    netns: str             # the namespace's name under /run/netns
    veth: str              # the root end of its link to the bridge
    hostkey_pub: str       # "ssh-ed25519 AAAA..."
    private_dir: str | None = None
    sshd: subprocess.Popen | None = None

    def netns_inode(self) -> int:
        return os.stat(NETNS_DIR / self.netns).st_ino


@dataclass
class NetnsHosts:
    workdir: Path
    token: str
    subnet: ipaddress.IPv4Network
    bridge: str
    client_key: Path
    known_hosts: Path
    hosts: list[Host] = field(default_factory=list)

    def ssh_section(self, **overrides) -> dict:
        """The spec's ``ssh`` section for these hosts."""
        section = {"user": "root", "identity_file": str(self.client_key),
                   "known_hosts_file": str(self.known_hosts),
                   "config_file": "/dev/null", "connect_timeout": 5}
        section.update(overrides)
        return section

    def ssh_config(self) -> Path:
        """An ssh_config file for these hosts (what a user's ~/.ssh/config would hold)."""
        path = self.workdir / "ssh_config"
        path.write_text(f"Host *\n  User root\n  IdentityFile {self.client_key}\n"
                        f"  IdentitiesOnly yes\n  UserKnownHostsFile {self.known_hosts}\n"
                        f"  BatchMode yes\n")
        return path

    def sshd_log(self, host: Host) -> str:
        return (self.workdir / f"sshd_{host.name}.log").read_text(errors="replace")

    def processes(self, host: Host) -> list[psutil.Process]:
        """Live processes inside ``host``'s namespace, its sshd listener excluded."""
        inode = host.netns_inode()
        listener = host.sshd.pid if host.sshd else None
        found = []
        for proc in psutil.process_iter(["pid"]):
            if proc.pid == listener:
                continue
            try:
                if os.stat(f"/proc/{proc.pid}/ns/net").st_ino != inode:
                    continue
                if proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except (OSError, psutil.Error):
                continue
        return found

    def leftovers(self, timeout: float = 10.0) -> dict[str, list[str]]:
        """Processes still running in any host after ``timeout`` s: host -> descriptions."""
        deadline = time.monotonic() + timeout
        while True:
            left = {}
            for host in self.hosts:
                procs = self.processes(host)
                if procs:
                    left[host.name] = [_describe(p) for p in procs]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)

    def kill_all(self) -> None:
        """SIGKILL every process in every host except the sshd listeners."""
        for host in self.hosts:
            for proc in self.processes(host):
                with contextlib.suppress(psutil.Error):
                    proc.kill()

    def stop(self) -> None:
        for host in self.hosts:
            if host.sshd is not None and host.sshd.poll() is None:
                host.sshd.kill()
                host.sshd.wait()
            _kill_netns_processes(host.netns)
            subprocess.run(["ip", "netns", "del", host.netns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


def _describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.pid} {' '.join(proc.cmdline())[:120]}"
    except psutil.Error:
        return str(proc.pid)


def _kill_netns_processes(netns: str) -> None:
    try:
        inode = os.stat(NETNS_DIR / netns).st_ino
    except OSError:
        return
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.stat(f"/proc/{proc.pid}/ns/net").st_ino == inode:
                proc.kill()
        except (OSError, psutil.Error):
            continue


def sweep_stale() -> None:
    """Remove namespaces and bridges left by a run whose process is gone (killed pytest)."""
    if not NETNS_DIR.is_dir():
        return
    for entry in NETNS_DIR.iterdir():
        parts = entry.name.split("-")
        if len(parts) != 4 or parts[0] != PREFIX or not parts[1].isdigit():
            continue
        if psutil.pid_exists(int(parts[1])):
            continue
        _kill_netns_processes(entry.name)
        subprocess.run(["ip", "netns", "del", entry.name], capture_output=True)
        subprocess.run(["ip", "link", "del", f"tfcbr{parts[2]}"], capture_output=True)


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.0.0.0/8 that no interface or route of this machine overlaps."""
    used = []
    for kind in ("addr", "route"):
        for item in json.loads(_run("ip", "-j", "-4", kind, "show") or "[]"):
            for text in [item.get("dst")] + [a.get("local", "") + "/" + str(a.get("prefixlen"))
                                              for a in item.get("addr_info", [])]:
                if text and text != "default":
                    with contextlib.suppress(ValueError):
                        used.append(ipaddress.ip_network(text, strict=False))
    rng = secrets.SystemRandom()
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{rng.randrange(100, 250)}.{rng.randrange(1, 255)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free 10.x.y.0/24 subnet")


def start_hosts(workdir: str | os.PathLike, count: int = 3,
                private: dict[int, str] | None = None, timeout: float = 30.0,
                plain_shell: bool = False, sshd_extra: dict[int, str] | None = None,
                named: Iterable[int] = ()) -> NetnsHosts:
    """``count`` hosts h1..hN; ``private`` maps a host number to a directory that gets its own
    empty tmpfs in that host (a host that does not see the shared files there); several
    directories joined by ``os.pathsep``, each ``DIR=SIZE`` for a tmpfs of that size
    (``/x/area=2m``: a host whose disk there fills at 2 MB).
    ``plain_shell``: root's ~/.bashrc is empty in the hosts, as on a fresh server (this
    machine's runs pyenv init, ~0.15 s of CPU for every remote command).
    ``sshd_extra``: lines added to a host's sshd_config (``SetEnv PATH=/nowhere``: a host
    whose commands find no program on the PATH, tar included).
    ``named``: the host numbers whose tasks see an /etc/hosts of their own (bind-mounted in
    the host's mount namespace; the machine's file is untouched): the machine's lines plus
    ``ADDRESS hN`` for every host of the bed, so that a host's own name resolves there (as
    on a usual server; JAX's CPU collectives need it). The others resolve no bed name."""
    if count > 200:
        raise ValueError("at most 200 hosts in one /24")
    sweep_stale()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(2)
    subnet = _free_subnet()
    base = subnet.network_address
    bed = NetnsHosts(workdir, token, subnet, f"tfcbr{token}", workdir / "client_key",
                     workdir / "known_hosts")
    try:
        _keygen(bed.client_key, "tfcluster-test")
        (workdir / "authorized_keys").write_text(Path(f"{bed.client_key}.pub").read_text())
        _run("ip", "link", "add", bed.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{base + 1}/24", "dev", bed.bridge)
        _run("ip", "link", "set", bed.bridge, "up")
        Path("/run/sshd").mkdir(exist_ok=True)   # sshd's privilege separation directory
        etc_hosts = _write_etc_hosts(bed, count) if named else None
        named = set(named)
        for i in range(1, count + 1):
            bed.hosts.append(_add_host(bed, i, (private or {}).get(i), plain_shell,
                                       (sshd_extra or {}).get(i, ""),
                                       etc_hosts if i in named else None))
        known = [f"{h.address} {h.hostkey_pub}" for h in bed.hosts]
        bed.known_hosts.write_text("\n".join(known) + "\n")
        deadline = time.monotonic() + timeout
        for host in bed.hosts:
            _wait_sshd(host, workdir, deadline)
    except BaseException:
        bed.stop()
        raise
    return bed


def _address(bed: NetnsHosts, i: int) -> str:
    return str(bed.subnet.network_address + FIRST_HOST + i - 1)


def _write_etc_hosts(bed: NetnsHosts, count: int) -> Path:
    """The machine's /etc/hosts plus a line for every host of the bed."""
    path = bed.workdir / "etc_hosts"
    machine = Path("/etc/hosts").read_text() if Path("/etc/hosts").exists() else ""
    path.write_text(machine.rstrip("\n") + "\n# tfcluster test hosts\n" + "".join(
        f"{_address(bed, i)} h{i}\n" for i in range(1, count + 1)))
    return path


def _add_host(bed: NetnsHosts, i: int, private_dir: str | None, plain_shell: bool,
              extra: str = "", etc_hosts: Path | None = None) -> Host:
    name = f"h{i}"
    netns = f"{PREFIX}-{os.getpid()}-{bed.token}-{name}"
    veth = f"tfv{bed.token}{name}"
    address = _address(bed, i)
    _run("ip", "netns", "add", netns)
    _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
    _run("ip", "link", "set", veth, "master", bed.bridge, "up")
    _run("ip", "-n", netns, "addr", "add", f"{address}/24", "dev", "eth0")
    _run("ip", "-n", netns, "link", "set", "eth0", "up")
    _run("ip", "-n", netns, "link", "set", "lo", "up")
    hostkey = bed.workdir / f"hostkey_{name}"
    _keygen(hostkey, name)
    config = bed.workdir / f"sshd_{name}.config"
    config.write_text(SSHD_CONFIG.format(
        address=address, hostkey=hostkey, pidfile=bed.workdir / f"sshd_{name}.pid",
        authorized_keys=bed.workdir / "authorized_keys") + (extra and extra + "\n"))
    host = Host(name, address, netns, veth,
                " ".join(Path(f"{hostkey}.pub").read_text().split()[:2]), private_dir)
    # A UTS namespace for the host name; with a private dir, a mount namespace with an
    # empty tmpfs over it: the host's tasks (children of this sshd) see that, not the files.
    script = 'hostname "$1"; '
    unshare = ["unshare", "--uts"]
    bashrc = Path(os.path.expanduser("~root")) / ".bashrc"
    if private_dir or plain_shell or etc_hosts:
        unshare.append("--mount")
    for folder in private_dir.split(os.pathsep) if private_dir else ():
        where, _, size = folder.partition("=")
        options = f"-o size={shlex.quote(size)} " if size else ""
        script += f"mount -t tmpfs {options}tfcluster-private {shlex.quote(where)} || exit 1; "
    if plain_shell and bashrc.exists():
        (bed.workdir / "empty_bashrc").write_text("")
        script += 'mount --bind "$5" "$6" || exit 1; '
    if etc_hosts:
        script += 'mount --bind "$7" /etc/hosts || exit 1; '
    script += f'exec {SSHD} -D -f "$3" -E "$4"'
    argv = ["ip", "netns", "exec", netns, *unshare, "sh", "-c", script, "sh", name,
            private_dir or "", str(config), str(bed.workdir / f"sshd_{name}.log"),
            str(bed.workdir / "empty_bashrc"), str(bashrc), str(etc_hosts or "")]
    host.sshd = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
    return host


def _wait_sshd(host: Host, workdir: Path, deadline: float) -> None:
    while time.monotonic() < deadline:
        if host.sshd.poll() is not None:
            break
        with contextlib.suppress(OSError), socket.create_connection((host.address, 22), 1):
            return
        time.sleep(0.02)
    log = workdir / f"sshd_{host.name}.log"
    tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
    raise RuntimeError(f"sshd in {host.name} ({host.address}) did not come up:\n{tail}")


@contextlib.contextmanager
def netns_hosts(workdir: str | os.PathLike, count: int = 3,
                private: dict[int, str] | None = None,
                plain_shell: bool = False, named: Iterable[int] = ()
                ) -> Iterator[NetnsHosts]:
    bed = start_hosts(workdir, count, private, plain_shell=plain_shell, named=named)
    try:
        yield bed
    finally:
        bed.stop()
