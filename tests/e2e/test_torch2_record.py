"""torch 2.15's @record error files in dtrun's failure summary: a worker
whose main is decorated with torch.distributed.elastic.multiprocessing.
errors.record raises; torch 2.15 writes TORCHELASTIC_ERROR_FILE, and dtrun
(with the contract's torch, tests/pyhelpers/torch_pypi.py) names that
rank as the root cause with the exception and its traceback. The torch
1.13 twin is tests/integration/test_failure_report.py."""

import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import torch_pypi  # noqa: E402
from failure_summary import field, summary  # noqa: E402

# Rank 1 raises inside @record (which writes the error file and re-raises,
# so Python exits 1) after saying which torch it is; the others wait to be
# stopped. The file is also copied for the test to read it as torch wrote it.
RECORD_WORKER = """
import os, shutil, signal, sys
if os.environ["RANK"] != "1":
    signal.pause()
    sys.exit(0)
import torch
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    with open(sys.argv[1], "w") as f:
        f.write(torch.__version__)
    raise ValueError("boom 42")

try:
    main()
finally:
    shutil.copy(os.environ["TORCHELASTIC_ERROR_FILE"], sys.argv[2])
"""


def test_record_error_file_is_the_root_cause(tmp_path):
    torch_pypi.require()
    script = tmp_path / "worker.py"
    script.write_text(RECORD_WORKER)
    version, copy = tmp_path / "version", tmp_path / "error.json"
    r = torch_pypi.dtrun(["--standalone", "--nproc-per-node=3", "--python", torch_pypi.PYTHON,
                          script, version, copy])
    assert version.read_text().startswith(torch_pypi.TORCH_VERSION + ".")
    # torch 2.15's error file, as dtrun reads it.
    written = json.loads(copy.read_text())["message"]
    assert written["message"] == "ValueError: boom 42"
    assert "raise ValueError" in written["extraInfo"]["py_callstack"]
    assert r.returncode == 1, r.stderr
    block = summary(r.stderr)
    assert field(block, "rank") == "1 (local_rank 1)"
    assert field(block, "exit") == "exit code 1"
    assert field(block, "error") == "ValueError: boom 42"
    assert re.fullmatch(r"/tmp/[^/]+/attempt_0/1/error\.json", field(block, "error_file"))
    # The traceback from the error file, indented under the root cause.
    assert "dtrun:   traceback :" in block
    assert re.search(r'^dtrun:       File ".*worker\.py", line \d+, in main$', block, re.M), block
    assert 'dtrun:         raise ValueError("boom 42")' in block
    assert "other failures: none" in block
    assert "stopped by dtrun (not failures): rank(s) 0, 2" in block
    assert "exited with code 1: ValueError: boom 42; stopping the other workers" in r.stderr
