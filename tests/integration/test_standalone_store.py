"""The standalone store: the workers' MASTER_ADDR:MASTER_PORT is a store
the agent listens on, bound to loopback only, and a TCPStore client (the
dtrun-store CLI here; real torch in e2e) can use it during the run."""

import os
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

# Lists the listening sockets on MASTER_PORT as "addr:port" lines.
LISTENERS = r'''
import os
port = int(os.environ["MASTER_PORT"])
found = []
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    with open(table) as f:
        next(f)
        for line in f:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if state == "0A" and int(p, 16) == port:
                found.append(addr)
with open(os.environ["OUT"], "w") as f:
    f.write(os.environ["MASTER_ADDR"] + " " + " ".join(found))
'''


def test_store_listens_on_loopback_only(tmp_path):
    out = tmp_path / "listeners"
    script = tmp_path / "listeners.py"
    script.write_text(LISTENERS)
    r = dh.run(["--standalone", "--python", dh.PYTHON, str(script)],
               env=dh.job_env(OUT=str(out)))
    assert r.returncode == 0, r.stderr
    master_addr, *listeners = out.read_text().split()
    assert master_addr == "127.0.0.1"
    assert listeners == ["0100007F"]  # 127.0.0.1, little-endian hex; nothing else


def test_workers_can_use_the_store(tmp_path):
    store_cli = dh.BUILD_DIR / "launcher" / "dtrun-store"
    # Each worker announces itself and waits for the others: only one
    # shared store makes that finish.
    cli = f'"{store_cli}" --endpoint 127.0.0.1:$MASTER_PORT --timeout 30'
    worker = (f'{cli} set rank$RANK ok && {cli} wait rank0 rank1 rank2 && '
              f'{cli} add done 1 > $OUT$RANK')
    r = dh.run(["--standalone", "--nproc-per-node=3", "--no-python", "/bin/sh", "-c", worker],
               env=dh.job_env(OUT=str(tmp_path / "done")))
    assert r.returncode == 0, r.stderr
    counts = sorted(int((tmp_path / f"done{rank}").read_text()) for rank in range(3))
    assert counts == [1, 2, 3]


def test_a_restarted_group_starts_on_an_empty_store(tmp_path):
    """torch >= 2.6 workers keep their keys at the top of the agent's store
    (no /worker/attempt_N prefix any more), so keys left by the previous
    attempt (gloo's peer addresses) would send the restarted group to dead
    peers: dtrun clears the standalone store between rounds (the torch 2.6
    restart itself: tests/e2e/test_torch2_ddp.py)."""
    store_cli = dh.BUILD_DIR / "launcher" / "dtrun-store"
    cli = f'"{store_cli}" --endpoint 127.0.0.1:$MASTER_PORT --timeout 30'
    worker = (f'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then {cli} set left_by_attempt0 x '
              f'&& {cli} get left_by_attempt0 >/dev/null && exit 7; fi; '
              f'{cli} check left_by_attempt0; echo "$?" > $OUT')
    r = dh.run(["--standalone", "--max-restarts=1", "--no-python", "/bin/sh", "-c", worker],
               env=dh.job_env(OUT=str(tmp_path / "check")))
    assert r.returncode == 0, r.stderr
    assert "restarting the workers (restart 1 of 1)" in r.stderr
    assert (tmp_path / "check").read_text().strip() == "1"  # `check`: the key is missing
