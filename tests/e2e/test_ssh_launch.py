"""dtrun --hosts: one command starts the job on several hosts over ssh
(docs/ssh.md). The hosts are network namespaces, each with its own sshd on
port 22 of its own address (tests/pyhelpers/ssh_hosts.py); dtrun runs on
host 1 and reaches every host, itself included, through ssh.

Real gloo DDP across three hosts; every line prefixed with host and rank;
Ctrl-C stops every host; SIGKILL of the launching dtrun leaves nothing on
any host (the remote agents see their stdin close); an unreachable host is
one clear error and stops the others; a failing worker on one host gives
one summary naming host and rank, and its exit code."""

import contextlib
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
from failure_summary import field, summary  # noqa: E402
import ssh_hosts  # noqa: E402

REASON = ssh_hosts.unavailable_reason()
if REASON:
    print(f"skipping the ssh launch tests: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

FAST_RDZV = "join_timeout=60,last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3"
# The bound we promise (docs/ssh.md) for the clean-up after the launching
# dtrun is SIGKILLed, workers that die on SIGTERM: measured well under 1 s.
CLEANUP_BOUND_S = 5.0


def job_env():
    # GLOO_* is exported by default; the mark (so /proc can be searched for
    # leftovers on every host) and FAIL_HOST are exported with --export.
    return dh.job_env(GLOO_SOCKET_IFNAME="eth0")


def args(hosts, *flags):
    """dtrun on every host of `hosts` (unless flags give --hosts), with the
    test's key and fast rendezvous timeouts."""
    given = any(f.startswith("--hosts") for f in flags)
    return [str(dh.DTRUN), *([] if given else [f"--hosts={hosts.hosts_flag()}"]),
            f"--ssh={hosts.ssh_flag()}", "--export=DTRUN_TEST_MARK,FAIL_HOST",
            f"--rdzv-conf={FAST_RDZV}", *flags]


@contextlib.contextmanager
def reaped(p, env):
    """Whatever the body does or raises: the launcher, then every process of
    the job on every host (marked with DTRUN_TEST_MARK), are killed on the
    way out, so one failing test leaves nothing to the next."""
    try:
        yield p
    finally:
        p.kill()  # no-op once it has been waited for
        dh.kill_marked(env["DTRUN_TEST_MARK"])


def run_to_end(p, env, timeout):
    """The launcher's exit code and output, then what of the job is left."""
    code, out, err = communicate(p, timeout=timeout)
    return code, out, err, dh.gone_within(env["DTRUN_TEST_MARK"])


def communicate(proc, timeout=240):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # What every process was doing (all hosts share this machine's
        # process table), then what the launcher said: a hang explains itself.
        tree = subprocess.run(["ps", "-eo", "pid,ppid,pgid,stat,wchan:20,etimes,args", "--forest"],
                              capture_output=True, text=True).stdout
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"dtrun did not exit within {timeout} s\nprocesses:\n{tree}\n"
                             f"stdout:\n{out}\nstderr:\n{err}")
    return proc.returncode, out, err


def test_dry_run_prints_each_hosts_ssh_command_line(tmp_path):
    r = dh.run(["--hosts=n1:2,n2", "--ssh=ssh -p 2222", "--dry-run", "--nproc-per-node=3",
                "train.py", "it's $HOME"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2, r.stdout
    remote = []
    for host, line in zip(("n1", "n2"), lines):
        argv = shlex.split(line)  # what a user pastes is what would run
        assert argv[:9] == ["ssh", "-p", "2222", "-o", "BatchMode=yes", "-o",
                            "ConnectTimeout=30", "--", host], line
        assert len(argv) == 10, line
        remote.append(shlex.split(argv[9]))  # what the remote shell runs
    for words in remote:
        assert words[:5] == ["cd", "--", str(tmp_path), "&&", "exec"], words
        # The default exports (OMP_NUM_THREADS, from job_env) before dtrun.
        assert words[5:7] == ["env", "--"] and "OMP_NUM_THREADS=1" in words, words
        dtrun_at = words.index(str(dh.DTRUN))
        assert all("=" in w for w in words[7:dtrun_at]), words
        assert words[-3:] == ["--", "train.py", "it's $HOME"], words
        assert "--dry-run" not in words and not any(w.startswith("--hosts") for w in words)
        assert "--nnodes=2" in words and "--stop-on-stdin-eof" in words
    assert "--nproc-per-node=2" in remote[0] and "--rdzv-port-via-stdio=report" in remote[0]
    assert "--nproc-per-node=2" not in remote[1] and "--rdzv-port-via-stdio=read" in remote[1]
    assert "--rdzv-endpoint=n1:0" in remote[1]


@pytest.mark.parametrize("flags, error", [
    (["--hosts="], "dtrun: error: --hosts: the list is empty; give host[:slots],host[:slots],...\n"),
    (["--hosts=a:0"], "dtrun: error: --hosts 'a:0': slots: '0' is not a whole number from 1 to "
                      "4096\n"),
    (["--hostfile=/nonexistent/hf"], "dtrun: error: --hostfile: cannot read '/nonexistent/hf': "
                                     "No such file or directory\n"),
    (["--hosts=a,b", "--nnodes=3"], "dtrun: error: --nnodes=3 does not match the 2 host(s) "
                                    "listed; drop --nnodes (one node per host)\n"),
    (["--hosts=a", "--ssh='ssh"], "dtrun: error: --ssh: unterminated ' quote in ''ssh'\n"),
])
def test_bad_host_flags_are_one_line_and_exit_2(flags, error):
    r = dh.run([*flags, "--dry-run", "train.py"])
    assert (r.returncode, r.stderr) == (2, error)


def test_hostfile_with_comments_ranges_and_slots(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("# two racks\nnode[1-2] slots=2  # the first\n\nnode3\n")
    r = dh.run([f"--hostfile={hostfile}", "--dry-run", "t.py"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    argvs = [shlex.split(line) for line in lines]
    assert [argv[6] for argv in argvs] == ["node1", "node2", "node3"], lines
    assert ["--nproc-per-node=2" in shlex.split(argv[7]) for argv in argvs] == [True, True, False]


def test_ddp_trains_on_three_hosts_from_one_command(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with ssh_hosts.SshHosts(3, tmp_path) as hosts:
        # Slots: host 1 runs 2 workers, the others --nproc-per-node=1.
        cmd = args(hosts, f"--hosts={hosts.hosts_flag({1: 2})}", "--nproc-per-node=1",
                   "--python", dh.PYTHON, str(dh.EXAMPLES / "ddp_gloo.py"),
                   "--checkpoint-dir", str(out), "--epochs", "2")
        p = hosts.start_launcher(cmd, job_env(), tmp_path)
        code, stdout, stderr = communicate(p)
    assert code == 0, stderr
    world = 4
    import json
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]
    assert sorted(r["rank"] for r in results) == list(range(world))
    for r in results:
        assert r["world_size"] == world
        assert r["allreduce_sum"] == world * (world + 1) / 2
    assert len({r["param_checksum"] for r in results}) == 1
    # Rank 0's report, prefixed with its host and rank; the agents' own
    # lines with their host.
    assert re.search(r"^10\.77\.0\.\d: \[rank0\]:rank 0 of 4: epochs 0\.\.1 done", stdout, re.M), \
        stdout
    for i in (1, 2, 3):
        assert re.search(rf"^10\.77\.0\.{i}: dtrun: round 0: node \d of 3", stderr, re.M), stderr


HELLO = """
import os, sys
host = os.uname().nodename
print(f"out from {host} rank {os.environ['RANK']}", flush=True)
print(f"err from {host} rank {os.environ['RANK']}", file=sys.stderr, flush=True)
"""


def test_every_line_names_its_host_and_rank(tmp_path):
    script = tmp_path / "hello.py"
    script.write_text(HELLO)
    logs = tmp_path / "logs"
    with ssh_hosts.SshHosts(3, tmp_path) as hosts:
        # --tee and --log-dir as usual: the remote agents write the files
        # (here the file system is shared, as with NFS).
        p = hosts.start_launcher(args(hosts, "--nproc-per-node=2", "--tee=3", f"--log-dir={logs}",
                                      "--python", dh.PYTHON, str(script)), job_env(), tmp_path)
        code, stdout, stderr = communicate(p)
    assert code == 0, stderr
    files = sorted(logs.glob("*/attempt_0/*/stdout.log"))
    assert len(files) == 6, files
    assert sorted(f.read_text().split(" rank ")[1] for f in files) == [f"{r}\n" for r in range(6)]
    for stream, text in (("out", stdout), ("err", stderr)):
        found = re.findall(rf"^10\.77\.0\.(\d): \[rank(\d)\]:{stream} from h(\d) rank (\d)$",
                           text, re.M)
        assert len(found) == 6, text
        for addr, prefix_rank, host, rank in found:
            assert addr == host and prefix_rank == rank, text
        assert sorted(int(r) for _, r, _, _ in found) == list(range(6)), text


# Each worker: holds the write end of the `alive` FIFO (as does a child it
# forks, which stays in its process group), says "ready" on the events
# FIFO, and reports the signal that stops it there.
WAITER = """
import os, signal, sys
alive = os.open(sys.argv[2], os.O_WRONLY)
if os.fork() == 0:
    signal.pause()
    os._exit(0)
def stop(sig, _):
    with open(sys.argv[1], "w") as f:
        f.write(f"{os.uname().nodename} rank {os.environ['RANK']} got {signal.Signals(sig).name}\\n")
    sys.exit(0)
signal.signal(signal.SIGINT, stop)
with open(sys.argv[1], "w") as f:
    f.write(f"ready {os.environ['RANK']}\\n")
signal.pause()
"""


def start_waiters(hosts, tmp_path, env, count_hosts):
    script = tmp_path / "waiter.py"
    script.write_text(WAITER)
    events = dh.Fifo(tmp_path, "events")
    alive = tmp_path / "alive"
    os.mkfifo(alive)
    # Opened before any writer (non-blocking), kept open to the end.
    alive_fd = os.open(alive, os.O_RDONLY | os.O_NONBLOCK)
    p = hosts.start_launcher(args(hosts, "--nproc-per-node=2", "--stop-timeout=5", "--python",
                                  dh.PYTHON, str(script), str(events.path), str(alive)),
                             env, tmp_path, preexec_fn=dh.default_signals)
    ready = events.lines(2 * count_hosts, timeout=60)
    assert sorted(ready) == sorted(f"ready {r}" for r in range(2 * count_hosts)), ready
    return p, events, alive_fd


def wait_for_eof(fd, timeout):
    """Seconds until every writer of the FIFO is gone (read() returns EOF)."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(left, 0))
        if not ready:
            raise AssertionError(f"a worker or its child still holds the FIFO after {timeout} s")
        if os.read(fd, 4096) == b"":
            return time.monotonic() - start


def test_ctrl_c_stops_every_host(tmp_path):
    env = job_env()
    with ssh_hosts.SshHosts(2, tmp_path) as hosts:
        p, events, alive_fd = start_waiters(hosts, tmp_path, env, 2)
        with reaped(p, env):
            os.kill(p.pid, signal.SIGINT)
            got = events.lines(4, timeout=30)
            code, _, stderr = communicate(p, timeout=60)
            wait_for_eof(alive_fd, timeout=10)
            left = dh.gone_within(env["DTRUN_TEST_MARK"])
    # Every worker on every host got the SIGINT itself (forwarded as is).
    assert sorted(line.split(" got ")[1] for line in got) == ["SIGINT"] * 4, got
    assert sorted(line.split(" ")[0] for line in got) == ["h1", "h1", "h2", "h2"], got
    assert code == 128 + signal.SIGINT, stderr
    assert "dtrun: received SIGINT; stopping every host" in stderr, stderr
    assert left == [], left


def test_sigkill_of_the_launcher_leaves_nothing_on_any_host(tmp_path):
    env = job_env()
    with ssh_hosts.SshHosts(3, tmp_path) as hosts:
        p, _, alive_fd = start_waiters(hosts, tmp_path, env, 3)
        with reaped(p, env):
            killed_at = time.monotonic()
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
            # Every worker and the child it forked, on every host, gone.
            took = wait_for_eof(alive_fd, timeout=CLEANUP_BOUND_S)
            # The agents and the ssh clients too (bounded /proc scan).
            left = dh.gone_within(env["DTRUN_TEST_MARK"], timeout=CLEANUP_BOUND_S)
            all_gone = time.monotonic() - killed_at
    print(f"after the SIGKILL of the launching dtrun: workers gone in {took:.3f} s, every "
          f"process of the job (agents, ssh clients) in {all_gone:.3f} s")
    assert left == [], left
    assert all_gone < CLEANUP_BOUND_S


def ssh_client_of(launcher_pid, addr):
    """The pid of the launcher's ssh child that connects to `addr`."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if ppid == launcher_pid and argv[0].endswith(b"ssh") and addr.encode() in argv:
            return int(entry)
    raise AssertionError(f"no ssh child of {launcher_pid} for {addr}")


def test_a_dropped_connection_stops_that_host_and_the_others(tmp_path):
    env = job_env()
    with ssh_hosts.SshHosts(3, tmp_path) as hosts:
        p, _, alive_fd = start_waiters(hosts, tmp_path, env, 3)
        with reaped(p, env):
            # The connection to host 2 goes (its ssh client dies): its agent
            # sees its stdin close, the launcher sees the host end.
            os.kill(ssh_client_of(p.pid, hosts.addr(2)), signal.SIGKILL)
            took = wait_for_eof(alive_fd, timeout=CLEANUP_BOUND_S)
            code, _, stderr = communicate(p, timeout=60)
            left = dh.gone_within(env["DTRUN_TEST_MARK"])
    print(f"every worker gone {took:.3f} s after the connection to host 2 dropped")
    errors = [line for line in stderr.splitlines() if line.startswith("dtrun: error:")]
    assert errors == ["dtrun: error: host 10.77.0.2: its ssh was killed by SIGKILL; its agent "
                      "stops its workers when it sees the connection close"], stderr
    assert code == 128 + signal.SIGKILL, stderr
    assert left == [], left


def test_an_unreachable_host_is_one_clear_error_and_stops_the_others(tmp_path):
    env = job_env()
    script = tmp_path / "never.py"
    script.write_text("raise SystemExit('the job must not start')\n")
    # Host 3 exists but runs no sshd: the connection is refused.
    with ssh_hosts.SshHosts(3, tmp_path, sshd_on=[1, 2]) as hosts:
        p = hosts.start_launcher(args(hosts, "--python", dh.PYTHON, str(script)), env, tmp_path)
        with reaped(p, env):
            code, stdout, stderr, left = run_to_end(p, env, timeout=120)
    assert code == 255, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("dtrun: error:")]
    assert errors == [
        "dtrun: error: host 10.77.0.3: ssh failed (exit 255) (ssh: connect to host 10.77.0.3 "
        "port 22: Connection refused); check that 'ssh 10.77.0.3 true' works without a password "
        "or prompt (BatchMode), or give the right options with --ssh"], stderr
    assert "the job must not start" not in stdout + stderr
    assert left == [], left


FAILER = """
import os, signal, sys
if (os.uname().nodename, os.environ["LOCAL_RANK"]) == (os.environ["FAIL_HOST"], "1"):
    print("failing on purpose", file=sys.stderr, flush=True)
    sys.exit(7)
signal.pause()
"""


def test_a_failing_worker_gives_one_summary_naming_host_and_rank(tmp_path):
    script = tmp_path / "failer.py"
    script.write_text(FAILER)
    env = job_env()
    env["FAIL_HOST"] = "h2"
    with ssh_hosts.SshHosts(3, tmp_path) as hosts:
        p = hosts.start_launcher(args(hosts, "--nproc-per-node=2", "--python", dh.PYTHON,
                                      str(script)), env, tmp_path)
        with reaped(p, env):
            code, _, stderr, left = run_to_end(p, env, timeout=120)
    assert code == 7, stderr
    block = summary(stderr)  # exactly one, though every host printed one
    m = re.fullmatch(r"h2 \(node rank (\d)\)", field(block, "host"))
    assert m, block
    node = int(m.group(1))
    assert field(block, "rank") == f"{2 * node + 1} (local_rank 1)", block
    assert field(block, "exit") == "exit code 7", block
    # The workers the other hosts stopped are listed, each host once.
    stopped = re.findall(r"^dtrun: stopped by dtrun \(not failures\): .* on (h\d) ", block, re.M)
    assert sorted(stopped) == ["h1", "h2", "h3"], block
    assert re.search(r"^10\.77\.0\.2: \[rank\d\]:failing on purpose$", stderr, re.M), stderr
    assert left == [], left


def test_a_missing_remote_dtrun_is_one_line_naming_host_and_path(tmp_path):
    env = job_env()
    with ssh_hosts.SshHosts(2, tmp_path) as hosts:
        p = hosts.start_launcher(args(hosts, "--remote-dtrun=/nonexistent/dtrun", "--no-python",
                                      "true"), env, tmp_path)
        with reaped(p, env):
            code, _, stderr, left = run_to_end(p, env, timeout=120)
    assert code == 127, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("dtrun: error:")]
    # Both hosts fail the same way; the first to end is named.
    assert len(errors) == 1, stderr
    assert re.fullmatch(r"dtrun: error: host 10\.77\.0\.[12]: exit code 127: .*/nonexistent/dtrun.*; "
                        r"install dtrun at '/nonexistent/dtrun' on every host or pass "
                        r"--remote-dtrun=PATH", errors[0]), stderr
    assert left == [], left
