"""--preload (docs/agent.md, "Preload"): Python workers forked from a warm
interpreter that imported torch once, with real torch 1.13 workers. A
forked worker must see what a plain start shows a program (environment,
argv, sys.path, __main__, descriptors, signals, stdio, torch's threads),
end the way a plain one does (tracebacks, exit codes), be forked again on
a restart, and anything that goes wrong must fall back to a plain start
with one line."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

START_DUMP = Path(os.environ["DTRUN_SOURCE_DIR"]) / "tests" / "pyhelpers" / "start_dump.py"


def dtrun(tmp_path: Path, flags: list[str], program: list[str], cwd: Path | None = None,
          timeout: float = 60, nproc: int = 2, **env: str):
    """Runs a standalone job; returns (agent pid, completed run) after
    checking that no process of the job is left."""
    job_env = dh.job_env(**env)
    argv = [str(dh.DTRUN), "--standalone", f"--nproc-per-node={nproc}", "--python", dh.PYTHON,
            *flags, *program]
    proc = subprocess.Popen(argv, env=job_env, cwd=cwd or tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        running = [dh.describe_process(p) for p in dh.marked_pids(job_env["DTRUN_TEST_MARK"])]
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"dtrun did not end; running: {running}; its stderr:\n{err}")
    finally:
        proc.kill()
        left = dh.gone_within(job_env["DTRUN_TEST_MARK"])
        dh.kill_marked(job_env["DTRUN_TEST_MARK"])
    assert not left, f"left behind: {left}"
    return proc.pid, subprocess.CompletedProcess(argv, proc.returncode, out, err)


def normalised(dump: dict, agent: int) -> dict:
    """What must be equal between a plain and a preloaded start: the run's
    own names (folder, port, run id) and process ids become relations."""
    run_dir = dump["environ"]["TORCHELASTIC_ERROR_FILE"].split("/attempt_")[0]
    d = json.loads(json.dumps(dump).replace(run_dir, "<run>"))
    for key in ("DUMP_TO", "DTRUN_TEST_MARK", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        d["environ"].pop(key, None)
    d["fds"] = {fd: re.sub(r"pipe:\[\d+\]", "pipe", target) for fd, target in d["fds"].items()}
    pid = d.pop("pid")
    d["parent is the agent"] = d.pop("ppid") == agent
    d["own process group"] = d.pop("pgid") == pid
    d["own session"] = d.pop("sid") == pid
    for documented in ("preloaded", "hash", "random_state"):
        d.pop(documented)
    return d


def dumps(prefix: Path) -> list[dict]:
    return [json.loads(Path(f"{prefix}.{rank}.json").read_text()) for rank in (0, 1)]


@pytest.mark.parametrize("mode", ["script", "module"])
@pytest.mark.parametrize("output", ["console", "tee"])
def test_a_forked_worker_sees_what_a_plain_start_shows(tmp_path, mode, output):
    if mode == "script":
        program = [str(START_DUMP), "--lr", "3"]
    else:
        (tmp_path / "start_dump.py").write_text(START_DUMP.read_text())
        program = ["-m", "start_dump", "--lr", "3"]
    seen = {}
    for how in ("plain", "preload"):
        flags = ["--preload=torch"] if how == "preload" else []
        if output == "tee":
            flags += ["--tee=3", f"--log-dir={tmp_path / ('logs-' + how)}"]
        agent, r = dtrun(tmp_path, flags, program, DUMP_TO=str(tmp_path / how))
        assert r.returncode == 0, r.stderr
        assert "warning: --preload" not in r.stderr, r.stderr
        raw = dumps(tmp_path / how)
        # Proof of the fork: torch was there before the script imported it.
        assert [d["preloaded"] for d in raw] == ([["numpy", "torch"]] * 2 if how == "preload"
                                                 else [[], []])
        seen[how] = [normalised(d, agent) for d in raw]
        # torch's and numpy's random state is each worker's own, as an
        # import draws it (the warm interpreter's is drawn again).
        # (multiprocessing's authkey too.)
        for i in range(3):
            assert raw[0]["random_state"][i] != raw[1]["random_state"][i]
        if how == "preload":
            # Documented: the hash seed is the warm interpreter's, one per node.
            assert raw[0]["hash"] == raw[1]["hash"]
    for plain, forked in zip(seen["plain"], seen["preload"]):
        assert forked == plain
        assert forked["parent is the agent"] and forked["own process group"]
        assert forked["own session"]


def test_a_restart_forks_again_and_leaves_nothing(tmp_path):
    crash_once = tmp_path / "crash_once.py"
    crash_once.write_text(
        "import os, runpy, sys\n"
        "if os.environ['TORCHELASTIC_RESTART_COUNT'] == '0' and os.environ['RANK'] == '1':\n"
        "    os._exit(3)\n"
        f"runpy.run_path({str(START_DUMP)!r}, run_name='__main__')\n")
    agent, r = dtrun(tmp_path, ["--preload=torch,torch.distributed", "--max-restarts=1", "-v"],
                     [str(crash_once)], DUMP_TO=str(tmp_path / "round1"))
    assert r.returncode == 0, r.stderr
    assert "exited with code 3" in r.stderr
    for d in dumps(tmp_path / "round1"):
        assert d["environ"]["TORCHELASTIC_RESTART_COUNT"] == "1"
        assert d["preloaded"] == ["numpy", "torch"]
        assert d["ppid"] == agent
    # A new warm interpreter for each round (the last one's may not be
    # ready before the job ends).
    ready = re.findall(r"warm interpreter (\d+) ready", r.stderr)
    assert len(ready) >= 2 and len(set(ready)) == len(ready), r.stderr


def rank_files(log_dir: Path) -> dict:
    """Each rank's stderr, error file (its time removed) and exception
    note, by rank folder."""
    files = {}
    for path in sorted(log_dir.glob("*/attempt_0/*/*")):
        if path.name in ("stderr.log", "stdout.log", "error.json", "exception.txt"):
            text = re.sub(r'"timestamp": "\d+"', '"timestamp": "T"', path.read_text())
            files[f"{path.parent.name}/{path.name}"] = text
    return files


@pytest.mark.parametrize("body,code", [
    ("import torch\ndef main():\n    raise ValueError('boom')\nmain()\n", 1),
    ("from torch.distributed.elastic.multiprocessing.errors import record\n"
     "@record\ndef main():\n    raise KeyError('step')\nmain()\n", 1),
    ("import sys\nsys.exit(7)\n", 7),
    ("import sys\nsys.exit('bye')\n", 1),
    ("def broken(:\n", 1),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n", 143),
])
def test_the_program_ends_as_it_would_have(tmp_path, body, code):
    """Tracebacks (no frame of dtrun's), @record's error file, the hook's
    notes and exit codes, in the worker's own files (--redirects)."""
    script = tmp_path / "ends.py"
    script.write_text(body)
    seen = []
    for flags in ([], ["--preload=torch"]):
        log_dir = tmp_path / f"logs{len(seen)}"
        _, r = dtrun(tmp_path, [*flags, "--redirects=3", f"--log-dir={log_dir}"], [str(script)],
                     nproc=1)
        assert r.returncode == code, r.stderr
        seen.append(rank_files(log_dir))
    assert seen[1] == seen[0]
    assert "0/stderr.log" in seen[0]


def test_modules_that_cannot_be_forked_are_refused_and_workers_start_plainly(tmp_path):
    (tmp_path / "starts_thread.py").write_text(
        "import threading\nthreading.Thread(target=threading.Event().wait, daemon=True).start()\n")
    # Its throwaway fork's child hangs in an at-fork handler: waited for
    # 10 s, then killed, and the threads count as they were.
    (tmp_path / "hangs_at_fork.py").write_text(
        "import os, threading\n"
        "threading.Thread(target=threading.Event().wait, daemon=True).start()\n"
        "os.register_at_fork(after_in_child=lambda: threading.Event().wait())\n")
    (tmp_path / "fails.py").write_text("raise RuntimeError('no GPU here')\n")
    (tmp_path / "beside.py").write_text("VALUE = 42\n")
    # What torch.cuda.is_initialized() reads (no GPU here to initialise).
    (tmp_path / "inits_cuda.py").write_text("import torch.cuda\ntorch.cuda._initialized = True\n")
    script = tmp_path / "which.py"
    script.write_text(
        "import os, sys\n"
        "loaded = [m for m in ('starts_thread', 'hangs_at_fork', 'inits_cuda', 'fails', 'beside',\n"
        "                      'torch')\n"
        "          if m in sys.modules]\n"
        "open(os.environ['OUT'] + os.environ['RANK'], 'w').write(','.join(loaded))\n")
    cases = {
        "starts_thread": "warning: --preload: importing starts_thread left 2 threads running in "
                         "the warm interpreter, which cannot be forked safely; drop starts_thread "
                         "from --preload (or make it start no threads, e.g. "
                         "OMP_NUM_THREADS/OPENBLAS_NUM_THREADS=1); workers start without --preload",
        "hangs_at_fork": "warning: --preload: importing hangs_at_fork left 2 threads running in "
                         "the warm interpreter, which cannot be forked safely; drop hangs_at_fork "
                         "from --preload (or make it start no threads, e.g. "
                         "OMP_NUM_THREADS/OPENBLAS_NUM_THREADS=1); workers start without --preload",
        "inits_cuda": "warning: --preload: importing inits_cuda initialised CUDA in the warm "
                      "interpreter, which a forked worker cannot use; drop inits_cuda from "
                      "--preload; workers start without --preload",
        "fails": "warning: --preload: importing fails failed: RuntimeError: no GPU here; workers "
                 "start without --preload",
        "no_such_module": "warning: --preload: importing no_such_module failed: "
                          "ModuleNotFoundError: No module named 'no_such_module'; workers start "
                          "without --preload",
    }
    for module, line in cases.items():
        out = tmp_path / f"{module}-"
        _, r = dtrun(tmp_path, [f"--preload=torch,{module}"], [str(script)], OUT=str(out))
        assert r.returncode == 0, r.stderr
        assert r.stderr.count("warning:") == 1 and f"dtrun: {line}\n" in r.stderr, r.stderr
        # Plain starts: nothing imported before the script ran.
        assert [Path(f"{out}{rank}").read_text() for rank in (0, 1)] == ["", ""]
    # A module beside the script is found, as the script would find it.
    out = tmp_path / "beside-"
    _, r = dtrun(tmp_path, ["--preload=torch,beside"], [str(script)], OUT=str(out))
    assert r.returncode == 0 and "--preload" not in r.stderr, r.stderr
    assert [Path(f"{out}{rank}").read_text() for rank in (0, 1)] == ["beside,torch"] * 2


def test_threads_a_module_stops_at_fork_leave_the_interpreter_forkable(tmp_path):
    """A module whose threads stop at a fork and start again on its next
    use (as OpenBLAS's do, which numpy loads and torch imports): the warm
    interpreter forks once past them, and each worker starts them anew."""
    (tmp_path / "fork_aware_pool.py").write_text(
        "import os, threading\n"
        "_thread = None\n"
        "_stop = threading.Event()\n"
        "def use():\n"
        "    global _thread\n"
        "    if _thread is None:\n"
        "        _stop.clear()\n"
        "        _thread = threading.Thread(target=_stop.wait, daemon=True)\n"
        "        _thread.start()\n"
        "    return threading.active_count()\n"
        "def _stop_for_fork():\n"
        "    global _thread\n"
        "    if _thread is not None:\n"
        "        _stop.set()\n"
        "        _thread.join()\n"
        "        _thread = None\n"
        "use()\n"
        "os.register_at_fork(before=_stop_for_fork)\n")
    script = tmp_path / "pool.py"
    script.write_text(
        "import os, sys\n"
        "forked = 'fork_aware_pool' in sys.modules\n"
        "import fork_aware_pool\n"
        "open(os.environ['OUT'] + os.environ['RANK'], 'w').write(\n"
        "    '%s %d' % (forked, fork_aware_pool.use()))\n")
    out = tmp_path / "pool-"
    _, r = dtrun(tmp_path, ["--preload=torch,fork_aware_pool"], [str(script)], OUT=str(out))
    assert r.returncode == 0 and "--preload" not in r.stderr, r.stderr
    assert [Path(f"{out}{rank}").read_text() for rank in (0, 1)] == ["True 2"] * 2


def test_a_killed_warm_interpreter_is_replaced(tmp_path):
    """The warm interpreter waiting for the next round dies: one line, and
    the restart still forks its workers from a new one."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    script = tmp_path / "gated.py"
    script.write_text(
        "import os, sys\n"
        "out = os.environ['OUT'] + os.environ['TORCHELASTIC_RESTART_COUNT'] + os.environ['RANK']\n"
        "open(out, 'w').write(str('torch' in sys.modules))\n"
        "if os.environ['TORCHELASTIC_RESTART_COUNT'] == '0' and os.environ['RANK'] == '1':\n"
        f"    open({str(gate)!r}).read()\n"
        "    os._exit(5)\n")
    env = dh.job_env(OUT=str(tmp_path / "r"))
    proc = dh.start(["--standalone", "--nproc-per-node=2", "--python", dh.PYTHON,
                     "--preload=torch", "--max-restarts=1", "-v", str(script)], env)
    with dh.cleaned_up(proc, env["DTRUN_TEST_MARK"]):
        # The first round's workers are forked; its successor is the one waiting.
        seen = dh.wait_for_stderr(proc, "ready in", timeout=60)
        seen += dh.wait_for_stderr(proc, "ready in", timeout=60)
        successor = int(re.findall(r"warm interpreter (\d+) ready", seen)[-1])
        os.kill(successor, signal.SIGKILL)
        seen += dh.wait_for_stderr(proc, "starting another", timeout=60)
        with open(gate, "w") as g:
            g.write("go")
        _, rest = proc.communicate(timeout=120)
    stderr = seen + rest
    assert proc.returncode == 0, stderr
    assert ("dtrun: warning: --preload: the warm interpreter was killed by signal 9 (SIGKILL); "
            "starting another (its output: " in stderr), stderr
    assert [(tmp_path / f"r1{rank}").read_text() for rank in (0, 1)] == ["True", "True"]


def test_dry_run_and_pet_preload_show_the_modules(tmp_path):
    r = dh.run(["--standalone", "--dry-run", "--preload=torch,numpy", "x.py"])
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["preload"] == ["torch", "numpy"]
    r = dh.run(["--standalone", "--dry-run", "x.py"], env=dh.job_env(PET_PRELOAD="torch"))
    assert json.loads(r.stdout)["preload"] == ["torch"]
    assert json.loads(dh.run(["--standalone", "--dry-run", "x.py"]).stdout)["preload"] == []


@pytest.mark.parametrize("flags,line", [
    (["--preload=torch", "--no-python"],
     "--preload forks Python workers; it cannot be used with --no-python"),
    (["--preload=torch", "--no-stack-hook"],
     "--preload needs dtrun's start-up hook in the workers; drop --no-stack-hook"),
    (["--preload=torch,,numpy"], "--preload: an empty module name; give modules such as "
                                 "torch,torch.distributed (comma-separated)"),
])
def test_unusable_preload_flags_are_one_line_and_exit_2(flags, line):
    r = dh.run(["--standalone", *flags, "x.py"])
    assert r.returncode == 2
    assert line in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_each_worker_gets_its_own_templated_arguments(tmp_path):
    """The warm interpreter was started with the arguments as written; each
    forked worker's sys.argv is its own ({rank} templates)."""
    script = tmp_path / "args.py"
    script.write_text("import os, sys\n"
                      "open(os.environ['OUT'] + os.environ['RANK'], 'w').write(' '.join(\n"
                      "    sys.argv[1:] + sys.orig_argv[3:]))\n")
    _, r = dtrun(tmp_path, ["--preload=torch", "--template-args"],
                 [str(script), "--rank={rank}", "--of={world_size}"], OUT=str(tmp_path / "a"))
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    assert [(tmp_path / f"a{rank}").read_text() for rank in (0, 1)] == [
        f"--rank={rank} --of=2 --rank={rank} --of=2" for rank in (0, 1)]


def test_dtrun_preload_in_the_callers_environment_does_not_reach_workers(tmp_path):
    """Only the warm interpreter is started with DTRUN_PRELOAD: a value in
    dtrun's own environment must not turn plain workers into warm
    interpreters (they would wait for requests instead of training)."""
    script = tmp_path / "plain.py"
    script.write_text("import os, sys\n"
                      "open(os.environ['OUT'] + os.environ['RANK'], 'w').write(\n"
                      "    str('torch' in sys.modules) + os.environ.get('DTRUN_PRELOAD', '-'))\n")
    _, r = dtrun(tmp_path, [], [str(script)], OUT=str(tmp_path / "p"), DTRUN_PRELOAD="torch")
    assert r.returncode == 0, r.stderr
    assert [(tmp_path / f"p{rank}").read_text() for rank in (0, 1)] == ["False-", "False-"]
