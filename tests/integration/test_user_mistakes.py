"""What a torchrun user gets wrong, tried as one would (issue 33): the
interpreter that runs is the one shown and named when torch is missing, a
missing script is one line before any worker starts, and the failure
summary's hint follows the cause (the OOM killer for a SIGKILL; no @record
advice where @record cannot help)."""

import json
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
from failure_summary import field, summary  # noqa: E402

CHOOSE = ("which cannot import torch; choose the Python that has it with "
          "--python=/path/to/python3 (or DTRUN_PYTHON), or put its folder first on PATH")


@pytest.fixture
def torchless(tmp_path):
    """A venv without torch first on PATH: what pyenv or an unrelated venv
    does to a torchrun user. Returns (its bin folder, the environment)."""
    venv = tmp_path / "venv"
    subprocess.run([dh.PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = dh.job_env(PATH=f"{venv / 'bin'}:{os.environ['PATH']}")
    for name in ("DTRUN_PYTHON", "PYTHON_EXEC"):
        env.pop(name, None)
    return venv / "bin", env


def test_dry_run_shows_the_full_path_of_the_interpreter_that_will_run(torchless, tmp_path):
    bin_dir, env = torchless
    (tmp_path / "train.py").write_text("")
    r = dh.run(["--standalone", "--dry-run", "train.py", "--lr", "3"], env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    config = json.loads(r.stdout)
    assert config["argv"] == [str(bin_dir / "python3"), "-u", "train.py", "--lr", "3"]
    assert config["program"] == {"path": str(bin_dir / "python3"), "chosen_by": "python3 on PATH"}
    r = dh.run(["--standalone", "--dry-run", "--python", dh.PYTHON, "train.py"], env=env,
               cwd=tmp_path)
    assert json.loads(r.stdout)["program"] == {"path": dh.PYTHON, "chosen_by": "--python"}
    # What a real run would refuse is said in the plan, not on stderr.
    r = dh.run(["--standalone", "--dry-run", "missing.py"], env=env, cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert json.loads(r.stdout)["program"]["problem"].startswith("script 'missing.py' not found")


def test_workers_without_torch_name_the_interpreter_and_how_to_choose(torchless, tmp_path):
    bin_dir, env = torchless
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    r = dh.run(["--standalone", "--nproc-per-node=2", str(script)], env=env)
    assert r.returncode == 1, r.stderr
    block = summary(r.stderr)
    assert field(block, "error") == "ModuleNotFoundError: No module named 'torch'"
    assert field(block, "hint") == f"the workers ran {bin_dir}/python3 (python3 on PATH), {CHOOSE}"
    assert "@record" not in block


def test_without_the_hook_the_redirected_stderr_still_gives_the_hint(torchless, tmp_path):
    bin_dir, env = torchless
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    r = dh.run(["--standalone", "--no-stack-hook", f"--log-dir={tmp_path / 'logs'}",
                "--redirects=3", str(script)], env=env)
    assert r.returncode == 1, r.stderr
    block = summary(r.stderr)
    assert field(block, "hint") == f"the workers ran {bin_dir}/python3 (python3 on PATH), {CHOOSE}"
    assert "@record" not in block


def test_a_sigkill_dtrun_did_not_send_points_at_the_oom_killer():
    r = dh.run(["--standalone", "--no-python", "/bin/sh", "-c", "kill -KILL $$"])
    assert r.returncode == 137, r.stderr
    block = summary(r.stderr)
    hint = field(block, "hint")
    assert hint.startswith("SIGKILL that dtrun did not send: most often the kernel's OOM killer")
    assert "`dmesg`" in hint and "memory.events" in hint
    assert "@record" not in block


def test_a_syntax_error_is_reported_without_recommending_record(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("x = (\n")
    r = dh.run(["--standalone", "--python", dh.PYTHON, str(script)])
    assert r.returncode == 1, r.stderr
    block = summary(r.stderr)
    assert field(block, "error").startswith("SyntaxError: '(' was never closed")
    assert field(block, "hint").startswith("the script does not compile")
    assert "decorate the entrypoint" not in block


def test_a_missing_script_is_one_line_before_any_worker(tmp_path):
    r = dh.run(["--standalone", "--nproc-per-node=4", "--python", dh.PYTHON, "no_such_train.py"],
               cwd=tmp_path)
    assert r.returncode == 127, r.stderr
    assert r.stderr.splitlines() == [
        f"dtrun: error: script 'no_such_train.py' not found: looked for "
        f"{tmp_path}/no_such_train.py (a relative path is taken from the folder dtrun runs in); "
        "no worker was started"]
    assert r.stdout == ""


def one_line_error(args, **kwargs):
    r = dh.run(args, **kwargs)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("dtrun: error: "), r.stderr
    assert r.stdout == ""
    return lines[0][len("dtrun: error: "):]


@pytest.mark.parametrize("python", ["python", "python3", "python3.11", "/usr/bin/python3"])
def test_python_where_the_script_goes_is_explained(python, tmp_path):
    (tmp_path / "train.py").write_text("")
    assert one_line_error(["--standalone", python, "train.py"], cwd=tmp_path) == (
        f"'{python}' is where the script goes: dtrun runs the script with Python itself, as "
        f"torchrun does; write dtrun [OPTIONS] train.py (choose the interpreter with "
        f"--python={python}; --no-python runs a program as it is)")


def test_help_as_a_word_prints_the_help(tmp_path):
    r = dh.run(["help"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == dh.run(["--help"]).stdout


@pytest.mark.parametrize("word, meant", [("statuss", "status"), ("stauts", "status"),
                                         ("stack", "stacks"), ("hlep", "help")])
def test_a_word_close_to_a_subcommand_is_not_run_as_a_script(word, meant, tmp_path):
    assert one_line_error([word], cwd=tmp_path) == (
        f"'{word}' is neither a file here nor a dtrun command; did you mean 'dtrun {meant}'?")


def test_a_subcommand_after_flags_says_it_goes_first(tmp_path):
    assert one_line_error(["-v", "status"], cwd=tmp_path) == (
        "'status' is not a file here; 'dtrun status' is a command only as dtrun's first word: "
        "run dtrun status [OPTIONS]")


def test_a_file_named_like_a_subcommand_still_runs(tmp_path):
    (tmp_path / "statuss").write_text("")
    r = dh.run(["--standalone", "--python", dh.PYTHON, "statuss"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("flag, meant", [
    ("--nproc_per_nodes=2", "--nproc_per_node"), ("--nproc-per-nodes", "--nproc-per-node"),
    ("--nprocs=2", "--nproc-per-node"), ("--max-restart=1", "--max-restarts"),
    ("--standalon", "--standalone")])
def test_an_unknown_flag_suggests_the_nearest(flag, meant):
    message = one_line_error([flag, "--standalone", "x.py"])
    assert message.startswith(f"unrecognized arguments: {flag.split('=')[0]}"), message
    assert message.endswith(f"; did you mean {meant}? (run 'dtrun --help' for dtrun's flags; "
                            "the script's own flags go after the script)"), message


def test_an_unknown_flag_far_from_any_suggests_nothing():
    assert "did you mean" not in one_line_error(["--bogus", "--standalone", "x.py"])


@pytest.mark.parametrize("args", [["--nproc-per-node", "train.py"],
                                  ["--nproc-per-node", "train.py", "--lr", "3"],
                                  ["--max-restarts", "train.py"]])
def test_a_flag_that_swallowed_the_script_is_named(args):
    flag = args[0]
    assert one_line_error(["--standalone", *args]) == (
        f"{flag} took the script 'train.py' as its value, so no script is left; give {flag} "
        f"its value first ({flag}=VALUE train.py)")


def test_dtrun_flags_after_the_script_are_warned_about():
    r = dh.run(["--no-python", "/bin/true", "--standalone", "--nproc_per_node=2", "--lr=3"])
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [
        "dtrun: warning: --standalone, --nproc_per_node after the script go to the script, not "
        "to dtrun (as with torchrun); put dtrun's flags before /bin/true (or write 'dtrun "
        "[OPTIONS] -- /bin/true ...' to pass them on without this warning)"]
    # After '--' they are meant for the program: no warning.
    r = dh.run(["--no-python", "--", "/bin/true", "--standalone"])
    assert r.returncode == 0 and r.stderr == "", r.stderr
