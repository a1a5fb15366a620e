"""A user's build folder may have a space in its path (a checkout under
"~/My Projects"): the build steps that make the man pages and completions
from the binaries' --help (cmake/packaging.cmake) must still work there,
or the default build target fails. A fresh tree is configured there and
those steps, exactly as ninja would run them, run on this build's binaries
copied in (compiling them again would take minutes). Named test_package_*
so that CTest runs it after the release.package fixture, which may relink
those binaries."""

import gzip
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402


def test_man_pages_and_completions_build_in_a_path_with_a_space(tmp_path):
    build = tmp_path / "my build" / "dtrun build"
    r = subprocess.run(["cmake", "-S", str(dh.SOURCE_DIR), "-B", str(build), "-G", "Ninja",
                        "-DDTRUN_TESTS=OFF"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    (build / "launcher").mkdir(parents=True, exist_ok=True)
    for tool in ("dtrun", "dtrun-store"):
        shutil.copy2(dh.BUILD_DIR / "launcher" / tool, build / "launcher" / tool)
    outputs = ["packaging/man/dtrun.1.gz", "packaging/man/dtrun-store.1.gz",
               "packaging/bash/dtrun", "packaging/bash/dtrun-store"]
    for output in outputs:
        # -s: only the step that makes this file, not the compiles before it.
        steps = subprocess.run(["ninja", "-C", str(build), "-t", "commands", "-s", output],
                               capture_output=True, text=True, check=True).stdout
        assert steps.strip(), f"ninja has no step for {output}"
        r = subprocess.run(["sh", "-c", steps], cwd=build, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, f"{output}: rc {r.returncode}\n{steps}\n{r.stdout}{r.stderr}"
    page = gzip.decompress((build / "packaging/man/dtrun.1.gz").read_bytes()).decode()
    assert page.startswith(".\\\" DO NOT MODIFY") and "nproc_per_node" in page
    assert "can't get" not in page
    store_page = gzip.decompress((build / "packaging/man/dtrun-store.1.gz").read_bytes()).decode()
    assert "num\\-keys" in store_page or "num-keys" in store_page
    assert "complete -o default -F _dtrun dtrun" in (build / "packaging/bash/dtrun").read_text()
