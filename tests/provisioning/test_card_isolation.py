"""A tenant's cards are its device files, not an environment variable.

The host scripts run over a loopback sshd with real system accounts, in a host root of their
own whose /dev holds stand-ins for four cards' device nodes (character devices, left 0666 as
the NVIDIA driver leaves them) and the shared control nodes. The accounts log in over that
sshd with their own keys, as a researcher does: each opens its own cards' files and no other
card's, whatever it unsets. Revocation leaves no process and no file of the account, and its
user id goes to no later account.

Needs root (useradd, groupadd, mknod); skipped otherwise.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import signal
import stat
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncssh
import pytest

from provisioning.backends import StepFailed
from provisioning.ssh import SshBackend, run_to_end
from reservations.models import Host
from tests.sshd import Sshd, keygen, start_sshd

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: real system accounts and device nodes"
)

CARDS = 4
SHARED = ("nvidiactl", "nvidia-uvm")
"""Control nodes every CUDA process opens; they reach no card without the card's own file."""


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    yield from start_sshd(tmp_path_factory.mktemp("sshd"), tenants=True)


def fake_node(path: Path) -> None:
    """A character device standing in for a card's node (the null device's numbers: opening
    it is harmless), world-readable and -writable as the driver creates them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    path.chmod(0o666)


@pytest.fixture
def host_root() -> Iterator[Path]:
    """The host's filesystem as the scripts see it: reachable by the accounts (pytest's own
    folders are root's only), with /tmp, /var/tmp, /dev/shm, a shared drop folder and four
    NVIDIA cards' nodes."""
    root = Path(tempfile.mkdtemp(prefix="gpulots-host-", dir="/tmp"))
    try:
        root.chmod(0o755)
        for shared in ("tmp", "var/tmp", "dev/shm", "srv/drop"):
            (root / shared).mkdir(parents=True)
            (root / shared).chmod(0o1777)
        for name in [f"nvidia{card}" for card in range(CARDS)] + list(SHARED):
            fake_node(root / "dev" / name)
        yield root
    finally:
        shutil.rmtree(root)


def living(uid: int) -> list[int]:
    """The processes running as ``uid`` (a zombie is dead already)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["Uid"].split()[1]) == uid and fields["State"].split()[0] not in "ZX":
            found.append(int(entry.name))
    return found


@pytest.fixture
def new_account() -> Iterator[Callable[[], str]]:
    """Names for this test's accounts; whatever of them is left afterwards is removed (its
    processes by their ids, the accounts, their groups and the card groups)."""
    made: list[str] = []
    cards_before = {group.gr_name for group in grp.getgrall()}

    def name() -> str:
        made.append(f"gl-iso-{uuid.uuid4().hex[:8]}")
        return made[-1]

    yield name
    for account in made:
        try:
            uid = pwd.getpwnam(account).pw_uid
        except KeyError:
            continue
        for pid in living(uid):
            os.kill(pid, signal.SIGKILL)
        os.system(f"userdel --force --remove {account} >/dev/null 2>&1")  # noqa: S605
    for group in {group.gr_name for group in grp.getgrall()} - cards_before:
        if group.startswith(("gpulots-card", "gl-iso-")):
            os.system(f"groupdel {group} >/dev/null 2>&1")  # noqa: S605


@pytest.fixture
def host(sshd: Sshd) -> Host:
    return Host(
        name="isolation-host",
        address="127.0.0.1",
        ssh_port=sshd.port,
        ssh_user=sshd.user,
        ssh_host_key=sshd.host_key,
    )


@pytest.fixture
def backend(sshd: Sshd, host_root: Path, tmp_path: Path) -> SshBackend:
    """As on a host: real accounts, the scripts run as root over SSH."""
    return SshBackend(
        client_key=sshd.client_key,
        remote_dir=str(tmp_path / "var-lib-gpulots"),
        remote_root=str(host_root),
        real_accounts=True,
        python=sys.executable,
        benchmark_args=["--quick"],
    )


def provision(backend: SshBackend, host: Host, account: str, cards: str, key: Path) -> None:
    """The job's host steps for one account, its key in at the end (the window's start)."""
    backend.script(host, "prepare_access", account)
    backend.script(host, "prepare_environment", account, "pytorch")
    backend.script(host, "assign_cards", account, cards)
    backend.install_keys(host, account, key.with_suffix(".pub").read_text())


def tenant_key(tmp_path: Path, account: str) -> Path:
    keygen(tmp_path / account, f"researcher-{account}")
    return tmp_path / account


def as_tenant(sshd: Sshd, account: str, key: Path, command: str) -> str:
    """``command`` run by the account in an SSH session of its own; its output."""

    async def run() -> str:
        async with asyncssh.connect(
            "127.0.0.1",
            port=sshd.port,
            username=account,
            client_keys=[str(key)],
            known_hosts=([asyncssh.import_public_key(sshd.host_key)], [], []),
            agent_path=None,
            config=None,
        ) as session:
            done = await session.run(command, timeout=30, check=True)
            return str(done.stdout)

    return run_to_end(run)


def opens(sshd: Sshd, account: str, key: Path, nodes: list[Path]) -> dict[str, bool]:
    """Which of ``nodes`` the account can open for reading and writing (as CUDA opens them),
    with every visible-device variable unset."""
    probe = "unset CUDA_VISIBLE_DEVICES HIP_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES\n" + "".join(
        f'if (exec 3<>"{node}") 2>/dev/null; then echo "{node.name} yes"; '
        f'else echo "{node.name} no"; fi\n'
        for node in nodes
    )
    answer = as_tenant(sshd, account, key, probe)
    return {name: said == "yes" for name, said in (line.split() for line in answer.splitlines())}


def test_an_account_opens_its_own_cards_and_no_other_lots_even_without_the_variables(
    sshd: Sshd,
    host: Host,
    backend: SshBackend,
    host_root: Path,
    new_account: Callable[[], str],
    tmp_path: Path,
) -> None:
    first, second = new_account(), new_account()  # two lots' renters on one host
    provision(backend, host, first, "0,1", first_key := tenant_key(tmp_path, first))
    provision(backend, host, second, "2,3", second_key := tenant_key(tmp_path, second))
    nodes = [host_root / "dev" / f"nvidia{card}" for card in range(CARDS)]
    nodes += [host_root / "dev" / name for name in SHARED]
    # The variables are set as before, and mean nothing to what the account can open.
    environment = as_tenant(sshd, first, first_key, "bash -lc 'echo $CUDA_VISIBLE_DEVICES'")
    assert environment.strip() == "0,1"
    assert opens(sshd, first, first_key, nodes) == {
        "nvidia0": True,
        "nvidia1": True,
        "nvidia2": False,
        "nvidia3": False,
        "nvidiactl": True,
        "nvidia-uvm": True,
    }
    assert opens(sshd, second, second_key, nodes) == {
        "nvidia0": False,
        "nvidia1": False,
        "nvidia2": True,
        "nvidia3": True,
        "nvidiactl": True,
        "nvidia-uvm": True,
    }
    # Its own cards' groups and no other (no video, render or other card's group).
    groups = as_tenant(sshd, first, first_key, "id -nG").split()
    assert sorted(groups) == sorted([first, "gpulots-card0", "gpulots-card1"])
    for card in range(CARDS):
        node = (host_root / "dev" / f"nvidia{card}").stat()
        assert (node.st_uid, grp.getgrgid(node.st_gid).gr_name) == (0, f"gpulots-card{card}")
        assert stat.S_IMODE(node.st_mode) == 0o660
    # Where systemd runs, the account's slice allows its cards' files and the shared nodes.
    uid = pwd.getpwnam(first).pw_uid
    policy = host_root / "etc/systemd/system" / f"user-{uid}.slice.d" / "50-gpulots-cards.conf"
    allowed = [line for line in policy.read_text().splitlines() if line.startswith("Device")]
    assert allowed == [
        "DevicePolicy=closed",
        "DeviceAllow=/dev/nvidiactl rw",
        "DeviceAllow=/dev/nvidia-uvm rw",
        "DeviceAllow=/dev/nvidia0 rw",
        "DeviceAllow=/dev/nvidia1 rw",
    ]
    # Assigning again (a retried step) changes nothing.
    backend.script(host, "assign_cards", first, "0,1")
    assert opens(sshd, first, first_key, nodes[:CARDS]) == {
        "nvidia0": True,
        "nvidia1": True,
        "nvidia2": False,
        "nvidia3": False,
    }


def test_on_an_amd_host_the_cards_files_come_from_the_hosts_map(
    sshd: Sshd,
    host: Host,
    backend: SshBackend,
    host_root: Path,
    new_account: Callable[[], str],
    tmp_path: Path,
) -> None:
    """The BMC's display took /dev/dri/card0, so card N is dri/card<N+1> and renderD<128+N>;
    the operator lists that in /etc/gpulots/cards. The BMC's display is no card: left as is."""
    for card in range(CARDS):
        (host_root / "dev" / f"nvidia{card}").unlink()
        fake_node(host_root / "dev/dri" / f"card{card + 1}")
        fake_node(host_root / "dev/dri" / f"renderD{128 + card}")
    fake_node(host_root / "dev/dri/card0")
    fake_node(host_root / "dev/kfd")
    (host_root / "etc/gpulots").mkdir(parents=True)
    (host_root / "etc/gpulots/cards").write_text(
        "# index  files (PCI bus order)\n"
        + "".join(
            f"{card} /dev/dri/card{card + 1} /dev/dri/renderD{128 + card}\n"
            for card in range(CARDS)
        )
    )
    account = new_account()
    provision(backend, host, account, "2", key := tenant_key(tmp_path, account))
    dri = host_root / "dev/dri"
    seen = opens(sshd, account, key, [*sorted(dri.iterdir()), host_root / "dev/kfd"])
    assert {name for name, opened in seen.items() if opened} == {
        "card0",  # the BMC's display
        "card3",
        "renderD130",
        "kfd",
    }
    with pytest.raises(StepFailed, match="card 9: no device file"):
        backend.script(host, "assign_cards", account, "9")


def test_a_card_without_a_device_file_fails_the_step(
    host: Host, backend: SshBackend, new_account: Callable[[], str]
) -> None:
    account = new_account()
    backend.script(host, "prepare_access", account)
    with pytest.raises(StepFailed, match="card 5: no device file"):
        backend.script(host, "assign_cards", account, "3,5")


def test_a_driver_that_resets_the_device_files_fails_the_step(
    host: Host, backend: SshBackend, host_root: Path, new_account: Callable[[], str]
) -> None:
    """The NVIDIA driver's default re-creates its files 0666 at each CUDA start: the groups
    would not hold, so the host is refused until the operator turns that off."""
    params = host_root / "proc/driver/nvidia/params"
    params.parent.mkdir(parents=True)
    params.write_text("ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\n")
    account = new_account()
    backend.script(host, "prepare_access", account)
    with pytest.raises(StepFailed, match="NVreg_ModifyDeviceFiles=0"):
        backend.script(host, "assign_cards", account, "0,1")
    params.write_text("ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 0\n")
    backend.script(host, "assign_cards", account, "0,1")


def owned_by(uid: int, root: Path) -> list[Path]:
    found = []
    for folder, subfolders, files in os.walk(root):
        for name in subfolders + files:
            if (Path(folder) / name).lstat().st_uid == uid:
                found.append(Path(folder) / name)
    return found


def test_revocation_leaves_no_process_and_no_file_of_the_account(
    sshd: Sshd,
    host: Host,
    backend: SshBackend,
    host_root: Path,
    new_account: Callable[[], str],
    tmp_path: Path,
) -> None:
    account = new_account()
    provision(backend, host, account, "0,1", key := tenant_key(tmp_path, account))
    uid = pwd.getpwnam(account).pw_uid
    root = host_root
    tmp, var_tmp, shm = root / "tmp", root / "var" / "tmp", root / "dev" / "shm"
    left = as_tenant(
        sshd,
        account,
        key,
        "nohup setsid sleep 600 >/dev/null 2>&1 </dev/null &\n"
        "echo $!\n"
        f"mkdir -p {tmp}/run/deep && echo x > {tmp}/run/deep/state\n"
        f"echo y > {var_tmp}/cache && echo z > {shm}/segment\n"
        f"echo w > {root}/srv/drop/results && ln -s /etc/passwd {tmp}/a-link\n",
    )
    sleeper = int(left.split()[0])
    assert sleeper in living(uid)
    assert len(owned_by(uid, tmp)) == 4  # run, deep, state, the link

    backend.script(host, "revoke", account)

    assert living(uid) == []
    assert owned_by(uid, root) == []
    assert Path("/etc/passwd").exists()  # the account's link removed, not followed
    with pytest.raises(KeyError):
        pwd.getpwnam(account)
    assert all(account not in grp.getgrnam(f"gpulots-card{card}").gr_mem for card in (0, 1))
    assert not (root / "etc/systemd/system" / f"user-{uid}.slice.d").exists()
    with pytest.raises(asyncssh.PermissionDenied):
        as_tenant(sshd, account, key, "true")
    backend.script(host, "revoke", account)  # a retry: nothing left to do, fine


def test_a_freed_user_id_goes_to_no_later_account(
    host: Host, backend: SshBackend, host_root: Path, new_account: Callable[[], str]
) -> None:
    first = new_account()
    backend.script(host, "prepare_access", first)
    freed = pwd.getpwnam(first).pw_uid
    backend.script(host, "revoke", first)

    second = new_account()
    backend.script(host, "prepare_access", second)
    issued = pwd.getpwnam(second).pw_uid
    assert issued > freed
    assert pwd.getpwnam(second).pw_gid == issued  # its group's id is never reused either

    # The record lost (the host's disk restored from an old backup): an id that still owns a
    # file is skipped all the same.
    (host_root / "var/lib/gpulots/issued-uids").unlink()
    stray = host_root / "var/tmp" / "left-behind"
    stray.write_text("a file of an account no record knows\n")
    os.chown(stray, issued + 1, issued + 1)
    third = new_account()
    backend.script(host, "prepare_access", third)
    assert pwd.getpwnam(third).pw_uid == issued + 2
