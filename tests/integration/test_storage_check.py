"""--storage-check through the dtrun binary against a path that really
hangs: a FUSE mount whose daemon stops answering
(tests/fixtures/fuse/stalling_fs.py), so the probe blocks in the kernel as
on an NFS mount whose server went away (docs/agent.md, "Node health").
With --node-health-check=builtin the node is kept out (exit 75, one
line naming the path and the deadline) and dtrun exits without waiting for
its probe; without it the job runs, the path is said once however many
checks find it still stuck, and the agent answers `dtrun status` while its
probe is blocked. The unit tests (storage_probe_test.cpp) show the same
of the probe alone."""

import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

UNHEALTHY = 75
STALLING_FS = dh.SOURCE_DIR / "tests" / "fixtures" / "fuse" / "stalling_fs.py"


class stalled:
    def __init__(self, folder, daemon):
        self.folder = folder
        self.daemon = daemon

    def wait_for_stalled_request(self):
        """Blocks until a request reached the daemon, which never answers
        it: the process that made it is blocked in the kernel for good."""
        for line in iter(self.daemon.stdout.readline, ""):
            if line.startswith("stalled "):
                return
        raise AssertionError("the FUSE daemon ended before any request reached it")


@contextmanager
def stalling_mount(tmp_path):
    """Yields a `stalled` folder no request about a name in is ever
    answered; tears the mount down (the daemon killed: pending requests
    fail) at the end. Skips, saying why, only where FUSE cannot be
    mounted."""
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        pytest.skip("no usable /dev/fuse here: FUSE cannot be mounted")
    folder = tmp_path / "stalled"
    folder.mkdir()
    daemon = subprocess.Popen(["/usr/bin/python3", str(STALLING_FS), str(folder)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if daemon.stdout.readline() != "mounted\n":
            daemon.wait(timeout=30)
            pytest.skip("tests/fixtures/fuse/stalling_fs.py could not mount (python3-fusepy and "
                        f"fuse from scripts/setup-deps?): {daemon.stderr.read().strip()}")
        yield stalled(folder, daemon)
    finally:
        daemon.kill()
        daemon.wait(timeout=30)
        subprocess.run(["umount", "-l", str(folder)], stderr=subprocess.DEVNULL, check=False)


def dtrun_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("dtrun: ")]


def probe_shells(mark):
    """The probe scripts running for the job marked `mark` ($0 names them)."""
    found = []
    for pid in dh.marked_pids(mark):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 3 and argv[3] == b"dtrun-storage-probe":
            found.append(pid)
    return found


def states(pids):
    out = []
    for pid in pids:
        with open(f"/proc/{pid}/stat", "rb") as f:
            out.append(f.read().rsplit(b")", 1)[1].split()[0].decode())
    return out


def sigkill_pending(pid):
    """Whether SIGKILL waits for `pid` (/proc's SigPnd or ShdPnd)."""
    with open(f"/proc/{pid}/status") as f:
        masks = [int(line.split()[1], 16) for line in f
                 if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(mask & (1 << (signal.SIGKILL - 1)) for mask in masks)


def test_a_hung_storage_path_keeps_the_node_out_with_builtin(tmp_path):
    with stalling_mount(tmp_path) as stall:
        mount = stall.folder
        env = dh.job_env()
        r = dh.run(["--standalone", "--node-health-check=builtin", f"--storage-check={mount}",
                    "--node-health-check-timeout=0.5", "--no-python", "/bin/sh", "-c",
                    "touch ran"], env=env, cwd=tmp_path)
        assert r.returncode == UNHEALTHY, r.stderr
        lines = dtrun_lines(r.stderr)
        assert len(lines) == 1, r.stderr
        assert lines[0].startswith(
            f"dtrun: storage check failed: {mount} did not answer a 4 KiB write, fsync and read "
            "within 500 ms (probe pid "), lines
        assert lines[0].endswith(
            f"check with: mount | grep {mount} and dmesg | tail; this node does not join the job "
            "(exit 75)"), lines
        assert not (tmp_path / "ran").exists()  # never ranked
    # dtrun exited without waiting for its probe; once the mount went, the
    # probe (blocked on it, or killed before it got there) is gone too.
    assert dh.gone_within(env["DTRUN_TEST_MARK"]) == []


def test_a_hung_storage_path_warns_once_while_the_agent_answers(tmp_path):
    with stalling_mount(tmp_path) as stall:
        mount = stall.folder
        env = dh.job_env(DTRUN_CONTROL_DIR=str(tmp_path / "control"))
        ready = dh.Fifo(tmp_path, "ready")
        go = dh.Fifo(tmp_path, "go")
        events = tmp_path / "events.jsonl"
        proc = dh.start(["--standalone", f"--storage-check={mount}",
                         "--node-health-check-timeout=0.5", "--node-health-check-interval=0.1",
                         f"--event-log={events}", "--no-python", "/bin/sh", "-c",
                         f"echo ready > {ready.path}; read line < {go.path}"], env)
        with dh.cleaned_up(proc, env["DTRUN_TEST_MARK"]):
            ready.lines(1)
            stall.wait_for_stalled_request()  # the probe is blocked in the kernel now
            # Checks come every 0.1 s while the probe stays stuck: the agent's
            # loop answers, and the path has one probe, never a second.
            for _ in range(3):
                status = subprocess.run([str(dh.DTRUN), "status", "--json"], env=env,
                                        capture_output=True, text=True, timeout=60)
                assert status.returncode == 0, status.stderr
                assert json.loads(status.stdout)[0]["phase"] == "running"
                assert len(probe_shells(env["DTRUN_TEST_MARK"])) == 1
            go.write("go\n")
            assert proc.wait(timeout=60) == 0
            stderr = proc.stderr.read()
            # dtrun exited without waiting for its probe, but SIGKILLed the
            # probe's whole process group first. Its shell dies of it (gone,
            # or R for the instant before it runs again). Its dd, whose
            # request the daemon holds, had been sleeping in FUSE's first,
            # interruptible wait for the answer (S); the signal woke it (R),
            # and it now sleeps in the uninterruptible wait that follows
            # (D) with the SIGKILL pending, until the mount answers
            # (below). S here is a dd no signal reached: dtrun's last sweep
            # of its children once killed the shell alone, and missed the
            # dd, which comes to dtrun (the subreaper) only once the shell
            # died (seen once under ASan; worker_process_test.cpp).
            left = dh.marked_pids(env["DTRUN_TEST_MARK"])
            seen = states(left)
            described = [dh.describe_process(p) for p in left]
            assert left and set(seen) <= {"D", "R"}, described
            assert all(sigkill_pending(p) for p, s in zip(left, seen) if s == "D"), described
        said = [line for line in dtrun_lines(stderr) if "storage check failed" in line]
        assert len(said) == 1, stderr
        assert said[0].startswith(f"dtrun: warning: storage check failed: {mount} did not "
                                  "answer"), said
        assert said[0].endswith("(not keeping this node out: pass --node-health-check=builtin "
                                "for that)"), said
        storage = [f for e in dh.read_json_lines(events) if e["event"] == "node_health"
                   for f in e["findings"] if f["check"] == "storage"]
        assert [(f["healthy"], f["gating"], f["repeated"]) for f in storage] == [
            (False, False, False)], storage
    # The mount went: the blocked request failed, the pending SIGKILL acted.
    assert dh.gone_within(env["DTRUN_TEST_MARK"]) == []


def test_dtrun_status_names_a_hung_storage_path_while_it_lasts(tmp_path):
    with stalling_mount(tmp_path) as stall:
        mount = stall.folder
        env = dh.job_env(DTRUN_CONTROL_DIR=str(tmp_path / "control"))
        ready = dh.Fifo(tmp_path, "ready")
        go = dh.Fifo(tmp_path, "go")
        proc = dh.start(["--standalone", f"--storage-check={mount}",
                         "--node-health-check-timeout=0.5", "--node-health-check-interval=0.1",
                         "--no-python", "/bin/sh", "-c",
                         f"echo ready > {ready.path}; read line < {go.path}"], env)
        with dh.cleaned_up(proc, env["DTRUN_TEST_MARK"]):
            ready.lines(1)
            # Said once in the log, after the agent noted it for status.
            dh.wait_for_stderr(proc, "storage check failed")
            [probe] = probe_shells(env["DTRUN_TEST_MARK"])
            said = (f"storage check failed: {mount} did not answer a 4 KiB write, fsync and "
                    f"read within 500 ms (probe pid {probe}")
            status = subprocess.run([str(dh.DTRUN), "status", "--json"], env=env,
                                    capture_output=True, text=True, timeout=60)
            assert status.returncode == 0, status.stderr
            [job] = json.loads(status.stdout)
            assert job["phase"] == "running"
            # Every check since finds it still stuck: the reason of the
            # latest says so, beyond the words the log said once.
            [health] = job["health"]
            assert health["reason"].startswith(said), health
            by_hand = f"check with: mount | grep {mount} and dmesg | tail"
            assert health["reason"].endswith(by_hand), health
            assert {k: v for k, v in health.items() if k != "reason"} == {
                "node_rank": 0, "check": "storage", "gating": False, "output_tail": []}
            table = subprocess.run([str(dh.DTRUN), "status"], env=env, capture_output=True,
                                   text=True, timeout=60)
            assert table.returncode == 0, table.stderr
            lines = [line for line in table.stdout.splitlines() if line.startswith("health: ")]
            assert len(lines) == 1, table.stdout
            assert lines[0].startswith(f"health: storage (warning): {said}"), table.stdout
            go.write("go\n")
            assert proc.wait(timeout=60) == 0


def test_storage_paths_show_in_dry_run_absolute_and_an_empty_one_is_refused(tmp_path):
    r = dh.run(["--dry-run", "--standalone", "--storage-check=/mnt/a,data", "--no-python", "true"],
               cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    health = json.loads(r.stdout)["node_health_check"]
    assert health["storage_check"] == ["/mnt/a", str(tmp_path / "data")]
    assert health["interval_s"] == 300.0  # the links and paths are watched while running
    bad = dh.run(["--standalone", "--storage-check=/mnt/a,,/mnt/b", "--no-python", "true"])
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.strip().splitlines() == [
        "dtrun: error: --storage-check: an empty path in '/mnt/a,,/mnt/b'; give folders "
        "separated by single commas"], bad.stderr


def test_a_folder_that_answers_passes_and_keeps_nothing(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    events = tmp_path / "events.jsonl"
    r = dh.run(["--standalone", "--node-health-check=builtin", f"--storage-check={shared}",
                f"--event-log={events}", "--no-python", "/bin/sh", "-c", "touch ran"],
               cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "ran").exists()
    assert list(shared.iterdir()) == []  # the probe's file was removed
    storage = [f for e in dh.read_json_lines(events) if e["event"] == "node_health"
               for f in e["findings"] if f["check"] == "storage"]
    assert [(f["healthy"], f["gating"]) for f in storage] == [(True, True)], storage
