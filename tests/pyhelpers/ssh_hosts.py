"""Test hosts reachable over ssh: network-namespace hosts (netns_hosts), each
running its own sshd on port 22 of its address, with a key made for the test.

    with ssh_hosts.SshHosts(3, tmp_path) as hosts:
        hosts.ssh_flag()            # --ssh value: the key, no known_hosts
        hosts.hosts_flag()          # "10.77.0.1,10.77.0.2,10.77.0.3"
        p = hosts.start_launcher([dtrun, "--hosts=...", ...], env, cwd)

The launcher runs on host 1 (as one launches from the first node of a
cluster); every host, host 1 included, is reached through its sshd. Port
22 is fixed, which is fine: each namespace has its own network stack.
sshd is ready when it says "Server listening" on its stderr (read, not
waited for with sleeps). Needs root, iproute2 and openssh-server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import netns_hosts

SSHD = "/usr/sbin/sshd"


def unavailable_reason() -> str | None:
    """Why sshd test hosts cannot be made here, or None when they can."""
    reason = netns_hosts.unavailable_reason()
    if reason:
        return reason
    if not os.access(SSHD, os.X_OK) or shutil.which("ssh") is None:
        return "openssh-server / openssh-client are missing (scripts/setup-deps installs them)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen is missing"
    return None


CONFIG = """\
ListenAddress {addr}:22
HostKey {dir}/host_key
PidFile {dir}/sshd{index}.pid
AuthorizedKeysFile {dir}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
LogLevel INFO
SetEnv HOME={dir}/home
"""


class SshHosts:
    def __init__(self, count: int, directory: Path, sshd_on: list[int] | None = None):
        """`count` hosts; sshd runs on the hosts in `sshd_on` (default all)."""
        self.count = count
        self.dir = directory / "ssh"
        self.sshd_on = sshd_on or list(range(1, count + 1))
        self.netns = netns_hosts.Hosts(count)
        self.sshd: list[subprocess.Popen] = []
        self.sshd_logs: dict[int, list[str]] = {}

    def __enter__(self) -> "SshHosts":
        self.dir.mkdir(mode=0o700)
        self.netns.__enter__()
        try:
            # sshd refuses to start without its privilege-separation folder.
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
            for name in ("id", "host_key"):
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                                str(self.dir / name)], check=True, capture_output=True)
            shutil.copy(self.dir / "id.pub", self.dir / "authorized_keys")
            # The sessions' HOME (SetEnv above): an empty folder, so the
            # remote shell reads no rc file of this machine's root. bash
            # sources ~/.bashrc for an ssh command, and one that runs
            # `pyenv init` waited 60 s for a lock a killed session had
            # left behind, which made every login of the suite time out.
            (self.dir / "home").mkdir()
            for i in self.sshd_on:
                self._start_sshd(i)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start_sshd(self, index: int) -> None:
        config = self.dir / f"sshd{index}.conf"
        config.write_text(CONFIG.format(addr=self.addr(index), dir=self.dir, index=index))
        # -D: stays in the foreground (its pid is ours); -e: log to stderr,
        # where "Server listening" says it is ready.
        p = subprocess.Popen(self.netns.command(index, [SSHD, "-D", "-e", "-f", str(config)]),
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.sshd.append(p)
        log = self.sshd_logs.setdefault(index, [])
        timer = threading.Timer(30, p.kill)  # a deadline, not a synchronisation
        timer.start()
        try:
            for line in iter(p.stderr.readline, ""):
                log.append(line)
                if "Server listening on" in line:
                    break
            else:
                raise AssertionError(f"sshd on host {index} did not start: {''.join(log)}")
        finally:
            timer.cancel()
        # Keep reading, so sshd never blocks on a full stderr pipe.
        threading.Thread(target=lambda: log.extend(iter(p.stderr.readline, "")),
                         daemon=True).start()

    def __exit__(self, *exc) -> None:
        for p in self.sshd:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.netns.__exit__(*exc)

    @staticmethod
    def addr(index: int) -> str:
        return netns_hosts.Hosts.addr(index)

    def ssh_flag(self) -> str:
        return (f"ssh -i {self.dir}/id -o StrictHostKeyChecking=no "
                f"-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR")

    def hosts_flag(self, slots: dict[int, int] | None = None) -> str:
        slots = slots or {}
        return ",".join(self.addr(i) + (f":{slots[i]}" if i in slots else "")
                        for i in range(1, self.count + 1))

    def start_launcher(self, argv: list[str], env: dict[str, str], cwd: Path,
                       preexec_fn=None) -> subprocess.Popen:
        """Starts argv on host 1 in a session of its own (signals the test
        sends reach only it), stdout and stderr piped."""
        return subprocess.Popen(self.netns.command(1, argv), env=env, cwd=cwd,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True,
                                preexec_fn=preexec_fn)
