"""The host agent's per-round workers' store against a client that hogs it:
in every round a process outside the job (its own session, so the agent
does not stop it) connects to that round's workers' store, leaves a WAIT
outstanding and never lets go. The next round must still open a fresh
store, and the host agent's descriptors must not grow with the rounds
(the last round's store closes its connections when it is replaced)."""

import json
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

ROUNDS = 4

HOG = r"""
import os, signal, socket, struct, sys
port = int(sys.argv[1])
s = socket.create_connection(("127.0.0.1", port))
# torch 1.13's WAIT (command byte 5) for a key nobody sets: one key, then
# the key's length and bytes. dtrun's store reads the first request of a
# connection in either dialect.
key = b"never"
s.sendall(bytes([5]) + struct.pack("<Q", 1) + struct.pack("<Q", len(key)) + key)
os.write(1, b"connected\n")
os.close(1)
signal.pause()
"""

WORKER = """
import json, os, subprocess, sys
e = os.environ
out, hog, store_cli = sys.argv[1], sys.argv[2], sys.argv[3]
rank, attempt = int(e["RANK"]), int(e["TORCHELASTIC_RESTART_COUNT"])
agent = os.getppid()
fds = len(os.listdir(f"/proc/{agent}/fd"))
with open(os.path.join(out, f"{attempt}.{rank}.json"), "w") as f:
    json.dump({"agent": agent, "fds": fds, "port": int(e["MASTER_PORT"])}, f)
if rank == 0:
    p = subprocess.Popen([sys.executable, hog, e["MASTER_PORT"]], stdout=subprocess.PIPE,
                         start_new_session=True)
    with open(os.path.join(out, f"hog.{attempt}"), "w") as f:
        f.write(str(p.pid))
    assert p.stdout.readline() == b"connected\\n"
# Rank 1 ends the round (exit 3) only once rank 0 has reported and its hog
# holds the store; otherwise the agents could stop rank 0 before it wrote.
store = ["--endpoint", f"127.0.0.1:{e['MASTER_PORT']}", "--timeout", "120"]
if rank == 0:
    subprocess.run([store_cli, *store, "set", "reported", "1"], check=True)
else:
    subprocess.run([store_cli, *store, "wait", "reported"], check=True)
sys.exit(0 if attempt == %d else 3)
""" % (ROUNDS - 1)


def test_a_client_hogging_the_workers_store_leaks_nothing_across_rounds(tmp_path):
    script, hog = tmp_path / "worker.py", tmp_path / "hog.py"
    script.write_text(WORKER)
    hog.write_text(HOG)
    try:
        nodes = dh.run_two_local_nodes(
            ["--nproc-per-node=1", "--rdzv-id=hogs", f"--max-restarts={ROUNDS - 1}"],
            ["--python", dh.PYTHON, str(script), str(tmp_path), str(hog),
             str(dh.BUILD_DIR / "launcher" / "dtrun-store")],
            timeout=240)
    finally:
        # The hogs left their job's process tree (own sessions).
        for marker in tmp_path.glob("hog.*"):
            if marker.suffix != ".py":
                try:
                    os.kill(int(marker.read_text()), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
    for node in nodes:
        assert node.returncode == 0, node.stderr
    host_pid = nodes[0].pid
    seen = [json.loads(f.read_text()) for f in sorted(tmp_path.glob("*.*.json"))]
    host = {}
    for s, f in zip(seen, sorted(tmp_path.glob("*.*.json"))):
        if s["agent"] == host_pid:
            host[int(f.name.split(".")[0])] = s
    assert sorted(host) == list(range(ROUNDS)), seen
    # A fresh store every round, despite the hog on the last one.
    assert len({host[a]["port"] for a in host}) == ROUNDS
    # Bounded: a leak keeps one descriptor per round (or more).
    fds = [host[a]["fds"] for a in range(ROUNDS)]
    assert fds[-1] <= fds[1] + 1, fds
    assert f"round {ROUNDS - 1}: the workers' store is on port" in nodes[0].stderr
