"""The includes agree with the library graph (docs/design.md, "Folders and
libraries", issue 47): scripts/check-layering passes on the tree, and
refuses an include that runs back up and a cycle between a folder's
files."""

import os
import pathlib
import shutil
import subprocess
import sys

SOURCE = pathlib.Path(os.environ["DTRUN_SOURCE_DIR"])
CHECK = SOURCE / "scripts" / "check-layering"


def run_check(root: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True)


def copy_of_the_sources(tmp_path: pathlib.Path) -> pathlib.Path:
    """The three top folders' sources and CMakeLists.txt, nothing else."""
    def not_source(folder, names):
        return [n for n in names if not (os.path.isdir(os.path.join(folder, n))
                                         or n.endswith((".h", ".cpp")) or n == "CMakeLists.txt")]
    for top in ("rendezvous", "agent", "launcher"):
        shutil.copytree(SOURCE / top, tmp_path / top, ignore=not_source)
    return tmp_path


def add_include(path: pathlib.Path, header: str):
    path.write_text(f'#include "{header}"\n' + path.read_text())


def refusal(root: pathlib.Path) -> str:
    """What the check says of a tree it must refuse."""
    r = run_check(root)
    assert r.returncode == 1, r.stderr
    return r.stderr


def test_the_tree_keeps_its_layers():
    r = run_check(SOURCE)
    assert r.returncode == 0, r.stderr


def test_an_include_back_up_the_graph_is_refused(tmp_path):
    root = copy_of_the_sources(tmp_path)
    add_include(root / "agent" / "spec" / "worker_env.cpp", "agent/policy/elastic_agent.h")
    assert ("agent/spec/worker_env.cpp includes agent/policy/elastic_agent.h, but its library "
            "is not linked by dtrun_agent_spec") in refusal(root)


def test_a_cycle_between_a_folders_files_is_refused(tmp_path):
    root = copy_of_the_sources(tmp_path)
    add_include(root / "launcher" / "cli" / "launch_options.h", "launcher/cli/cli.h")
    assert ("launcher/cli: its files include each other in a cycle: cli, cli_flags, "
            "launch_options") in refusal(root)


def test_a_cycle_between_libraries_is_refused(tmp_path):
    root = copy_of_the_sources(tmp_path)
    cmake = root / "agent" / "spec" / "CMakeLists.txt"
    cmake.write_text(cmake.read_text() + "target_link_libraries(dtrun_agent_spec PUBLIC dtrun_agent)\n")
    assert "the libraries link in a cycle" in refusal(root)
