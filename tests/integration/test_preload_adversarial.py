"""--preload (docs/agent.md, "Preload") against modules and events that try
to break it: a module that reads, closes or replaces stdin while
importing, one that changes the environment or the folder, a warm
interpreter that dies in the middle of a round's requests. Each must end
as a plain start would, or fall back to one with one line; no process is
left behind (test_preload.dtrun checks it after every run)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
from test_preload import dtrun  # noqa: E402


RECORD = (
    "import os, sys\n"
    "line = '%s %s %s %s\\n' % (os.environ.get('TORCHELASTIC_RESTART_COUNT', '-'),\n"
    "    os.environ.get('RANK', 'no-rank'), os.getpid(), 'm' in sys.modules)\n"
    "fd = os.open(os.environ['OUT'], os.O_WRONLY | os.O_APPEND | os.O_CREAT)\n"
    "os.write(fd, line.encode())\n")


def records(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("body", [
    "import sys\nsys.stdin.read()\n",
    "import os\nos.close(0)\n",
    "import os\nos.dup2(os.open(os.devnull, os.O_RDONLY), 0)\n",
])
def test_a_module_that_reads_closes_or_replaces_stdin_is_preloaded(tmp_path, body):
    """The warm interpreter's socket was its fd 0: a module reading stdin
    waited on it for ever (and the first round for the module), and one
    that closed or replaced fd 0 made the hook fail, after which Python's
    start-up ran the training script in the warm interpreter itself, a
    process with no RANK, twice (it was replaced once)."""
    (tmp_path / "m.py").write_text(body)
    script = tmp_path / "record.py"
    script.write_text(RECORD)
    out = tmp_path / "out"
    _, r = dtrun(tmp_path, ["--preload=m"], [str(script)], OUT=str(out))
    assert r.returncode == 0, r.stderr
    assert "--preload" not in r.stderr, r.stderr
    assert sorted((rank, preloaded) for _, rank, _, preloaded in records(out)) == [
        ("0", "True"), ("1", "True")]


def test_a_warm_interpreter_whose_hook_fails_never_runs_the_script(tmp_path):
    """A module that closes every descriptor it did not open takes the
    agent's socket too: the warm interpreter exits (and --preload is off
    after a second one did), it does not go on to run the script."""
    (tmp_path / "m.py").write_text("import os\nos.closerange(3, 1 << 20)\n")
    script = tmp_path / "record.py"
    script.write_text(RECORD)
    out = tmp_path / "out"
    _, r = dtrun(tmp_path, ["--preload=m"], [str(script)], OUT=str(out))
    assert r.returncode == 0, r.stderr
    assert "workers start without --preload" in r.stderr, r.stderr
    assert sorted(rank for _, rank, _, _ in records(out)) == ["0", "1"]


@pytest.mark.parametrize("at,when", [
    (1, "after_in_parent"),  # forked rank 0, died before telling the agent its pid
    (2, "before"),           # between the round's two requests
    (3, "before"),           # asked for its successor ("next")
])
def test_a_warm_interpreter_that_dies_during_a_round_is_replaced(tmp_path, at, when):
    """A warm interpreter that died while the agent was asking it for the
    round's workers turned --preload off for the rest of the job ('did not
    answer'), unlike one that dies between rounds; and a worker it had
    forked but not told the agent of went on as a second rank 0 beside the
    plain one the agent started instead."""
    once = tmp_path / "killed"
    (tmp_path / "m.py").write_text(
        "import os, signal\n"
        "forks = [0]\n"
        "def maybe_die():\n"
        "    forks[0] += 1\n"
        f"    if forks[0] == {at} and not os.path.exists({str(once)!r}):\n"
        f"        open({str(once)!r}, 'w').close()\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        f"os.register_at_fork({when}=maybe_die)\n")
    script = tmp_path / "record.py"
    script.write_text(RECORD + "if os.environ['TORCHELASTIC_RESTART_COUNT'] == '0' and "
                               "os.environ['RANK'] == '1':\n    sys.exit(4)\n")
    out = tmp_path / "out"
    _, r = dtrun(tmp_path, ["--preload=m", "--max-restarts=1"], [str(script)], OUT=str(out))
    assert r.returncode == 0, r.stderr
    assert once.exists()
    assert ("dtrun: warning: --preload: the warm interpreter was killed by signal 9 (SIGKILL); "
            "starting another (its output: ") in r.stderr, r.stderr
    assert "without --preload" not in r.stderr, r.stderr
    seen = records(out)
    ranks = [(restart, rank) for restart, rank, _, _ in seen]
    assert len(ranks) == len(set(ranks)), seen  # each rank of a round ran once
    # The restart's workers are forked from the warm interpreter that replaced it.
    assert sorted((rank, preloaded) for restart, rank, _, preloaded in seen
                  if restart == "1") == [("0", "True"), ("1", "True")], seen


def test_what_importing_changes_in_the_environment_and_folder_the_worker_sees(tmp_path):
    """A plain start's worker runs the module's import itself and keeps
    what it set in os.environ and the folder it chose; a forked worker was
    given the agent's environment and folder over the warm interpreter's."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "m.py").write_text(
        "import os\n"
        "os.environ['SET_BY_M'] = 'yes'\n"
        "os.environ.setdefault('DEFAULTED_BY_M', 'default')\n"
        "del os.environ['REMOVED_BY_M']\n"
        f"os.chdir({str(tmp_path / 'elsewhere')!r})\n")
    script = tmp_path / "seen.py"
    script.write_text(
        "import os, sys\n"
        "import m\n"
        "names = ('SET_BY_M', 'DEFAULTED_BY_M', 'REMOVED_BY_M', 'KEPT')\n"
        "seen = [os.environ.get(n, '-') for n in names] + [os.getcwd(), str('m' in sys.modules)]\n"
        "open(os.environ['OUT'] + os.environ['RANK'], 'w').write(' '.join(seen))\n")
    seen = {}
    for how, flags in (("plain", []), ("preload", ["--preload=m"])):
        out = tmp_path / how
        _, r = dtrun(tmp_path, flags, [str(script)], OUT=str(out), REMOVED_BY_M="x", KEPT="k")
        assert r.returncode == 0 and "--preload" not in r.stderr, r.stderr
        seen[how] = [(tmp_path / f"{how}{rank}").read_text() for rank in (0, 1)]
    assert seen["plain"] == [f"yes default - k {tmp_path / 'elsewhere'} True"] * 2
    assert seen["preload"] == seen["plain"]


def test_a_closed_stdin_is_not_replaced_by_a_descriptor_of_the_agents(tmp_path):
    """`dtrun ... <&-`: the check that a forked worker would inherit a
    closed stdin looked at the agent's fd 0 when the workers start, by
    when the agent had reused it for a descriptor of its own (asio's
    eventfd); the forked worker got that as its stdin (a read of stdin
    took the agent's wake-ups, or blocked for ever). dtrun's descriptors
    are now read as they were when it started: the workers start plainly,
    with one line, and see what a plain start sees."""
    script = tmp_path / "stdin.py"
    script.write_text("import os\n"
                      "open(os.environ['OUT'] + os.environ['RANK'], 'w').write(\n"
                      "    os.readlink('/proc/self/fd/0') if os.path.exists('/proc/self/fd/0')\n"
                      "    else 'closed')\n")
    closing = ["/bin/sh", "-c", 'exec "$@" <&-', "sh"]
    seen = {}
    for how, flags in (("plain", []), ("preload", ["--preload=json"])):
        env = dh.job_env(OUT=str(tmp_path / how))
        r = subprocess.run([*closing, str(dh.DTRUN), "--standalone", "--nproc-per-node=2",
                            "--python", dh.PYTHON, *flags, str(script)], env=env,
                           capture_output=True, text=True, timeout=60)
        left = dh.gone_within(env["DTRUN_TEST_MARK"])
        dh.kill_marked(env["DTRUN_TEST_MARK"])
        assert not left, left
        assert r.returncode == 0, r.stderr
        run_dir = re.compile(r"^/tmp/[^/]+/")
        seen[how] = [run_dir.sub("<run>/", (tmp_path / f"{how}{rank}").read_text())
                     for rank in (0, 1)]
        if how == "preload":
            assert r.stderr == ("dtrun: warning: --preload: dtrun's descriptor 0 is closed; "
                                "workers that inherit it start without --preload\n"), r.stderr
    assert seen["preload"] == seen["plain"]
    assert not any(s.startswith(("anon_inode:", "socket:", "pipe:")) for s in seen["preload"])


def test_a_warm_interpreter_started_in_a_removed_folder_still_serves(tmp_path):
    """The folder dtrun runs in is removed during the job, then the warm
    interpreter dies: the one that replaces it starts in a folder that no
    longer exists (getcwd fails there), and must serve all the same, as a
    plain start runs there."""
    job = tmp_path / "job"
    job.mkdir()
    (tmp_path / "m.py").write_text("VALUE = 1\n")
    script = tmp_path / "remove.py"
    script.write_text(
        RECORD +
        "import shutil\n"
        "if os.environ['TORCHELASTIC_RESTART_COUNT'] == '0':\n"
        "    if os.environ['RANK'] == '0':\n"
        "        shutil.rmtree(os.environ['JOB'])\n"
        "        # The next round's warm interpreter (our parent's successor):\n"
        "        # the agent's other child that shows DTRUN_PRELOAD (the only\n"
        "        # worker is this one, which shows it too: docs/agent.md).\n"
        "        for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "            try:\n"
        "                stat = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()\n"
        "                environ = open(f'/proc/{pid}/environ', 'rb').read().split(b'\\0')\n"
        "            except OSError:\n"
        "                continue\n"
        "            if (int(stat[1]) == os.getppid() and int(pid) != os.getpid()\n"
        "                    and b'DTRUN_PRELOAD=m' in environ):\n"
        "                os.kill(int(pid), 9)\n"
        "    sys.exit(4)\n")
    out = tmp_path / "out"
    _, r = dtrun(tmp_path, ["--preload=m", "--max-restarts=1"], [str(script)], cwd=job,
                 nproc=1, OUT=str(out), JOB=str(job), PYTHONPATH=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "starting another" in r.stderr and "without --preload" not in r.stderr, r.stderr
    assert [(restart, preloaded) for restart, _, _, preloaded in records(out)] == [
        ("0", "True"), ("1", "True")], r.stderr


def test_an_environment_larger_than_a_socket_buffer_is_forked_whole(tmp_path):
    """A request carries the worker's environment in one SOCK_SEQPACKET
    message, which failed (EMSGSIZE: 'Message too long', --preload turned
    off) past the socket's default send buffer, about 208 KiB; exec takes
    environments up to ARG_MAX (2 MiB). Three variables of 100 KB each."""
    big = {f"BIG{i}": str(i) * 100_000 for i in range(3)}
    script = tmp_path / "big.py"
    script.write_text(RECORD + "assert all(os.environ[f'BIG{i}'] == str(i) * 100_000\n"
                               "           for i in range(3))\n")
    (tmp_path / "m.py").write_text("")
    out = tmp_path / "out"
    _, r = dtrun(tmp_path, ["--preload=m"], [str(script)], OUT=str(out), **big)
    assert r.returncode == 0, r.stderr
    assert "--preload" not in r.stderr, r.stderr
    assert sorted((rank, preloaded) for _, rank, _, preloaded in records(out)) == [
        ("0", "True"), ("1", "True")]


def test_a_successor_that_an_at_fork_handler_gave_a_thread_is_refused(tmp_path):
    """The warm interpreter is checked for threads after the import, but
    a module's os.register_at_fork(after_in_child=...) runs in its forked
    successor too: one that starts a thread there made the next round's
    workers forks of a threaded process (what the check refuses). Now the
    successor is checked the same way: one line, the restart starts
    plainly."""
    (tmp_path / "m.py").write_text(
        "import os, threading\n"
        "os.register_at_fork(after_in_child=lambda: threading.Thread(\n"
        "    target=threading.Event().wait, daemon=True).start())\n")
    script = tmp_path / "record.py"
    script.write_text(RECORD + "if os.environ['TORCHELASTIC_RESTART_COUNT'] == '0':\n"
                               "    sys.exit(4)\n")
    out = tmp_path / "out"
    _, r = dtrun(tmp_path, ["--preload=m", "--max-restarts=1"], [str(script)], OUT=str(out))
    assert r.returncode == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "dtrun: warning: --preload: the warm interpreter's successor has 2 threads running after "
        "its fork (a preloaded module's os.register_at_fork handler started them) and cannot be "
        "forked safely; workers start without --preload"], r.stderr
    # (A first round's worker may be stopped before it writes: the other failed.)
    seen = records(out)
    assert {preloaded for restart, _, _, preloaded in seen if restart == "0"} == {"True"}, seen
    assert sorted((rank, preloaded) for restart, rank, _, preloaded in seen
                  if restart == "1") == [("0", "False"), ("1", "False")], seen


def test_signal_handlers_a_preloaded_module_installs_are_the_workers(tmp_path):
    """A plain start's worker imports the module itself and keeps the
    handlers it installs; a forked worker had them put back to what
    Python's start-up left before the import: a library's SIGTERM handler
    (one that saves a checkpoint on preemption) was gone, and a signal it
    ignores killed the worker."""
    (tmp_path / "m.py").write_text(
        "import signal\n"
        "def on_term(signum, frame):\n"
        "    pass\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        "signal.signal(signal.SIGUSR1, signal.SIG_IGN)\n")
    script = tmp_path / "handlers.py"
    script.write_text(
        "import os, signal, sys\n"
        "import m\n"
        "seen = [getattr(signal.getsignal(s), '__name__', str(signal.getsignal(s)))\n"
        "        for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)]\n"
        "open(os.environ['OUT'] + os.environ['RANK'], 'w').write(\n"
        "    ' '.join(seen + [str('m' in sys.modules)]))\n")
    seen = {}
    for how, flags in (("plain", []), ("preload", ["--preload=m"])):
        _, r = dtrun(tmp_path, flags, [str(script)], OUT=str(tmp_path / how))
        assert r.returncode == 0 and "--preload" not in r.stderr, r.stderr
        seen[how] = [(tmp_path / f"{how}{rank}").read_text() for rank in (0, 1)]
    assert seen["plain"] == ["on_term 1 default_int_handler True"] * 2  # 1: SIG_IGN
    assert seen["preload"] == seen["plain"]


@pytest.mark.parametrize("preload", ["m", "torch,numpy,m"])
def test_a_seed_a_preloaded_module_sets_is_kept(tmp_path, preload):
    """Each forked worker draws torch's and numpy's random state afresh,
    as their import draws it in a plain start; it also threw away a seed a
    preloaded module set at import (torch.manual_seed(0)), which a plain
    start keeps: the same program was no longer reproducible."""
    (tmp_path / "m.py").write_text("import numpy, torch\n"
                                   "torch.manual_seed(0)\n"
                                   "numpy.random.seed(0)\n")
    script = tmp_path / "draw.py"
    script.write_text("import os\nimport m, numpy, torch\n"
                      "open(os.environ['OUT'] + os.environ['RANK'], 'w').write(\n"
                      "    '%r %r' % (torch.rand(1).item(), numpy.random.rand()))\n")
    seen = {}
    for how, flags in (("plain", []), ("preload", [f"--preload={preload}"])):
        _, r = dtrun(tmp_path, flags, [str(script)], OUT=str(tmp_path / how))
        assert r.returncode == 0 and "--preload" not in r.stderr, r.stderr
        seen[how] = [(tmp_path / f"{how}{rank}").read_text() for rank in (0, 1)]
    assert seen["plain"][0] == seen["plain"][1]
    assert seen["preload"] == seen["plain"]


def test_a_stream_a_preloaded_module_puts_in_place_is_kept(tmp_path):
    """A module that wraps sys.stdout while importing (to colour or tag
    output): a plain start's worker keeps the wrapper; a forked worker's
    sys.stdout was remade from its descriptor, dropping it."""
    (tmp_path / "m.py").write_text(
        "import sys\n"
        "class Tagged:\n"
        "    def __init__(self, stream):\n"
        "        self.stream = stream\n"
        "    def write(self, text):\n"
        "        return self.stream.write(text.replace('hello', 'HELLO'))\n"
        "    def __getattr__(self, name):\n"
        "        return getattr(self.stream, name)\n"
        "sys.stdout = Tagged(sys.stdout)\n")
    script = tmp_path / "hello.py"
    script.write_text("import sys\nimport m\nprint('hello', type(sys.stdout).__name__)\n")
    seen = {}
    for how, flags in (("plain", []), ("preload", ["--preload=m"])):
        _, r = dtrun(tmp_path, flags, [str(script)], nproc=1)
        assert r.returncode == 0 and "--preload" not in r.stderr, r.stderr
        seen[how] = r.stdout
    assert seen["plain"] == "HELLO Tagged\n"
    assert seen["preload"] == seen["plain"]
