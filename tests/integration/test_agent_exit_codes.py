"""What dtrun's exit code says: 0, the failing worker's code, 128+n for a
signal, 127/126 for a missing / non-executable program."""

import os
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402


def sh(script: str, *flags: str, nproc: int = 3):
    return dh.run(["--standalone", f"--nproc-per-node={nproc}", *flags, "--no-python",
                   "/bin/sh", "-c", script])


def test_all_workers_exit_0():
    r = sh("exit 0")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""


def test_the_failing_workers_code_is_dtruns():
    r = sh('[ "$LOCAL_RANK" = 2 ] && exit 7; exit 0')
    assert r.returncode == 7
    assert "local_rank=2" in r.stderr
    assert "exited with code 7" in r.stderr


# The first failure winning over the stopped workers' 128+15 (the policy
# alone) is tested without processes: tests/unit/agent/policy/elastic_agent_test.cpp.


def test_a_signalled_worker_is_128_plus_n_with_its_name():
    r = sh('[ "$LOCAL_RANK" = 0 ] && kill -KILL $$; exec sleep 1000')
    assert r.returncode == 137
    assert "signal 9 (SIGKILL)" in r.stderr


def test_missing_program_is_127():
    r = dh.run(["--standalone", "--no-python", "/nonexistent/prog"])
    assert r.returncode == 127
    assert "/nonexistent/prog" in r.stderr
    r = dh.run(["--standalone", "--no-python", "no-such-program-dtrun"])
    assert r.returncode == 127
    assert "not found" in r.stderr


def test_non_executable_program_is_126(tmp_path):
    script = tmp_path / "not_executable.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    r = dh.run(["--standalone", "--no-python", str(script)])
    assert r.returncode == 126
    assert "Permission denied" in r.stderr


def test_missing_python_is_127():
    r = dh.run(["--standalone", "--python=/nonexistent/python3", "x.py"])
    assert r.returncode == 127
    r = dh.run(["--standalone", "x.py"], env=dh.job_env(PATH="/nonexistent"))
    assert r.returncode == 127
    assert "DTRUN_PYTHON" in r.stderr


def test_usage_error_is_2():
    assert dh.run(["--nproc-per-node"]).returncode == 2
