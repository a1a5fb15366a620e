"""Node health on one node (docs/agent.md, "Node health", "Quarantine"): a
real --node-health-check command before joining and while the workers run,
the built-in GPU checks and the GPU reclaim against the fake NVML library
(tests/fake_nvml), and a quarantined machine coming back. An unhealthy
node exits 75 and says why in one line. The same on several hosts training
real DDP: tests/e2e/test_node_health.py."""

import json
import os
import signal
import sys
import unicodedata

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

UNHEALTHY = 75
FAKE_NVML = dh.BUILD_DIR / "tests" / "fake_nvml"


def run(tmp_path, check, *flags, program="touch ran", env=None, timeout=60):
    env = env or dh.job_env()
    return dh.run(["--standalone", *(["--node-health-check", check] if check else []), *flags,
                   "--no-python", "/bin/sh", "-c", program], env=env, timeout=timeout,
                  cwd=tmp_path)


def dtrun_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("dtrun: ")]


def test_a_failing_check_keeps_the_node_out_and_says_why(tmp_path):
    r = run(tmp_path, "echo checking; echo 'GPU 2: ECC errors' >&2; exit 3")
    assert r.returncode == UNHEALTHY, r.stderr
    assert dtrun_lines(r.stderr) == [
        "dtrun: node health check failed: `echo checking; echo 'GPU 2: ECC errors' >&2; exit 3` "
        "exited with 3 (last line: \"GPU 2: ECC errors\"); this node does not join the job "
        "(exit 75)"], r.stderr
    assert not (tmp_path / "ran").exists()  # never ranked, no worker started


def test_a_passing_check_lets_the_job_run(tmp_path):
    r = run(tmp_path, "test -d /")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "ran").exists()


def test_a_hanging_check_is_killed_at_its_timeout_and_leaves_nothing(tmp_path):
    env = dh.job_env()
    r = run(tmp_path, "sleep 1000 & sleep 1000", "--node-health-check-timeout=0.5", env=env)
    assert r.returncode == UNHEALTHY, r.stderr
    assert "`sleep 1000 & sleep 1000` timed out after 500 ms" in r.stderr
    # The check's whole process group went with it (both sleeps carry the mark).
    assert dh.gone_within(env["DTRUN_TEST_MARK"]) == []


@pytest.mark.parametrize("hostile", [
    "head -c 100000000 /dev/zero; exit 1",            # 100 MB without a newline
    "yes 'a line' | head -c 100000000; exit 1",       # 100 MB of lines
    "cat {binary}; exit 1",                           # every byte value, terminal escapes
    "cat {fifo}",                                     # reads a FIFO nobody writes
    "exec 1>&-; exec 2>&-; sleep 1000",               # closes its output, then hangs
])
def test_hostile_check_output_cannot_stall_the_agent(tmp_path, hostile):
    fifo = tmp_path / "never"
    os.mkfifo(fifo)
    binary = tmp_path / "binary"
    # Colour, a C1 CSI, a right-to-left override, a line separator, then
    # every byte value: none may reach the terminal as it is.
    binary.write_bytes("\x1b[31mred\u009b2J\u202egnp.exe\u2028x".encode() + bytes(range(256)))
    env = dh.job_env()
    r = run(tmp_path, hostile.format(fifo=fifo, binary=binary), "--node-health-check-timeout=3",
            env=env)
    assert r.returncode == UNHEALTHY, r.stderr
    lines = dtrun_lines(r.stderr)
    assert len(lines) == 1, r.stderr
    assert len(lines[0]) < 600  # the command's output is bounded in it
    assert [c for c in lines[0] if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")] == [], \
        lines[0]
    assert dh.gone_within(env["DTRUN_TEST_MARK"]) == []


def test_a_node_that_turns_unhealthy_stops_its_workers_and_leaves(tmp_path):
    fifo = dh.Fifo(tmp_path)
    env = dh.job_env(FIFO=str(fifo.path))
    events = tmp_path / "events.jsonl"
    sick = tmp_path / "sick"
    proc = dh.start(["--standalone", "--nproc-per-node=2", f"--node-health-check=test ! -e {sick}",
                     "--node-health-check-interval=0.2", f"--event-log={events}",
                     "--no-python", "/bin/sh", "-c",
                     "echo ready > $FIFO; while :; do sleep 1000 & wait $!; done"], env)
    with dh.cleaned_up(proc, env["DTRUN_TEST_MARK"]):
        fifo.lines(2)
        sick.touch()
        assert proc.wait(timeout=60) == UNHEALTHY
        stderr = proc.stderr.read()
        assert (f"node health check failed: `test ! -e {sick}` exited with 1; stopping this "
                "node's workers and leaving the job") in stderr, stderr
        assert dh.gone_within(env["DTRUN_TEST_MARK"]) == []
    kinds = [e["event"] for e in dh.read_json_lines(events)]
    assert kinds.count("node_health") >= 2  # before joining, then each interval
    assert "node_left" in kinds
    assert "restart" not in kinds


def fake_nvml_env(**settings):
    return dh.job_env(LD_LIBRARY_PATH=str(FAKE_NVML), **settings)


REMAP = ("GPU 1 has a row remapping pending (it takes effect at the next GPU reset or reboot; "
         "check: nvidia-smi -q -d ROW_REMAPPER -i 1)")


def test_builtin_gpu_checks_warn_by_default_and_keep_the_node_out_when_asked(tmp_path):
    env = fake_nvml_env(FAKE_NVML_GPUS="2", FAKE_NVML_PENDING_REMAP="1")
    warned = run(tmp_path, None, env=env)
    assert warned.returncode == 0, warned.stderr
    assert (f"dtrun: warning: {REMAP} (not keeping this node out: pass "
            "--node-health-check=builtin for that)") in dtrun_lines(warned.stderr)
    (tmp_path / "ran").unlink()
    env = fake_nvml_env(FAKE_NVML_GPUS="2", FAKE_NVML_PENDING_REMAP="1")
    gated = run(tmp_path, "builtin", env=env)
    assert gated.returncode == UNHEALTHY, gated.stderr
    assert dtrun_lines(gated.stderr) == [
        f"dtrun: {REMAP}; this node does not join the job (exit 75)"]
    assert not (tmp_path / "ran").exists()


def test_an_xid_error_keeps_the_node_out(tmp_path):
    env = fake_nvml_env(FAKE_NVML_GPUS="2", FAKE_NVML_XID="0:79")
    r = run(tmp_path, "builtin", env=env)
    assert r.returncode == UNHEALTHY, r.stderr
    line, = dtrun_lines(r.stderr)
    assert "XID 79" in line and "GPU 0" in line, line


def test_gpu_memory_that_does_not_come_back_makes_the_node_leave(tmp_path):
    # The worker of round 0 leaves 5 GB behind on GPU 0 (in the fake's
    # state file, as a driver that did not free it), then fails.
    state = tmp_path / "nvml_state"
    state.write_text("memory 0 1000000\n")
    env = fake_nvml_env(FAKE_NVML_GPUS="1", FAKE_NVML_STATE=str(state))
    events = tmp_path / "events.jsonl"
    r = run(tmp_path, None, "--max-restarts=3", "--gpu-reclaim-timeout=0.5",
            f"--event-log={events}",
            program=f'echo "memory 0 5000000000" > {state}; '
                    'echo "round $TORCHELASTIC_RESTART_COUNT" >> rounds; exit 1', env=env)
    assert r.returncode == UNHEALTHY, r.stderr
    assert (tmp_path / "rounds").read_text() == "round 0\n"  # never restarted on it
    assert "GPU 0 memory 4.7 GiB above its level before the job" in r.stderr, r.stderr
    assert "node_left" in [e["event"] for e in dh.read_json_lines(events)]


def test_gpus_given_back_in_time_let_the_group_restart(tmp_path):
    state = tmp_path / "nvml_state"
    state.write_text("memory 0 1000000\n")
    env = fake_nvml_env(FAKE_NVML_GPUS="1", FAKE_NVML_STATE=str(state))
    r = run(tmp_path, None, "--max-restarts=1", "--gpu-reclaim-timeout=30",
            program='[ "$TORCHELASTIC_RESTART_COUNT" = 1 ] && exit 0; exit 1', env=env)
    assert r.returncode == 0, r.stderr


def test_a_quarantined_machine_waits_its_cooldown_then_rejoins(tmp_path):
    # The check fails once (the first run finds no marker and leaves one),
    # then passes: quarantined after 1 failure, back after the cooldown.
    events = tmp_path / "events.jsonl"
    marker = tmp_path / "checked"
    r = run(tmp_path, f"test -e {marker} || {{ touch {marker}; exit 4; }}",
            "--quarantine-after=1", "--quarantine-cooldown=0.5", f"--event-log={events}")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "ran").exists()
    assert "quarantining this machine for 0.5 s (1 failure(s) in a row, quarantine 1 in this " \
           "job)" in r.stderr, r.stderr
    quarantined = [e for e in dh.read_json_lines(events) if e["event"] == "quarantined"]
    assert len(quarantined) == 1
    assert quarantined[0]["cooldown_s"] == 0.5
    assert quarantined[0]["fault"] == "health"
    assert len(quarantined[0]["machine"]) >= 12


def test_health_flags_show_in_dry_run_and_bad_values_are_refused(tmp_path):
    r = dh.run(["--dry-run", "--standalone", "--node-health-check=builtin",
                "--node-health-check=/opt/check", "--quarantine-after=2",
                "--gpu-reclaim-timeout=5", "--no-python", "true"])
    assert r.returncode == 0, r.stderr
    config = json.loads(r.stdout)
    assert config["node_health_check"]["command"] == "/opt/check"
    assert config["node_health_check"]["builtin"] == "gating"
    assert config["quarantine"]["after"] == 2
    assert config["gpu_reclaim_timeout_s"] == 5.0
    for flags, message in [
            (["--node-health-check="], "--node-health-check: the command is empty"),
            (["--node-health-check=a", "--node-health-check=b"], "two commands given"),
            (["--quarantine-after=-1"], "--quarantine-after"),
            (["--node-health-check-timeout=0"], "--node-health-check-timeout")]:
        bad = dh.run(["--standalone", *flags, "--no-python", "true"])
        assert bad.returncode == 2, (flags, bad.stderr)
        assert message in bad.stderr, (flags, bad.stderr)
        assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_what_a_failed_check_left_in_sessions_of_its_own_is_killed(tmp_path):
    env = dh.job_env()
    r = run(tmp_path, "setsid sleep 1000 & setsid sleep 1000 & exit 1", env=env)
    assert r.returncode == UNHEALTHY, r.stderr
    assert dh.gone_within(env["DTRUN_TEST_MARK"]) == []


def test_a_quarantine_file_that_is_not_a_regular_file_is_left_alone(tmp_path):
    fifo = tmp_path / "not-a-file"
    os.mkfifo(fifo)
    marker = tmp_path / "checked"
    r = run(tmp_path, f"test -e {marker} || {{ touch {marker}; exit 4; }}",
            "--quarantine-after=1", "--quarantine-cooldown=0.2", f"--quarantine-file={fifo}")
    assert r.returncode == 0, r.stderr
    assert (f"dtrun: could not write --quarantine-file {fifo}: it is not a regular file; "
            "name a file") in dtrun_lines(r.stderr)
    assert fifo.is_fifo()


def local_agent(port, run_id, *flags, is_host=1, program="exec sleep 600", env=None):
    return dh.start(["--nnodes=1:2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
                     f"--rdzv-id={run_id}", f"--rdzv-conf={dh.FAST_RDZV},is_host={is_host}",
                     *flags, "--no-python", "/bin/sh", "-c", program], env)


def test_ctrl_c_while_in_quarantine_stops_the_job_with_130(tmp_path):
    env = dh.job_env()
    p = local_agent(dh.free_port(), "q-ctrl-c", "--node-health-check=false",
                    "--quarantine-after=1", "--quarantine-cooldown=600", env=env)
    with dh.cleaned_up(p, env["DTRUN_TEST_MARK"]):
        dh.wait_for_stderr(p, "quarantining this machine for 600 s")
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=60) == 130
        assert "while this node was out of it" not in p.stderr.read()


def test_a_spare_ends_with_the_job_when_it_fails(tmp_path):
    # Two nodes of --nnodes=2 fail (their workers exit 3 once told, with no
    # restart allowed) while a third waits as a spare: the spare learns the
    # job failed, instead of waiting for a next round nobody joins.
    port = dh.free_port()
    env = dh.job_env()
    fifo = dh.Fifo(tmp_path)
    go = tmp_path / "go"
    os.mkfifo(go)
    program = f"echo ready > {fifo.path}; read line < {go}; exit 3"
    conf = "join_timeout=600,last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3"

    def agent(is_host):
        return dh.start(["--nnodes=2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
                         "--rdzv-id=spare-fails", f"--rdzv-conf={conf},is_host={is_host}",
                         "--no-python", "/bin/sh", "-c", program], env)

    procs = [agent(1), agent(0)]
    with dh.cleaned_up(procs[0], env["DTRUN_TEST_MARK"]):
        fifo.lines(2)
        procs.append(agent(0))
        dh.wait_for_stderr(procs[2], "is full (2 nodes); waiting for the next one")
        # Held open until the end: a worker that opens the FIFO only now
        # still finds its line (each `read` takes one).
        writer = os.open(go, os.O_RDWR)
        os.write(writer, b"go\ngo\n")
        codes = [p.wait(timeout=120) for p in procs]
        os.close(writer)
        assert codes[:2] == [3, 3], codes
        assert codes[2] != 0
        # Promptly either way (join_timeout is 600 s): it read that the job
        # failed, or the store's host had already left with the job over
        # (the host waits for the round's members only; a spare is none).
        stderr = procs[2].stderr.read()
        assert ("the job failed on another node" in stderr
                or "lost the connection to the store at 127.0.0.1" in stderr), stderr
