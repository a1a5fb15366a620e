"""dtrun under a real Slurm cluster (scripts/slurm-cluster: slurmctld here,
slurmd nodes node1 and node2 in network namespaces, munge), submitted with
srun and sbatch like on a real cluster.

Every scenario runs twice where it can:
  - "flags": dtrun is given its rendezvous explicitly from Slurm's variables
    (works with any dtrun; checks the cluster and the tests themselves);
  - "slurm": no rendezvous flags at all; dtrun must find everything in
    Slurm's environment (issue 6's acceptance tests, docs/schedulers.md).

Tasks share the machine's file system, so result files and FIFOs in a
temporary folder are seen by the test and by both nodes."""

import collections
import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import netns_hosts  # noqa: E402

CLUSTER = dh.SOURCE_DIR / "scripts" / "slurm-cluster"
SETUP_DEPS = dh.SOURCE_DIR / "scripts" / "setup-deps"
EXAMPLE = dh.EXAMPLES / "ddp_gloo.py"
SIGNAL_WORKER = dh.SOURCE_DIR / "tests" / "pyhelpers" / "signal_report_worker.py"
ENV_WORKER = dh.SOURCE_DIR / "tests" / "pyhelpers" / "dump_env.py"
TRAIN = ["--epochs", "1", "--steps-per-epoch", "2"]
# Every Slurm call gets a wall-clock limit, so a hang fails the test.
SRUN_TIMEOUT = 120
SLURM_TOOLS = ("slurmctld", "slurmd", "srun", "sbatch", "scancel", "munged", "mungekey")

REASON = "dtrun's Slurm tests need root" if os.geteuid() != 0 else netns_hosts.unavailable_reason()
if REASON:
    print(f"skipping the Slurm tests: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

MODES = ["flags", "slurm"]


def packages_reason():
    """None when Slurm and munge are installed (installing them if need be)."""
    if all(shutil.which(t) for t in SLURM_TOOLS):
        return None
    r = subprocess.run([str(SETUP_DEPS)], capture_output=True, text=True, timeout=600)
    missing = [t for t in SLURM_TOOLS if not shutil.which(t)]
    if missing:
        return f"{', '.join(missing)} missing and not installable: {r.stderr.strip()[-300:]}"
    return None


# The test cluster is one per machine (its bridge, subnet, slurmctld port
# and state file are fixed), so two suites on one machine (two clones, CI
# beside a developer) take turns: each holds this lock from start to stop.
# Without it the second one's start fails and its clean-up stops the
# first one's cluster under its running jobs.
CLUSTER_LOCK = "/run/dtrun-slurm-cluster.lock"
LOCK_WAIT_S = 300


def lock_cluster():
    """The cluster lock's file, locked; waits (bounded) for another holder."""
    f = open(CLUSTER_LOCK, "a")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return f
    except BlockingIOError:
        print(f"waiting up to {LOCK_WAIT_S} s for another Slurm test cluster ({CLUSTER_LOCK})")
    # SIGALRM interrupts the blocking flock: a bounded wait, no polling.
    def give_up(*_):
        raise TimeoutError(f"another Slurm test cluster held {CLUSTER_LOCK} "
                           f"for more than {LOCK_WAIT_S} s")
    previous = signal.signal(signal.SIGALRM, give_up)
    signal.alarm(LOCK_WAIT_S)
    try:
        fcntl.flock(f, fcntl.LOCK_EX)
    except BaseException:
        f.close()
        raise
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return f


@pytest.fixture(scope="module")
def slurm_conf():
    reason = packages_reason()
    if reason:
        print(f"skipping the Slurm tests: {reason}")
        pytest.skip(reason)
    with lock_cluster():
        try:
            # A cluster still up now is the remains of a killed run (a suite
            # holding the lock would be using it): it goes, so that one lost
            # run does not fail every later one with "already running".
            subprocess.run([str(CLUSTER), "stop"], capture_output=True, timeout=120)
            r = subprocess.run([str(CLUSTER), "start"], capture_output=True, text=True,
                               timeout=120)
            assert r.returncode == 0, f"scripts/slurm-cluster start failed:\n{r.stderr}"
            conf = re.search(r"^export SLURM_CONF=(\S+)$", r.stdout, re.M)
            assert conf, r.stdout
            yield conf.group(1)
        finally:
            # Ours to stop (we hold the lock): also the remains of a failed start.
            subprocess.run([str(CLUSTER), "stop"], capture_output=True, timeout=120)


@pytest.fixture
def env(slurm_conf):
    """The job's environment (srun and sbatch pass it on to the tasks), and
    afterwards: no job left in the queue, no process of the job left."""
    e = dh.job_env(SLURM_CONF=slurm_conf, DTRUN_PYTHON=dh.PYTHON, DTRUN=str(dh.DTRUN))
    yield e
    subprocess.run(["scancel", "--user=root"], env=e, capture_output=True, timeout=30)
    dh.kill_marked(e["DTRUN_TEST_MARK"])


def slurm(args, env, **kwargs):
    """Runs a Slurm client (srun, sbatch...) to completion from the
    repository root, where batch jobs start too."""
    return subprocess.run(args, env=env, cwd=dh.SOURCE_DIR, capture_output=True, text=True,
                          timeout=SRUN_TIMEOUT, **kwargs)


def with_flags(flags: str, program: list) -> list:
    """A task that execs dtrun with `flags`, which may use the task's own
    Slurm variables ($SLURM_NODEID...): sh expands them on the node."""
    return ["sh", "-c", f'exec "$0" {flags} "$@"', str(dh.DTRUN), *map(str, program)]


def dtrun_task(mode: str, flags: str, program: list, extra=()) -> list:
    if mode == "flags":
        return with_flags(" ".join([flags, *extra]), program)
    return [str(dh.DTRUN), *extra, *map(str, program)]


AGENT_FLAGS = ("--nnodes=2 --node-rank=$SLURM_NODEID --rdzv-backend=c10d "
               "--rdzv-endpoint=node1:29400 --rdzv-id=$SLURM_JOB_ID-$SLURM_STEP_ID")
WORKER_FLAGS = ("--nnodes=$SLURM_NTASKS --node-rank=$SLURM_PROCID --nproc-per-node=1 "
                "--master-addr=node1 --master-port=29500")


def results(out, world=4):
    files = sorted(p.name for p in out.glob("rank*.json"))
    assert files == [f"rank{r}.json" for r in range(world)], files
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def check_agent_per_node(out):
    """4 ranks trained together; each node ran two of them, consecutive."""
    rs = results(out)
    for r in rs:
        assert r["world_size"] == 4, rs
        assert r["allreduce_sum"] == 10, rs
        assert r["local_rank"] == r["rank"] % 2, rs
    assert len({r["param_checksum"] for r in rs}) == 1, rs
    assert collections.Counter(r["host"] for r in rs) == {"node1": 2, "node2": 2}, rs
    assert rs[0]["host"] == rs[1]["host"] and rs[2]["host"] == rs[3]["host"], rs


def check_task_per_worker(out, local_ranks=True):
    """Rank r is Slurm task r: block distribution puts it on node r//2."""
    rs = results(out)
    for r in rs:
        assert r["world_size"] == 4, rs
        assert r["allreduce_sum"] == 10, rs
        assert r["host"] == f"node{r['rank'] // 2 + 1}", rs
        if local_ranks:
            assert r["local_rank"] == r["rank"] % 2, rs
    assert len({r["param_checksum"] for r in rs}) == 1, rs


def train(out):
    # The interpreter comes from DTRUN_PYTHON in the job's environment.
    return [EXAMPLE, "--out", out, *TRAIN]


# a. One agent per node, two workers each.
@pytest.mark.parametrize("mode", MODES)
def test_srun_one_agent_per_node(mode, env, tmp_path):
    task = dtrun_task(mode, AGENT_FLAGS, train(tmp_path), ["--nproc-per-node=2"])
    r = slurm(["srun", "-N2", "--ntasks-per-node=1", "--cpus-per-task=2", "--time=5", *task], env)
    assert r.returncode == 0, r.stderr
    check_agent_per_node(tmp_path)
    assert "rank 0 of 4" in r.stdout, r.stdout


# b. The same through sbatch and the example batch script.
def test_sbatch_agent_per_node_example(env, tmp_path):
    log = tmp_path / "job.out"
    out = tmp_path / "out"
    r = slurm(["sbatch", "--wait", f"--output={log}", "examples/slurm/agent-per-node.sbatch",
               "--out", str(out), *TRAIN], env)
    assert r.returncode == 0, f"{r.stderr}\n{log.read_text() if log.exists() else ''}"
    check_agent_per_node(out)
    assert "rank 0 of 4" in log.read_text()


def test_sbatch_with_explicit_flags(env, tmp_path):
    # The batch plumbing on its own: the script runs on node1, its srun
    # starts one dtrun per node. Workers dump their environment (no torch).
    task = with_flags(AGENT_FLAGS + " --nproc-per-node=2", [ENV_WORKER, tmp_path])
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/sh\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n"
                      "#SBATCH --time=5\n"
                      'echo "batch script on $(hostname)"\n'
                      f"exec srun {shlex.join(task)}\n")
    log = tmp_path / "job.out"
    r = slurm(["sbatch", "--wait", f"--output={log}", str(script)], env)
    assert r.returncode == 0, f"{r.stderr}\n{log.read_text() if log.exists() else ''}"
    assert "batch script on node1" in log.read_text()
    envs = [json.loads((tmp_path / f"rank{i}.json").read_text()) for i in range(4)]
    assert [e["WORLD_SIZE"] for e in envs] == ["4"] * 4
    assert collections.Counter(e["SLURMD_NODENAME"] for e in envs) == {"node1": 2, "node2": 2}


# c. One Slurm task per worker.
@pytest.mark.parametrize("mode", MODES)
def test_srun_one_task_per_worker(mode, env, tmp_path):
    task = dtrun_task(mode, WORKER_FLAGS, train(tmp_path))
    r = slurm(["srun", "-N2", "--ntasks-per-node=2", "--time=5", *task], env)
    assert r.returncode == 0, r.stderr
    # Explicit flags make every task a one-worker node: LOCAL_RANK is 0.
    check_task_per_worker(tmp_path, local_ranks=mode == "slurm")


def test_sbatch_task_per_worker_example(env, tmp_path):
    log = tmp_path / "job.out"
    out = tmp_path / "out"
    r = slurm(["sbatch", "--wait", f"--output={log}", "examples/slurm/task-per-worker.sbatch",
               "--out", str(out), *TRAIN], env)
    assert r.returncode == 0, f"{r.stderr}\n{log.read_text() if log.exists() else ''}"
    check_task_per_worker(out)


def start_signal_job(mode, env, fifo):
    """Two nodes, two signal-reporting workers each; returns srun and the
    job id once all four workers are ready."""
    extra = ["--nproc-per-node=2"]
    if mode == "flags":
        extra.append("--signals-to-handle=SIGTERM,SIGUSR1")
    task = dtrun_task(mode, AGENT_FLAGS, ["--python", dh.PYTHON, SIGNAL_WORKER, fifo.path], extra)
    srun = subprocess.Popen(["srun", "-N2", "--ntasks-per-node=1", "--time=5", *task], env=env,
                            cwd=dh.SOURCE_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        ready = fifo.lines(4, timeout=30)
        assert sorted(line.split()[1] for line in ready) == ["0", "1", "2", "3"], ready
    except AssertionError as e:
        os.killpg(srun.pid, signal.SIGKILL)  # srun and its helper, which holds the pipes
        raise AssertionError(f"{e}\nsrun: {srun.communicate(timeout=30)}") from None
    return srun, ready[0].split()[2]


# d. Preemption notice: SIGUSR1 to the job reaches every worker via dtrun.
@pytest.mark.parametrize("mode", MODES)
def test_scancel_signal_usr1_reaches_the_workers(mode, env, tmp_path):
    fifo = dh.Fifo(tmp_path)
    srun, job = start_signal_job(mode, env, fifo)
    with dh.cleaned_up(srun, env["DTRUN_TEST_MARK"]):
        cancel = slurm(["scancel", "--signal=USR1", job], env)
        assert cancel.returncode == 0, cancel.stderr
        got = sorted(fifo.lines(4, timeout=30))
        # "parent": dtrun sent it (the cluster's proctrack/pgid signals only
        # the task, i.e. dtrun; docs/slurm.md).
        assert got == [f"got SIGUSR1 {r} parent" for r in range(4)], got
        _, stderr = srun.communicate(timeout=SRUN_TIMEOUT)
        if mode == "slurm":
            # Forwarded, not a stop: the workers' own exit 0 is the job's.
            assert srun.returncode == 0, stderr
        # (With --signals-to-handle a forwarded signal also stops the group
        # and dtrun exits 128+10, as torchrun does: no exit code to assert.)
        assert dh.gone_within(env["DTRUN_TEST_MARK"]) == []


# e. scancel: dtrun stops its workers and nothing of the job survives.
@pytest.mark.parametrize("mode", MODES)
def test_scancel_stops_every_worker_on_every_node(mode, env, tmp_path):
    fifo = dh.Fifo(tmp_path)
    srun, job = start_signal_job(mode, env, fifo)
    with dh.cleaned_up(srun, env["DTRUN_TEST_MARK"]):
        cancel = slurm(["scancel", job], env)
        assert cancel.returncode == 0, cancel.stderr
        got = sorted(fifo.lines(4, timeout=30))
        assert got == [f"got SIGTERM {r} parent" for r in range(4)], got
        _, stderr = srun.communicate(timeout=SRUN_TIMEOUT)
        assert srun.returncode != 0
        # The agents stopped on SIGTERM (the tasks' stderr reaches srun's).
        # Slurm signals the two tasks independently: the second may already
        # be stopping because the first left (then it logs the group
        # restart), or be done when its signal lands; the FIFO above shows
        # that every worker got SIGTERM from its own dtrun either way.
        assert stderr.count("received SIGTERM") >= 1, stderr
        assert dh.gone_within(env["DTRUN_TEST_MARK"]) == []
