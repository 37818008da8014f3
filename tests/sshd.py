"""A real OpenSSH server on loopback for the SSH backend's tests: its own host key, its own
authorized key for the provisioning client, nothing of this machine's SSH setup touched."""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SSHD = Path("/usr/sbin/sshd")


@dataclass(frozen=True)
class Sshd:
    port: int
    user: str
    host_key: str
    """The server's public host key line (what the inventory pins)."""
    client_key: str
    """The provisioning client's private key (what PROVISIONING_SSH_KEY holds)."""
    folder: Path

    def log(self) -> str:
        return (self.folder / "sshd.log").read_text(errors="replace")


def keygen(path: Path, comment: str) -> str:
    """A new ed25519 key pair at ``path``; returns the public key line."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
    )
    return path.with_suffix(".pub").read_text().strip()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_sshd(folder: Path, timeout: float = 20, *, tenants: bool = False) -> Iterator[Sshd]:
    """The server, until the generator is closed. ``tenants``: the order accounts (gl-*)
    log in too, with the keys in their homes, as on a host."""
    if not SSHD.exists():
        raise RuntimeError(f"{SSHD} is missing: `apt-get install openssh-server` (make test does)")
    folder.mkdir(parents=True, exist_ok=True)
    host_key = keygen(folder / "host_ed25519", "test-host")
    client_public = keygen(folder / "client_ed25519", "gpulots-provisioning")
    (folder / "authorized_keys").write_text(client_public + "\n")
    port = _free_port()
    config = folder / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {folder / 'host_ed25519'}",
                f"AuthorizedKeysFile {folder / 'authorized_keys'}",
                f"PidFile {folder / 'sshd.pid'}",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "PermitRootLogin prohibit-password",
                "LogLevel VERBOSE",
                "MaxStartups 200",  # many hosts read at once (the health benchmark)
                *(["Match User gl-*", "    AuthorizedKeysFile %h/.ssh/authorized_keys"] * tenants),
                "",
            ]
        )
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation
    log = (folder / "sshd.log").open("w")
    process = subprocess.Popen(
        [str(SSHD), "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT
    )
    server = Sshd(
        port=port,
        user=getpass.getuser(),
        host_key=host_key,
        client_key=(folder / "client_ed25519").read_text(),
        folder=folder,
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"sshd exited: {server.log()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd did not listen: {server.log()}") from None
                time.sleep(0.1)
        yield server
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()
