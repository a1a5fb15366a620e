"""torchrun's file-timer watchdog (TORCHELASTIC_ENABLE_FILE_TIMER=1), driven
by torch 1.13's own FileTimerClient and expires() in the workers
(tests/pyhelpers/file_timer_worker.py): a worker past its deadline is
killed and reported, a released deadline changes nothing, the group
restarts after a kill, and bad or hostile requests are ignored."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

WORKER = str(dh.SOURCE_DIR / "tests" / "pyhelpers" / "file_timer_worker.py")
DUMP_ENV = str(dh.SOURCE_DIR / "tests" / "pyhelpers" / "dump_env.py")


def env(**extra):
    e = dh.job_env(**extra)
    for key in ("TORCHELASTIC_ENABLE_FILE_TIMER", "TORCHELASTIC_TIMER_FILE"):
        if key not in extra:
            e.pop(key, None)
    return e


def run_worker(tmp_path, mode, *flags, nproc=1, **extra):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    try:
        r = dh.run(["--standalone", f"--nproc-per-node={nproc}", *flags, "--python", dh.PYTHON,
                    WORKER, mode, str(out)],
                   env=env(TORCHELASTIC_ENABLE_FILE_TIMER="1", **extra))
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"dtrun did not end: {e.stderr}") from e
    seen = {p.name: json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))}
    return r, seen


def test_a_worker_past_its_deadline_is_killed_and_named(tmp_path):
    r, seen = run_worker(tmp_path, "hang")
    assert r.returncode == 137, r.stderr
    assert "inside the deadline" in r.stdout
    assert "watchdog  : killed by dtrun's file-timer watchdog: deadline of scope" in r.stderr
    assert "SIGKILL sent" in r.stderr
    assert "exit      : signal 9 (SIGKILL), exit code 137" in r.stderr
    # The pipe dtrun made: in the run's own folder, private, gone at exit.
    pipe = Path(seen["rank0.json"]["path"])
    assert pipe.name == "watchdog_timer"
    assert stat.S_ISFIFO(seen["rank0.json"]["mode"])
    assert stat.S_IMODE(seen["rank0.json"]["mode"]) == 0o600
    assert not pipe.exists()


def test_a_released_deadline_leaves_the_workers_alone(tmp_path):
    r, seen = run_worker(tmp_path, "quick", nproc=2)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("released") == 2
    assert "watchdog" not in r.stderr
    assert len({s["path"] for s in seen.values()}) == 1  # one pipe for the node's workers


def test_the_group_restarts_after_a_watchdog_kill(tmp_path):
    r, seen = run_worker(tmp_path, "hang_once", "--max-restarts=1")
    assert r.returncode == 0, r.stderr
    assert "SIGKILL sent" in r.stderr
    assert "restarting the workers (restart 1 of 1)" in r.stderr
    assert "inside the deadline" in r.stdout and "released" in r.stdout


def test_bad_and_hostile_requests_are_ignored(tmp_path):
    # A process that is not a worker: a request naming it must not kill it.
    victim = subprocess.Popen([dh.PYTHON, "-c", "import signal; signal.pause()"])
    try:
        # One worker: a flood interleaves with other writers' lines (writes
        # over PIPE_BUF are not atomic) and fills the pipe, where torch's
        # client, writing without blocking, fails with EAGAIN (with torch's
        # own server too), so a second worker's requests could be lost.
        r, _ = run_worker(tmp_path, "abuse", VICTIM_PIDS=str(victim.pid))
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()
    # dtrun itself was named too (os.getppid()): it lived to exit 0.
    assert r.returncode == 0, r.stderr
    assert "got SIGUSR1 from the watchdog" in r.stdout
    assert "released" in r.stdout  # torch's client still works afterwards
    # Each kind once at the default verbosity, whatever the number of lines.
    assert r.stderr.count("ignoring a bad request") == 1
    assert "not a JSON object: this is not json" in r.stderr
    assert r.stderr.count("not a running worker of this agent") == 1
    assert "SIGUSR1 sent" in r.stderr


def test_bad_requests_are_escaped_in_the_verbose_log(tmp_path):
    r, _ = run_worker(tmp_path, "abuse", "-v", nproc=1, VICTIM_PIDS=str(os.getpid()))
    assert r.returncode == 0, r.stderr
    assert "a line longer than 4096 bytes" in r.stderr
    assert "\\x1b[31m" in r.stderr and "\x1b" not in r.stderr
    assert '"pid" is not a process id' in r.stderr
    assert '"pid" missing or not an integer' in r.stderr


def test_a_pipe_named_by_the_user_is_made_and_removed(tmp_path):
    pipe = tmp_path / "my_timer"
    r, seen = run_worker(tmp_path, "quick", TORCHELASTIC_TIMER_FILE=str(pipe))
    assert r.returncode == 0, r.stderr
    assert seen["rank0.json"]["path"] == str(pipe)
    assert stat.S_ISFIFO(seen["rank0.json"]["mode"])
    assert not pipe.exists()


def test_an_existing_file_is_not_replaced(tmp_path):
    target = tmp_path / "precious"
    target.write_text("keep me")
    r, seen = run_worker(tmp_path, "quick", TORCHELASTIC_TIMER_FILE=str(target))
    assert r.returncode == 1
    assert seen == {}
    assert target.read_text() == "keep me"
    lines = [line for line in r.stderr.splitlines() if "TORCHELASTIC_TIMER_FILE" in line]
    assert len(lines) == 1 and "exists and is not a named pipe" in lines[0], r.stderr


def dump_env(tmp_path, **extra):
    out = tmp_path / "env"
    out.mkdir(parents=True)
    r = dh.run(["--standalone", "--nproc-per-node=1", "--python", dh.PYTHON, DUMP_ENV,
                str(out)], env=env(**extra))
    assert r.returncode == 0, r.stderr
    return json.loads((out / "rank0.json").read_text())


def test_no_timer_file_for_the_workers_when_the_watchdog_is_off(tmp_path):
    assert "TORCHELASTIC_TIMER_FILE" not in dump_env(tmp_path)
    # Only exactly "1" turns it on, as in torch.
    assert "TORCHELASTIC_TIMER_FILE" not in dump_env(tmp_path / "a", TORCHELASTIC_ENABLE_FILE_TIMER="true")


def test_a_pipe_another_process_reads_is_not_taken_over(tmp_path):
    # Another job's watchdog reads it: replacing it would cut that job's
    # workers off their watchdog.
    pipe = tmp_path / "shared_timer"
    os.mkfifo(pipe, 0o600)
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    try:
        inode = pipe.stat().st_ino
        r, seen = run_worker(tmp_path, "quick", TORCHELASTIC_TIMER_FILE=str(pipe))
        assert pipe.stat().st_ino == inode
    finally:
        os.close(reader)
    assert r.returncode == 1, r.stderr
    assert seen == {}
    lines = [line for line in r.stderr.splitlines() if "TORCHELASTIC_TIMER_FILE" in line]
    assert len(lines) == 1 and "another process reads" in lines[0], r.stderr


def test_a_leftover_pipe_nobody_reads_is_replaced(tmp_path):
    pipe = tmp_path / "left_timer"
    os.mkfifo(pipe, 0o600)
    r, seen = run_worker(tmp_path, "quick", TORCHELASTIC_TIMER_FILE=str(pipe))
    assert r.returncode == 0, r.stderr
    assert "released" in r.stdout
    assert not pipe.exists()


def test_a_pipe_replaced_during_the_run_is_not_removed_at_exit(tmp_path):
    # Another job started with the same TORCHELASTIC_TIMER_FILE after ours
    # put its own pipe there: ours ending must not remove that job's pipe.
    pipe = tmp_path / "timer"
    r = dh.run(["--standalone", "--nproc-per-node=1", "--no-python", "/bin/sh", "-c",
                'mkfifo "$TORCHELASTIC_TIMER_FILE.new" && '
                'mv "$TORCHELASTIC_TIMER_FILE.new" "$TORCHELASTIC_TIMER_FILE"'],
               env=env(TORCHELASTIC_ENABLE_FILE_TIMER="1", TORCHELASTIC_TIMER_FILE=str(pipe)))
    assert r.returncode == 0, r.stderr
    assert stat.S_ISFIFO(pipe.lstat().st_mode)
