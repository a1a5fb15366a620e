"""torchrun 2.x flags and worker-contract details, end to end with real
dtrun runs and real Python workers (/usr/bin/python3):

--virtual-local-rank, the ${local_rank} macro, --duplicate-std{out,err}-
filters, --event-log-handler, --logs-specs, TORCH_ELASTIC_SHUTDOWN_TIMEOUT
and PYTHON_EXEC. Each test asserts what the workers saw or wrote, what
dtrun printed, and its exit code.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

# Writes what the worker saw to <out>/rank<RANK>.json: the variables that
# matter here and its arguments (argv[0] is the script as it was run).
REPORT_WORKER = r"""
import json, os, sys
out = sys.argv[1]
keys = ["LOCAL_RANK", "RANK", "CUDA_VISIBLE_DEVICES", "WRAPPED_BY"]
with open(os.path.join(out, f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump({"env": {k: os.environ.get(k) for k in keys}, "argv": sys.argv}, f)
"""


def write_worker(tmp_path: Path, text: str = REPORT_WORKER, name: str = "worker.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def reports(out: Path, nproc: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


def env_without(*names: str, **extra: str) -> dict[str, str]:
    env = dh.job_env()
    for name in names:
        env.pop(name, None)
    env.update(extra)
    return env


# --- --virtual-local-rank -------------------------------------------------

@pytest.mark.parametrize("flag", ["--virtual-local-rank", "--virtual_local_rank"])
def test_virtual_local_rank_maps_the_parents_devices(tmp_path, flag):
    worker = write_worker(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    r = dh.run(["--standalone", "--nproc-per-node=3", flag, "--python", dh.PYTHON,
                str(worker), str(out), "--gpu=${local_rank}"],
               env=dh.job_env(CUDA_VISIBLE_DEVICES="4, 5,GPU-abc"))
    assert r.returncode == 0, r.stderr
    seen = reports(out, 3)
    assert [s["env"]["LOCAL_RANK"] for s in seen] == ["0", "0", "0"]
    assert [s["env"]["CUDA_VISIBLE_DEVICES"] for s in seen] == ["4", "5", "GPU-abc"]
    # The macro takes the real local rank, as torchrun's does.
    assert [s["argv"][2] for s in seen] == ["--gpu=0", "--gpu=1", "--gpu=2"]


def test_virtual_local_rank_without_a_parent_list_uses_the_local_rank(tmp_path):
    worker = write_worker(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    r = dh.run(["--standalone", "--nproc-per-node=2", "--python", dh.PYTHON, str(worker),
                str(out)],
               env=env_without("CUDA_VISIBLE_DEVICES", PET_VIRTUAL_LOCAL_RANK="1"))
    assert r.returncode == 0, r.stderr
    seen = reports(out, 2)
    assert [(s["env"]["LOCAL_RANK"], s["env"]["CUDA_VISIBLE_DEVICES"]) for s in seen] == [
        ("0", "0"), ("0", "1")]


def test_without_virtual_local_rank_the_devices_are_inherited(tmp_path):
    worker = write_worker(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    r = dh.run(["--standalone", "--nproc-per-node=2", "--python", dh.PYTHON, str(worker),
                str(out)], env=dh.job_env(CUDA_VISIBLE_DEVICES="2,3"))
    assert r.returncode == 0, r.stderr
    seen = reports(out, 2)
    assert [(s["env"]["LOCAL_RANK"], s["env"]["CUDA_VISIBLE_DEVICES"]) for s in seen] == [
        ("0", "2,3"), ("1", "2,3")]


def test_virtual_local_rank_with_too_few_devices_is_a_usage_error(tmp_path):
    worker = write_worker(tmp_path)
    r = dh.run(["--standalone", "--nproc-per-node=3", "--virtual-local-rank", "--python",
                dh.PYTHON, str(worker), str(tmp_path)],
               env=dh.job_env(CUDA_VISIBLE_DEVICES="0,1"))
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "dtrun: error: --virtual-local-rank: local rank 2 has no device of its own: "
        "CUDA_VISIBLE_DEVICES='0,1' lists 2; run at most 2 worker(s) per node or list more "
        "devices"]
    assert not list(tmp_path.glob("rank*.json"))  # nothing started


def test_dry_run_shows_the_virtual_environment():
    r = dh.run(["--dry-run", "--standalone", "--nproc-per-node=2", "--virtual-local-rank",
                "train.py", "--rank-dir=r${local_rank}"],
               env=dh.job_env(CUDA_VISIBLE_DEVICES="6,7"))
    assert r.returncode == 0, r.stderr
    workers = json.loads(r.stdout)["workers"]
    assert [(w["env"]["LOCAL_RANK"], w["env"]["CUDA_VISIBLE_DEVICES"]) for w in workers] == [
        ("0", "6"), ("0", "7")]
    assert [w["argv"][-1] for w in workers] == ["--rank-dir=r0", "--rank-dir=r1"]


# --- ${local_rank} ---------------------------------------------------------

def test_local_rank_macro_is_replaced_in_every_argument(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    # Also in the script's path, as torchrun substitutes all of [-u, script, args].
    (tmp_path / "w0.py").write_text(REPORT_WORKER)
    (tmp_path / "w1.py").write_text(REPORT_WORKER)
    r = dh.run(["--standalone", "--nproc-per-node=2", "--python", dh.PYTHON,
                str(tmp_path / "w${local_rank}.py"), str(out), "--out=o$local_rank",
                "${local_rank}${local_rank}", "$local_rankX", "{local_rank}", "pid$$",
                "$${local_rank}"])
    assert r.returncode == 0, r.stderr
    for local_rank, seen in enumerate(reports(out, 2)):
        assert seen["argv"] == [str(tmp_path / f"w{local_rank}.py"), str(out),
                                f"--out=o{local_rank}", f"{local_rank}{local_rank}",
                                "$local_rankX", "{local_rank}", "pid$$", "$${local_rank}"]


def test_local_rank_macro_with_no_python_leaves_the_program_alone(tmp_path):
    worker = write_worker(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    r = dh.run(["--standalone", "--nproc-per-node=2", "--no-python", dh.PYTHON, str(worker),
                str(out), "--shard=${local_rank}"])
    assert r.returncode == 0, r.stderr
    assert [s["argv"][2] for s in reports(out, 2)] == ["--shard=0", "--shard=1"]


# --- --duplicate-std{out,err}-filters --------------------------------------

PRINT_WORKER = r"""
import os
r = os.environ["LOCAL_RANK"]
for fd, text in [(1, f"loss {r}\n"), (1, f"step {r}\n"), (2, f"Error {r}\n"), (2, f"warn {r}\n"),
                 (1, f"a,b {r}\n"), (1, f"last loss {r}")]:
    os.write(fd, text.encode())
"""


def run_dir(log_dir: Path) -> Path:
    runs = list(log_dir.glob("dup_*"))
    assert len(runs) == 1, runs
    return runs[0]


def lines_by_rank(data: str) -> dict[str, list[str]]:
    by_rank: dict[str, list[str]] = {}
    for line in data.splitlines():
        prefix, _, rest = line.partition("]:")
        by_rank.setdefault(prefix + "]:", []).append(rest)
    return by_rank


@pytest.mark.parametrize("spelling", ["-", "_"])
def test_duplicate_filters_copy_teed_lines_to_the_attempt_files(tmp_path, spelling):
    worker = write_worker(tmp_path, PRINT_WORKER)
    r = dh.run(["--nnodes=1", "--rdzv-id=dup", "--nproc-per-node=2", "--tee=3",
                f"--log-dir={tmp_path / 'logs'}",
                f"--duplicate{spelling}stdout{spelling}filters=loss,a,,b",
                f"--duplicate{spelling}stderr{spelling}filters=Error",
                "--no-python", dh.PYTHON, str(worker)])
    assert r.returncode == 0, r.stderr
    attempt = run_dir(tmp_path / "logs") / "attempt_0"
    filtered_out = (attempt / "filtered_stdout.log").read_text()
    filtered_err = (attempt / "filtered_stderr.log").read_text()
    assert lines_by_rank(filtered_out) == {
        f"[default{r}]:": [f"loss {r}", f"a,b {r}", f"last loss {r}"] for r in range(2)}
    assert lines_by_rank(filtered_err) == {f"[default{r}]:": [f"Error {r}"] for r in range(2)}
    # The console and the per-rank files still get everything.
    assert lines_by_rank(r.stdout)["[default1]:"] == ["loss 1", "step 1", "a,b 1", "last loss 1"]
    assert (attempt / "0" / "stdout.log").read_text() == "loss 0\nstep 0\na,b 0\nlast loss 0"


def test_duplicate_filters_follow_the_local_ranks_filter(tmp_path):
    worker = write_worker(tmp_path, PRINT_WORKER)
    r = dh.run(["--nnodes=1", "--rdzv-id=dup", "--nproc-per-node=2", "--tee=1",
                "--local-ranks-filter=1", f"--log-dir={tmp_path / 'logs'}",
                "--duplicate-stdout-filters=loss", "--no-python", dh.PYTHON, str(worker)],
               env=dh.job_env(PET_DUPLICATE_STDERR_FILTERS="Error"))
    assert r.returncode == 0, r.stderr
    attempt = run_dir(tmp_path / "logs") / "attempt_0"
    assert (attempt / "filtered_stdout.log").read_text() == "[default1]:loss 1\n[default1]:last loss 1\n"
    # stderr is not tee'd: the file is there, empty, and dtrun said why.
    assert (attempt / "filtered_stderr.log").read_text() == ""
    assert ("dtrun: warning: --duplicate-stderr-filters copies lines of tee'd streams only, and "
            "no local rank shown on the console tees its stderr; add --tee=2 (or 3)") in r.stderr


# --- --event-log-handler, --logs-specs, TORCH_ELASTIC_SHUTDOWN_TIMEOUT -----

def events_in(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def test_console_event_handler_writes_the_event_log_to_stderr(tmp_path):
    worker = write_worker(tmp_path, "print('hi')\n")
    r = dh.run(["--standalone", "--event_log_handler=console", "--logs-specs=default",
                "--no-python", dh.PYTHON, str(worker)],
               env=env_without("PET_SHUTDOWN_TIMEOUT", TORCH_ELASTIC_SHUTDOWN_TIMEOUT="120"))
    assert r.returncode == 0, r.stderr
    events = events_in(r.stderr)
    assert [e["event"] for e in events][0] == "agent_started"
    assert events[-1]["event"] == "agent_exiting"
    assert "job_succeeded" in [e["event"] for e in events]
    # TORCH_ELASTIC_SHUTDOWN_TIMEOUT is the stop timeout the agent runs with.
    assert events[0]["stop_timeout_ms"] == 120000


@pytest.mark.parametrize("handler", ["null", "dynamic_rendezvous"])
def test_null_event_handlers_write_nothing(tmp_path, handler):
    worker = write_worker(tmp_path, "print('hi')\n")
    r = dh.run(["--standalone", f"--event-log-handler={handler}", "--no-python", dh.PYTHON,
                str(worker)])
    assert r.returncode == 0, r.stderr
    assert events_in(r.stderr) == []


@pytest.mark.parametrize("args, env, message", [
    (["--event-log-handler=scuba"], {},
     "dtrun: error: --event-log-handler=scuba: event handlers are Python objects "
     "(torch.distributed.elastic.events) that dtrun cannot load; it knows null, console and "
     "dynamic_rendezvous: use --event-log=FILE (or --event-log=- for stderr) for dtrun's JSON "
     "events"),
    ([], {"PET_EVENT_LOG_HANDLER": "mine"},
     "dtrun: error: --event-log-handler=mine: event handlers are Python objects"),
    (["--logs_specs=custom"], {},
     "dtrun: error: --logs-specs=custom: logs specs are Python entry points "
     "(torchrun.logs_specs) that dtrun cannot load; only 'default' exists here: use --log-dir, "
     "--redirects, --tee and --local-ranks-filter instead"),
    ([], {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "soon"},
     "dtrun: error: TORCH_ELASTIC_SHUTDOWN_TIMEOUT: 'soon' is not a number of seconds from 0 "
     "to 315360000 (10 years)"),
])
def test_unknown_plugin_names_and_bad_timeouts_are_usage_errors(tmp_path, args, env, message):
    r = dh.run(["--standalone", *args, "--no-python", "/bin/true"], env=dh.job_env(**env))
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(message)


def test_shutdown_timeout_precedence_in_the_dry_run():
    def stop_timeout(args, **env):
        r = dh.run(["--dry-run", "--standalone", *args, "x.py"],
                   env=env_without("PET_SHUTDOWN_TIMEOUT", "PET_STOP_TIMEOUT",
                                   "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", **env))
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["stop_timeout_s"]

    assert stop_timeout([]) == 30
    assert stop_timeout([], TORCH_ELASTIC_SHUTDOWN_TIMEOUT="600") == 600
    assert stop_timeout([], TORCH_ELASTIC_SHUTDOWN_TIMEOUT="600", PET_SHUTDOWN_TIMEOUT="60") == 60
    assert stop_timeout(["--shutdown-timeout=5"], TORCH_ELASTIC_SHUTDOWN_TIMEOUT="600") == 5


# --- PYTHON_EXEC -------------------------------------------------------------

def make_wrapper(tmp_path: Path, name: str) -> Path:
    """An interpreter that marks its workers, then runs the real Python."""
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\nWRAPPED_BY={name} exec {dh.PYTHON} \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_python_exec_is_the_interpreter_after_dtrun_python(tmp_path):
    worker = write_worker(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    exec_python = make_wrapper(tmp_path, "exec_python")
    dtrun_python = make_wrapper(tmp_path, "dtrun_python")
    r = dh.run(["--standalone", str(worker), str(out)],
               env=env_without("DTRUN_PYTHON", PYTHON_EXEC=str(exec_python)))
    assert r.returncode == 0, r.stderr
    assert reports(out, 1)[0]["env"]["WRAPPED_BY"] == "exec_python"
    r = dh.run(["--standalone", str(worker), str(out)],
               env=dh.job_env(PYTHON_EXEC=str(exec_python), DTRUN_PYTHON=str(dtrun_python)))
    assert r.returncode == 0, r.stderr
    assert reports(out, 1)[0]["env"]["WRAPPED_BY"] == "dtrun_python"
    r = dh.run(["--standalone", "--python", dh.PYTHON, str(worker), str(out)],
               env=dh.job_env(PYTHON_EXEC=str(exec_python)))
    assert r.returncode == 0, r.stderr
    assert reports(out, 1)[0]["env"]["WRAPPED_BY"] is None


def test_help_lists_the_torchrun_2_flags():
    r = dh.run(["--help"])
    assert r.returncode == 0
    for flag in ("--virtual-local-rank", "--duplicate-stdout-filters",
                 "--duplicate-stderr-filters", "--event-log-handler", "--logs-specs",
                 "--shutdown-timeout", "--local-addr", "--master-port", "PYTHON_EXEC",
                 "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"):
        assert flag in r.stdout, flag


def test_an_interpreter_that_is_not_found_names_where_it_came_from(tmp_path):
    # A stray PYTHON_EXEC (torchrun's variable) is not obvious to the user:
    # the one-line error says it chose the interpreter.
    for args, env, source in (
            ([], env_without("DTRUN_PYTHON", PYTHON_EXEC="no-such-python-x"), "PYTHON_EXEC"),
            ([], dh.job_env(DTRUN_PYTHON="no-such-python-x"), "DTRUN_PYTHON"),
            (["--python", "no-such-python-x"], dh.job_env(), "--python")):
        r = dh.run(["--standalone", *args, "x.py"], env=env)
        assert r.returncode == 127, r.stderr
        lines = r.stderr.strip().splitlines()
        assert lines == [f"dtrun: error: Python interpreter 'no-such-python-x' (from {source}) "
                         "not found on PATH; pass --python=/path/to/python or set DTRUN_PYTHON"]


def test_exit_barrier_timeout_is_a_flag_that_wins_over_rdzv_conf():
    # dtrun's own flag for torchrun's proposed one (pytorch#195543).
    def barrier(*flags, env=None):
        r = dh.run(["--nnodes=2", "--rdzv-endpoint=node1:29400", *flags, "--dry-run", "t.py"],
                   env=env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["rendezvous"]["exit_barrier_timeout_s"]

    assert barrier() == 300
    assert barrier("--rdzv-conf=exit_barrier_timeout=20") == 20
    assert barrier("--rdzv-conf=exit_barrier_timeout=20", "--exit-barrier-timeout=7.5") == 7.5
    assert barrier(env=dh.job_env(PET_EXIT_BARRIER_TIMEOUT="9")) == 9
    r = dh.run(["--nnodes=2", "--rdzv-endpoint=n:1", "--exit-barrier-timeout=0", "t.py"])
    assert r.returncode == 2 and "--exit-barrier-timeout" in r.stderr, r.stderr


def test_node_rank_with_a_dynamic_backend_is_warned_about(tmp_path):
    # As torchrun 2.13 (pytorch#182374): the rendezvous assigns the ranks.
    port = dh.free_port()
    r = dh.run(["--nnodes=1", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-conf=is_host=1",
                "--node-rank=1", "--no-python", "/bin/true"])
    assert r.returncode == 0, r.stderr
    assert ("dtrun: warning: --node-rank=1 has no effect with --rdzv-backend=c10d: the "
            "rendezvous assigns each node's rank (only the static backend takes --node-rank)"
            ) in r.stderr.splitlines()
    quiet = dh.run(["--nnodes=1", f"--rdzv-endpoint=127.0.0.1:{dh.free_port()}",
                    "--rdzv-conf=is_host=1", "--no-python", "/bin/true"])
    assert quiet.returncode == 0 and "--node-rank" not in quiet.stderr, quiet.stderr
