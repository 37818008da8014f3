"""The SSH backend: the shipped host scripts and the benchmark, run on the inventory's hosts.

Each host's key is pinned in the inventory (``Host.ssh_host_key``); the connection trusts
that key and nothing else: no known_hosts file, no agent, no ~/.ssh/config, no "accept
new". A host with no pinned key, or presenting another one, is refused with the key it
presented, which the operator checks out of band before pinning it.

The scripts travel on standard input (``bash -s``); files (the researcher's keys, the
benchmark and the split-test command, each one file built by provisioning/validation/build.py)
are written by ``cat`` from standard input too, as bytes, so nothing but a POSIX shell, bash
and the environment's Python is needed on a host. With real accounts on and a
provisioning user other than root, the scripts run under ``sudo -n`` (the user needs
password-less sudo for them).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import shlex
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncssh
from django.conf import settings
from django.core.checks import Error, register

from provisioning.backends import (
    BENCHMARK_TIMEOUT,
    HEALTH_TIMEOUT,
    HIDDEN,
    HOST_SCRIPTS,
    PROBE,
    SCRIPT_TIMEOUT,
    HostKeyRefused,
    HostUnreachable,
    StepFailed,
    crash_report,
    health_reading,
    is_report,
    script_timeout,
    still_running,
    visible_devices,
)
from provisioning.validation import build
from reservations.models import Host

T = TypeVar("T")
Session = asyncssh.SSHClientConnection


def run_to_end(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to its end from synchronous code: here, or in a thread of its own when
    this thread already runs an event loop (an async caller, a test's browser driver)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(make))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, _awaited(make)).result()


async def _awaited(make: Callable[[], Awaitable[T]]) -> T:
    return await make()


def fingerprint(key_line: str) -> str:
    """SHA256 fingerprint of an OpenSSH public key line, as ``ssh-keygen -l`` prints it."""
    try:
        return str(asyncssh.import_public_key(key_line.strip()).get_fingerprint("sha256"))
    except (asyncssh.KeyImportError, ValueError):
        return "unreadable key"


@register()
def check_ssh_key(app_configs: object, **kwargs: object) -> list[Error]:
    """With the SSH backend, ``manage.py check`` (and every start) needs a usable key."""
    if settings.PROVISIONING_BACKEND != "ssh":
        return []
    try:
        SshBackend()
    except StepFailed as exc:
        return [Error(str(exc), id="provisioning.E001")]
    return []


class SshBackend:
    def __init__(
        self,
        *,
        client_key: str | None = None,
        remote_dir: str | None = None,
        remote_root: str | None = None,
        real_accounts: bool | None = None,
        python: str | None = None,
        benchmark_args: list[str] | None = None,
        connect_timeout: int | None = None,
    ) -> None:
        key = client_key if client_key is not None else settings.PROVISIONING_SSH_KEY
        if not key.strip():
            raise StepFailed("no SSH key for the hosts: set PROVISIONING_SSH_KEY(_FILE)")
        try:
            self.client_key = asyncssh.import_private_key(key)
        except (asyncssh.KeyImportError, ValueError) as exc:
            raise StepFailed(f"PROVISIONING_SSH_KEY is not a usable private key: {exc}") from None
        self.remote_dir = (remote_dir or settings.PROVISIONING_REMOTE_DIR).rstrip("/")
        self.remote_root = remote_root or settings.PROVISIONING_REMOTE_ROOT
        self.real_accounts = (
            settings.PROVISIONING_REMOTE_ACCOUNTS if real_accounts is None else real_accounts
        )
        self.python = python or settings.PROVISIONING_REMOTE_PYTHON
        self.benchmark_args = (
            settings.PROVISIONING_BENCHMARK_ARGS if benchmark_args is None else benchmark_args
        )
        self.connect_timeout = connect_timeout or settings.PROVISIONING_SSH_CONNECT_TIMEOUT

    # ----------------------------------------------------------------- the four calls

    def script(self, host: Host, name: str, *args: str) -> None:
        self._with_session(host, lambda session: self._script(session, host, name, *args))

    def install_keys(self, host: Host, account: str, keys: str) -> None:
        async def steps(session: Session) -> None:
            incoming = f"{self.remote_dir}/incoming/{uuid.uuid4().hex}.pub"
            await self._run(
                session,
                host,
                "upload keys",
                f"umask 077 && mkdir -p {shlex.quote(self.remote_dir)}/incoming "
                f"&& cat > {shlex.quote(incoming)}",
                stdin=keys,
            )
            try:
                await self._script(session, host, "install_keys", account, incoming)
            finally:
                with contextlib.suppress(OSError, asyncssh.Error):  # keep the first error
                    await session.run(f"rm -f {shlex.quote(incoming)}", timeout=SCRIPT_TIMEOUT)

        self._with_session(host, steps)

    def install_tool(self, host: Host, account: str, order: str) -> None:
        async def steps(session: Session) -> None:
            incoming = f"{self.remote_dir}/incoming/{uuid.uuid4().hex}"
            uploads = (
                (f"{incoming}.py", build.tool().read_bytes()),  # a zipapp: bytes, not text
                (f"{incoming}.json", order.encode()),
            )
            try:
                for path, data in uploads:
                    await self._run(
                        session,
                        host,
                        "upload the split-test tool",
                        f"umask 022 && mkdir -p {shlex.quote(self.remote_dir)}/incoming "
                        f"&& cat > {shlex.quote(path)}",
                        stdin=data,
                    )
                await self._script(session, host, "install_tool", account, *(p for p, _ in uploads))
            finally:
                with contextlib.suppress(OSError, asyncssh.Error):  # keep the first error
                    await session.run(
                        f"rm -f {shlex.join([p for p, _ in uploads])}", timeout=SCRIPT_TIMEOUT
                    )

        self._with_session(host, steps)

    def run_validation(
        self, host: Host, report_name: str, arguments: list[str], *, cards: str
    ) -> str:
        pinned = [f"{name}={value}" for name, value in visible_devices(cards).items()]
        report = f"{self.remote_dir}/reports/{report_name}.json"
        program = f"{self.remote_dir}/bin/benchmark.pyz"
        shipped = build.benchmark().read_bytes()  # the one file, built here: a zip, bytes

        async def steps(session: Session) -> str:
            found = await session.run(f"test -s {shlex.quote(report)}", timeout=SCRIPT_TIMEOUT)
            if found.exit_status == 0:  # a retry after the run finished: keep that report
                return report
            await self._run(
                session,
                host,
                "upload the benchmark",
                f"mkdir -p {shlex.quote(self.remote_dir)}/bin {shlex.quote(self.remote_dir)}"
                f"/reports && cat > {shlex.quote(program)}",
                stdin=shipped,
            )
            # The host ends it at the timeout, so a dropped session leaves no benchmark behind
            # to compete with the retry's for the cards. It sees the lot's cards, no others.
            command = [
                "env",
                "-u",
                HIDDEN,
                *pinned,
                "timeout",
                "-k",
                "30",
                str(BENCHMARK_TIMEOUT),
                *shlex.split(self.python),
                program,
                "--out",
                report,
                *self.benchmark_args,
                *arguments,
                "--cards",
                cards,
            ]
            done = await session.run(shlex.join(command), timeout=BENCHMARK_TIMEOUT + 60)
            if done.exit_status != 0:  # kept if it wrote its report (a device mismatch)
                written = await session.run(f"cat {shlex.quote(report)}", timeout=SCRIPT_TIMEOUT)
                if written.exit_status == 0 and is_report(str(written.stdout or "")):
                    return report
                await self._run(
                    session,
                    host,
                    "store the crash report",
                    f"cat > {shlex.quote(report)}",
                    stdin=json.dumps(crash_report(str(done.stderr or ""))),
                )
            return report

        return self._with_session(host, steps)

    def fetch_report(self, host: Host, path: str) -> dict[str, Any]:
        async def steps(session: Session) -> str:
            return await self._run(session, host, "fetch the report", f"cat {shlex.quote(path)}")

        text = self._with_session(host, steps)
        try:
            report: dict[str, Any] = json.loads(text)
        except ValueError:
            raise StepFailed(f"fetch the report: {path} on {host.name} is not JSON") from None
        return report

    def stop_validation(self, host: Host, report_name: str) -> None:
        pattern = shlex.quote(still_running(f"{self.remote_dir}/reports/{report_name}.json"))
        # `timeout` leads the benchmark's process group (its workers included): end the group.
        command = (
            f"for pid in $(pgrep -f -- {pattern}); do "
            'kill -KILL -- "-$(ps -o pgid= -p "$pid" | tr -d " ")" 2>/dev/null; done; true'
        )

        async def steps(session: Session) -> str:
            return await self._run(session, host, "stop the benchmark", command)

        self._with_session(host, steps)

    def read_health(self, host: Host, cards: str, since: float, until: float) -> dict[str, Any]:
        visible_devices(cards)  # checked: it goes on a command line
        arguments = shlex.join([self.remote_root, cards, f"{since:.3f}", f"{until:.3f}"])
        command = f"{shlex.join(shlex.split(self.python))} - {arguments}"
        if self.real_accounts and host.ssh_user != "root":
            command = f"sudo -n {command}"  # the kernel log is root's (or adm's) to read

        async def steps(session: Session) -> str:
            return await self._run(
                session, host, "health", command, stdin=PROBE.read_text(), timeout=HEALTH_TIMEOUT
            )

        return health_reading(self._with_session(host, steps), host)

    # ----------------------------------------------------------------- the session

    def _with_session(self, host: Host, steps: Callable[[Session], Awaitable[T]]) -> T:
        async def run() -> T:
            session = await self._connect(host)
            try:
                return await steps(session)
            except (OSError, asyncssh.Error) as exc:
                if isinstance(exc, asyncssh.TimeoutError):
                    raise StepFailed(f"{host.name}: a command ran past its time limit") from None
                if isinstance(exc, asyncssh.ProcessError):
                    raise StepFailed(f"{host.name}: {type(exc).__name__}: {exc}") from None
                raise HostUnreachable(f"{host.name}: the session broke: {exc}") from None
            finally:
                session.close()
                await session.wait_closed()

        return run_to_end(run)

    async def _connect(self, host: Host) -> Session:
        where = f"{host.name} ({host.address}:{host.ssh_port})"
        if not host.ssh_host_key.strip():
            presented = await self._presented_key(host, None)
            raise HostKeyRefused(
                f"{where}: no host key is pinned; the host presents "
                f"{fingerprint(presented) if presented else 'no key we could read'}. "
                "Check it on the host, then pin it.",
                presented,
            )
        try:
            pinned = asyncssh.import_public_key(host.ssh_host_key.strip())
        except (asyncssh.KeyImportError, ValueError):
            raise HostKeyRefused(f"{where}: the pinned host key is unreadable") from None
        try:
            return await asyncssh.connect(
                host.address,
                port=host.ssh_port,
                username=host.ssh_user,
                known_hosts=([pinned], [], []),
                client_keys=[self.client_key],
                agent_path=None,
                config=None,
                x509_trusted_certs=None,
                x509_trusted_cert_paths=None,
                connect_timeout=self.connect_timeout,
                login_timeout=self.connect_timeout,
            )
        except asyncssh.HostKeyNotVerifiable:
            algorithms = [algorithm.decode() for algorithm in pinned.sig_algorithms]
            presented = await self._presented_key(host, algorithms)
            raise HostKeyRefused(
                f"{where}: the host presented "
                f"{fingerprint(presented) if presented else 'another key'}, not the pinned "
                f"{pinned.get_fingerprint('sha256')}; refused. If the host was reinstalled, "
                "check the new key on it and pin it.",
                presented,
            ) from None
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            raise HostUnreachable(f"{where}: {type(exc).__name__}: {exc}") from None

    async def _presented_key(self, host: Host, algorithms: list[str] | None) -> str:
        """The key the host offers (of the pinned key's type), for the operator to check."""
        try:
            key = await asyncio.wait_for(
                asyncssh.get_server_host_key(
                    host.address,
                    host.ssh_port,
                    server_host_key_algs=algorithms or (),
                    config=None,
                ),
                self.connect_timeout,
            )
        except (OSError, asyncssh.Error, TimeoutError):
            return ""
        return "" if key is None else key.export_public_key().decode().strip()

    async def _script(self, session: Session, host: Host, name: str, *args: str) -> None:
        script = (HOST_SCRIPTS / f"{name}.sh").read_text()
        environment = f"GPULOTS_REAL_ACCOUNTS={1 if self.real_accounts else 0}"
        command = f"env {environment} bash -s -- {shlex.join([self.remote_root, *args])}"
        if self.real_accounts and host.ssh_user != "root":
            command = f"sudo -n {command}"
        await self._run(session, host, name, command, stdin=script, timeout=script_timeout(name))

    async def _run(
        self,
        session: Session,
        host: Host,
        step: str,
        command: str,
        *,
        stdin: str | bytes | None = None,
        timeout: int = SCRIPT_TIMEOUT,
    ) -> str:
        """``command`` on the host, ``stdin`` its input: text, or bytes written as they are
        (the shipped files are zips); its output as text, StepFailed if it exits non-zero."""
        if stdin is not None and len(stdin) == 0:
            # asyncssh sends no end-of-file after an empty input: say it plainly
            done = await session.run(command, stdin=asyncssh.DEVNULL, timeout=timeout)
        elif isinstance(stdin, bytes):
            done = await session.run(command, input=stdin, encoding=None, timeout=timeout)
        else:
            done = await session.run(command, input=stdin, timeout=timeout)
        if done.exit_status != 0:
            error = _text(done.stderr).strip()[-500:]
            raise StepFailed(f"{step} on {host.name}: exit {done.exit_status}: {error}")
        return _text(done.stdout)


def _text(output: object) -> str:
    """A command's output as text, whether the session read it as text or as bytes."""
    if isinstance(output, bytes):
        return output.decode("utf-8", "replace")
    return str(output or "")
