"""--preload (docs/agent.md, "Preload") against modules and events that try
to break it: a module that reads, closes or replaces stdin while
importing, one that changes the environment or the folder, a warm
interpreter that dies in the middle of a round's requests. Each must end
as a plain start would, or fall back to one with one line; no process is
left behind (test_preload.dtrun checks it after every run)."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
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


