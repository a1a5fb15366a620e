"""dtrun --preload under real gloo DDP on torch 2.15 (PyPI's, in a Python
3.11 venv: tests/pyhelpers/torch_pypi.py; the torch 1.13 twin is
test_preload_ddp.py, the shared checks tests/pyhelpers/preload_ddp.py):
two workers forked from the warm interpreter train with DDP, rank 1 raises
inside its @record main in round 0, one group restart trains to the end,
and:
- every worker of both rounds was forked (torch already imported at the
  script's first line) and had dtrun's agent as its parent;
- each saw the start a plain worker sees (argv, sys.path, folder, the
  environment's names, stdio) and drew its own torch seed;
- round 1's replicas end identical, all-reduced over both ranks;
- the failure summary (torch 2.15's @record error file) and the per-rank
  files of --tee=3 and --redirects=3 are those of the same run without
  --preload;
- --hang-timeout finds a worker hung in a forked interpreter and names its
  Python function; `dtrun stacks` shows the forked workers' Python stacks;
- no process of any run is left behind."""

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
pytest.register_assert_rewrite("preload_ddp", "hang_checks")  # their failures explained
import dtrun_helpers as dh  # noqa: E402
import preload_ddp as pd  # noqa: E402
import torch_pypi  # noqa: E402


def launcher(args, workdir, env, timeout):
    return torch_pypi.dtrun(args, env=env, timeout=timeout)


def popen(args, workdir, env):
    return torch_pypi.popen([dh.DTRUN, *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=dh.default_signals)


def stacks_cli(args, workdir, env, timeout):
    return torch_pypi.run([dh.DTRUN, *args], env=env, timeout=timeout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    torch_pypi.require()
    workdir = tmp_path_factory.mktemp("preload")
    return {
        "plain": pd.train(launcher, torch_pypi.PYTHON, workdir, "plain", None, "--tee=3"),
        "tee": pd.train(launcher, torch_pypi.PYTHON, workdir, "tee", "torch", "--tee=3"),
        "redirects": pd.train(launcher, torch_pypi.PYTHON, workdir, "redirects", "torch",
                              "--redirects=3"),
        # No restart: the job ends with round 0's failure and its summary.
        "plain failed": pd.train(launcher, torch_pypi.PYTHON, workdir, "plain_failed", None,
                                 "--redirects=3", max_restarts=0),
        "failed": pd.train(launcher, torch_pypi.PYTHON, workdir, "failed", "torch", "--redirects=3",
                           max_restarts=0),
    }


def test_ddp_with_a_restart_trains_in_forked_workers_on_torch_2_15(runs):
    plain = pd.check_trained(runs["plain"], torch_pypi.TORCH_VERSION)
    for name in ("tee", "redirects"):
        preloaded = pd.check_trained(runs[name], torch_pypi.TORCH_VERSION)
        pd.check_forked(runs[name], ["torch"])
        assert preloaded[0]["params"] == plain[0]["params"]
        pd.check_same_start(runs["plain"], runs[name])
    pd.check_forked(runs["plain"], [])


def test_record_failure_is_reported_as_without_preload_on_torch_2_15(runs):
    for name in ("tee", "redirects"):
        pd.check_same_round_0_failure(runs["plain"], runs[name])
    pd.check_same_summary(runs["plain failed"], runs["failed"])
    pd.check_forked(runs["failed"], ["torch"], rounds=1)


def test_tee_and_redirects_write_the_same_files_as_without_preload_on_torch_2_15(runs):
    pd.check_tee_and_redirects(runs)


def test_a_hang_in_a_forked_worker_is_found_and_named_on_torch_2_15(tmp_path):
    torch_pypi.require()
    pd.hang(launcher, torch_pypi.PYTHON, tmp_path, "torch")


def test_dtrun_stacks_shows_forked_workers_python_stacks_on_torch_2_15(tmp_path):
    torch_pypi.require()
    pd.stacks(popen, stacks_cli, torch_pypi.PYTHON, tmp_path, "torch")


def test_numpys_threads_do_not_turn_preload_off_on_torch_2_15(tmp_path):
    """torch 2.15 imports numpy, whose OpenBLAS starts a thread per core at
    load unless OMP_NUM_THREADS (or OPENBLAS_NUM_THREADS) is 1: one worker
    per node, or threads asked for the CPU's work. It stops them at a fork
    and starts them again on its next use, so the warm interpreter forks
    once past them (a GPU machine saw --preload refused there:
    docs/benchmarks.md, "On a GPU machine"), and the worker's BLAS has its
    threads back."""
    torch_pypi.require()
    script = tmp_path / "blas.py"
    script.write_text(
        "import sys\n"
        "forked = 'torch' in sys.modules\n"
        "import os, numpy\n"
        "a = numpy.ones((512, 512))\n"
        "assert (a @ a)[0, 0] == 512\n"
        "print('forked', forked, 'threads', len(os.listdir('/proc/self/task')), flush=True)\n")
    r = torch_pypi.dtrun(["--standalone", "--nproc-per-node=1", "--preload=torch", str(script)],
                         env=dh.job_env(OMP_NUM_THREADS="2"), timeout=300)
    assert r.returncode == 0, r.stderr
    assert "--preload" not in r.stderr, r.stderr
    assert "forked True threads 2" in r.stdout, (r.stdout, r.stderr)
