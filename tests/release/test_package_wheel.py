"""The wheel as a torch user installs it: into a fresh virtual environment
that sees Debian's torch 1.13 (--system-site-packages), with pip and no
network; then a real 2-worker gloo DDP job launched by the venv's dtrun,
its man page through the venv's MANPATH, and `pip uninstall` taking it all
away again."""

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import packages  # noqa: E402


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    art = packages.artifacts()
    root = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([dh.PYTHON, "-m", "venv", "--system-site-packages", str(root)], check=True,
                   timeout=120)
    r = subprocess.run([str(root / "bin" / "pip"), "install", "--no-index", "--no-cache-dir",
                        "--disable-pip-version-check", str(art.wheel)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"pip install failed:\n{r.stdout}\n{r.stderr}"
    return root


def test_pip_puts_both_tools_on_the_venv_path(venv):
    for tool in ("dtrun", "dtrun-store"):
        path = venv / "bin" / tool
        assert path.is_file() and os.access(path, os.X_OK), f"{path} not installed"
        with open(path, "rb") as f:
            assert f.read(4) == b"\x7fELF", f"{path} is not the binary itself"
    out = subprocess.run([str(venv / "bin" / "dtrun"), "--version"], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == packages.build_version()
    # Found by name once the venv is active (its bin/ first on PATH).
    env = dh.job_env(PATH=f"{venv / 'bin'}:/usr/bin:/bin")
    found = subprocess.run(["sh", "-c", "command -v dtrun-store"], env=env, capture_output=True,
                           text=True, check=True).stdout.strip()
    assert found == str(venv / "bin" / "dtrun-store")


def test_venv_dtrun_starts_workers_with_the_venvs_python_unactivated(venv, tmp_path):
    # As torchrun's sys.executable: the venv's interpreter, though the venv
    # is not active and another python3 (/usr/bin's) is first on PATH.
    script = tmp_path / "which.py"
    script.write_text("import os, sys\nos.write(1, f'{sys.prefix}\\n'.encode())\n")
    env = dh.job_env(PATH="/usr/bin:/bin")
    env.pop("VIRTUAL_ENV", None)
    r = subprocess.run([str(venv / "bin" / "dtrun"), "--standalone", "--nproc-per-node=1",
                        str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [str(venv)]


def test_venv_dtrun_runs_a_two_worker_gloo_ddp_job(venv, tmp_path):
    out = tmp_path / "out"
    env = dh.job_env(PATH="/usr/bin:/bin")  # not activated: dtrun finds the venv's python
    env.pop("VIRTUAL_ENV", None)
    r = subprocess.run([str(venv / "bin" / "dtrun"), "--standalone", "--nproc-per-node=2",
                        str(dh.EXAMPLES / "ddp_gloo.py"),
                        "--epochs", "1", "--out", str(out)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"rc {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    results = [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [res["rank"] for res in results] == [0, 1]
    assert all(res["world_size"] == 2 for res in results)
    assert all(res["allreduce_sum"] == 3.0 for res in results)  # (0+1) + (1+1)
    # DDP kept the replicas identical.
    assert results[0]["param_checksum"] == results[1]["param_checksum"]
    assert "all-reduce of rank+1 = 3 (expected 3)" in r.stdout


def test_the_wheel_installs_the_dtrun_module_which_does_nothing_outside_dtrun(venv):
    code = "import dtrun; dtrun.step(1)\nwith dtrun.section('x'): pass\nprint(dtrun.enabled())"
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], env=dh.job_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_man_dtrun_from_the_venv_manpath(venv):
    env = dict(os.environ, MANPATH=str(venv / "share" / "man"), MANWIDTH="200", LANG="C.UTF-8")
    r = subprocess.run(["man", "-P", "cat", "dtrun"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    for text in ("SYNOPSIS", "EXIT STATUS", "--nproc-per-node,--nproc_per_node",
                 "--rdzv-backend", "--numa-binding", "dtrun-store(1)"):
        assert text in r.stdout, f"{text!r} not in man dtrun"
    r = subprocess.run(["man", "-P", "cat", "dtrun-store"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "--endpoint" in r.stdout, r.stderr


def test_pip_uninstall_removes_everything_it_installed(venv):
    # Last in this file (pytest runs tests in file order): it empties the venv.
    r = subprocess.run([str(venv / "bin" / "pip"), "uninstall", "--yes", "dtrun"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    leftovers = [p for p in ("bin/dtrun", "bin/dtrun-store", "share/man/man1/dtrun.1.gz",
                             "share/bash-completion/completions/dtrun")
                 if (venv / p).exists()]
    assert leftovers == []
    assert (venv / "bin" / "python").exists()  # the venv itself stays
