"""`dtrun status`, `dtrun stacks`'s reachability and --metrics-port, on a
real running job: the figures are checked against /proc, the endpoints
speak HTTP and Prometheus text, and nothing is left once the job ends.

Each test gives the job and the commands their own DTRUN_CONTROL_DIR, so
the control sockets of jobs that other tests run at the same time are not
seen here."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402


def page_size():
    return os.sysconf("SC_PAGE_SIZE")


def rss_bytes(pid):
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page_size()


def children(pid):
    return sorted(int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())


@contextmanager
def running_job(tmp_path, *flags, nproc=2, control=None):
    """A --standalone job whose workers each say 'ready' on a FIFO and then
    wait; yields (proc, env, fifo) once every worker is ready.

    The worker stays the shell that said 'ready' (it waits for a sleep it
    started), so its memory no longer changes once it said so: with
    `exec sleep` after the 'ready', dtrun status could read the RSS in the
    middle of the exec (200 KiB) and the test's own read after it (1.8 MB)."""
    env = dh.job_env(DTRUN_CONTROL_DIR=str(control or tmp_path / "control"))
    fifo = dh.Fifo(tmp_path)
    script = f"sleep 600 & echo ready > {fifo.path}; wait"
    proc = dh.start(["--standalone", f"--nproc-per-node={nproc}", *flags, "--no-python",
                     "/bin/sh", "-c", script], env)
    try:
        fifo.lines(nproc)
        yield proc, env
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
        fifo.close()
        dh.kill_marked(env["DTRUN_TEST_MARK"])


def dtrun(*args, env):
    return subprocess.run([str(dh.DTRUN), *args], env=env, capture_output=True, text=True,
                          timeout=60)


def test_status_json_matches_proc(tmp_path):
    with running_job(tmp_path) as (proc, env):
        r = dtrun("status", "--json", env=env)
        assert r.returncode == 0, r.stderr
        docs = json.loads(r.stdout)
        assert len(docs) == 1
        doc = docs[0]
        assert doc["schema"] == "dtrun.status/1"
        assert doc["agent_pid"] == proc.pid
        assert doc["phase"] == "running"
        assert doc["restarts_used"] == 0 and doc["round"] == 0
        workers = sorted(doc["workers"], key=lambda w: w["rank"])
        assert [w["rank"] for w in workers] == [0, 1]
        pids = [w["pid"] for w in workers]
        # The agent's children are its workers and its orphan guard.
        assert set(pids) <= set(children(proc.pid))
        for w in workers:
            assert w["state"] == "running"
            real = rss_bytes(w["pid"])
            assert 0.5 * real <= w["rss_bytes"] <= 2 * real + 4 * 1024 * 1024
            assert w["cpu_seconds"] >= 0
            # Console output is not watched without --hang-timeout.
            assert w["seconds_since_output"] is None


def test_status_table_names_every_worker(tmp_path):
    with running_job(tmp_path) as (proc, env):
        doc = json.loads(dtrun("status", "--json", env=env).stdout)[0]
        r = dtrun("status", env=env)
        assert r.returncode == 0, r.stderr
        assert doc["run_id"] in r.stdout
        for w in doc["workers"]:
            assert re.search(rf"\b{w['pid']}\b", r.stdout), r.stdout


def test_no_running_job_is_exit_3(tmp_path):
    r = dtrun("status", env=dh.job_env(DTRUN_CONTROL_DIR=str(tmp_path / "control")))
    assert r.returncode == 3
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_control_socket_is_gone_after_the_job(tmp_path):
    with running_job(tmp_path) as (proc, env):
        sockets = list((tmp_path / "control").glob("*.sock"))
        assert [s.name for s in sockets] == [f"{proc.pid}.sock"]
        assert (tmp_path / "control").stat().st_mode & 0o777 == 0o700
    assert list((tmp_path / "control").glob("*.sock")) == []


def get(url):
    with urllib.request.urlopen(url, timeout=30) as reply:
        return reply.status, reply.headers.get("Content-Type"), reply.read().decode()


def test_metrics_endpoint(tmp_path):
    env = dh.job_env(DTRUN_CONTROL_DIR=str(tmp_path / "control"))
    fifo = dh.Fifo(tmp_path)
    proc = dh.start(["--standalone", "--nproc-per-node=2", "--metrics-port=0", "--no-python",
                     "/bin/sh", "-c", f"echo ready > {fifo.path}; exec sleep 600"], env)
    try:
        line = dh.wait_for_stderr(proc, "metrics: http://")
        base = re.search(r"(http://127\.0\.0\.1:\d+)/metrics", line).group(1)
        fifo.lines(2)
        status, ctype, body = get(base + "/metrics")
        assert status == 200 and ctype.startswith("text/plain")
        assert "# TYPE dtrun_restarts_used gauge" in body
        assert re.search(r"^dtrun_restarts_used\{[^}]*\} 0$", body, re.M), body
        # Restarts by class: every class written, 0 before any incident.
        assert "# TYPE dtrun_restarts_total counter" in body
        by_class = re.findall(r'^dtrun_restarts_total\{[^}]*class="([a-z-]+)"\} (\d+)$', body,
                              re.M)
        assert dict(by_class) == {c: "0" for c in (
            "exception", "exit", "signal", "oom-kill", "collective-timeout", "hang", "watchdog",
            "node", "health", "membership", "preemption")}, body
        productive = re.search(r"^dtrun_productive_seconds_total\{[^}]*\} ([0-9.e+-]+)$",
                               body, re.M)
        lost = re.search(r"^dtrun_lost_seconds_total\{[^}]*\} ([0-9.e+-]+)$", body, re.M)
        assert productive and lost and float(productive.group(1)) > 0, body
        rss = re.findall(r'^dtrun_worker_rss_bytes\{[^}]*rank="(\d)"[^}]*\} (\d+)', body, re.M)
        assert sorted(r for r, _ in rss) == ["0", "1"] and all(int(v) > 0 for _, v in rss)
        status, ctype, body = get(base + "/status")
        assert ctype.startswith("application/json")
        doc = json.loads(body)
        assert doc["schema"] == "dtrun.status/1" and len(doc["workers"]) == 2
        try:
            get(base + "/nothing")
            raise AssertionError("/nothing answered")
        except urllib.error.HTTPError as e:
            assert e.code == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        fifo.close()
        dh.kill_marked(env["DTRUN_TEST_MARK"])


def metric(body, name):
    found = re.search(rf"^{name}\{{[^}}]*\}} ([0-9.e+-]+)$", body, re.M)
    assert found, body
    return float(found.group(1))


def check_no_productive_time_while_stopping(proc, base: str, stop_said: str) -> None:
    """Once the agent says `stop_said`, it is stopping, and the productive
    seconds stand still however long the stop lasts."""
    dh.wait_for_stderr(proc, stop_said)
    first = metric(get(base + "/metrics")[2], "dtrun_productive_seconds_total")
    assert json.loads(get(base + "/status")[2])["phase"] == "stopping"
    second = metric(get(base + "/metrics")[2], "dtrun_productive_seconds_total")
    assert second == first


def test_a_stop_is_not_productive_time(tmp_path):
    """Rank 0 fails; rank 1 ignores SIGTERM, so the stop lasts
    --stop-timeout: the productive seconds stand still meanwhile."""
    env = dh.job_env(DTRUN_CONTROL_DIR=str(tmp_path / "control"))
    fifo = dh.Fifo(tmp_path)
    go = tmp_path / "go"
    os.mkfifo(go)  # rank 1 writes once its SIGTERM is ignored; rank 0 then fails
    script = (f'if [ "$LOCAL_RANK" = 1 ]; then trap "" TERM; echo ready > {fifo.path}; '
              f'echo go > {go}; exec sleep 600; else read x < {go}; exit 1; fi')
    proc = dh.start(["--standalone", "--nproc-per-node=2", "--metrics-port=0",
                     "--stop-timeout=600", "--no-python", "/bin/sh", "-c", script], env)
    with dh.cleaned_up(proc, env["DTRUN_TEST_MARK"]):
        line = dh.wait_for_stderr(proc, "metrics: http://")
        base = re.search(r"(http://127\.0\.0\.1:\d+)/metrics", line).group(1)
        fifo.lines(1)
        check_no_productive_time_while_stopping(proc, base, "stopping the other workers")
    fifo.close()


def test_a_preemption_stop_is_not_productive_time(tmp_path):
    """SIGTERM with --checkpoint-signal: the workers save (here: ignore it
    all) during --stop-timeout, time the productive seconds do not count."""
    env = dh.job_env(DTRUN_CONTROL_DIR=str(tmp_path / "control"))
    fifo = dh.Fifo(tmp_path)
    script = f'trap "" TERM USR1; echo ready > {fifo.path}; exec sleep 600'
    proc = dh.start(["--standalone", "--nproc-per-node=1", "--metrics-port=0",
                     "--checkpoint-signal=SIGUSR1", "--stop-timeout=600", "--no-python",
                     "/bin/sh", "-c", script], env)
    with dh.cleaned_up(proc, env["DTRUN_TEST_MARK"]):
        line = dh.wait_for_stderr(proc, "metrics: http://")
        base = re.search(r"(http://127\.0\.0\.1:\d+)/metrics", line).group(1)
        fifo.lines(1)
        proc.send_signal(signal.SIGTERM)
        check_no_productive_time_while_stopping(proc, base, "this node is preempted")
    fifo.close()


def test_a_metrics_port_in_use_is_one_line_and_no_worker_starts(tmp_path):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    marker = tmp_path / "started"
    try:
        r = dh.run(["--standalone", f"--metrics-port={port}", "--no-python", "/bin/sh", "-c",
                    f"touch {marker}"])
    finally:
        holder.close()
    assert r.returncode != 0
    assert f"--metrics-port {port}" in r.stderr and "in use" in r.stderr
    assert not marker.exists()


def test_status_of_a_multi_node_job_from_its_store_and_here(tmp_path):
    port = dh.free_port()
    env = dh.job_env(DTRUN_CONTROL_DIR=str(tmp_path / "control"))
    fifo = dh.Fifo(tmp_path)
    run_id = f"status-{env['DTRUN_TEST_MARK'][:8]}"
    procs = []
    # Each worker's last line is a progress bar redrawn with '\r'; under
    # --redirects the worker writes its log file itself, so the line is
    # there once it said 'ready'.
    worker = (f"printf 'loading\\nstep 1/10\\rstep %s/10\\r' $((RANK + 2)); "
              f"echo ready > {fifo.path}; exec sleep 600")
    try:
        for is_host in (1, 0):
            procs.append(dh.start(
                ["--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
                 f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={run_id}",
                 f"--rdzv-conf={dh.FAST_RDZV},is_host={is_host}", "-v", "--redirects=1",
                 f"--log-dir={tmp_path / f'logs{is_host}'}", "--no-python", "/bin/sh", "-c",
                 worker], env))
        for p in procs:
            dh.wait_for_stderr(p, "round 0: status published to the store")
        fifo.lines(2)
        r = dtrun("status", "--json", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={run_id}",
                  env=env)
        assert r.returncode == 0, r.stderr
        [doc] = json.loads(r.stdout)
        assert doc["run_id"] == run_id and doc["nnodes"] == 2
        assert sorted(n["agent_pid"] for n in doc["nodes"]) == sorted(p.pid for p in procs)
        assert all(n["state"] == "running" for n in doc["nodes"])
        assert sorted((w["rank"], w["node_rank"]) for w in doc["workers"]) == [(0, 0), (1, 1)]
        r = dtrun("status", "--json", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=other",
                  env=env)
        assert r.returncode == 3, r.stdout
        # Both agents are on this machine: one run, so one document and one
        # block, its workers in rank order with their last lines.
        r = dtrun("status", "--json", env=env)
        assert r.returncode == 0, r.stderr
        [here] = json.loads(r.stdout)
        assert here["run_id"] == run_id and here["nnodes"] == 2
        assert [n["agent_pid"] for n in here["nodes"]] == [
            n["agent_pid"] for n in sorted(doc["nodes"], key=lambda n: n["node_rank"])]
        assert [(w["rank"], w["node_rank"], w["last_output"]) for w in here["workers"]] == [
            (0, 0, "step 2/10"), (1, 1, "step 3/10")]
        r = dtrun("status", env=env)
        assert r.returncode == 0, r.stderr
        assert r.stdout.count(f"run {run_id} ") == 1, r.stdout
        assert "LAST OUTPUT" in r.stdout
        assert re.search(r"^1 .* step 3/10$", r.stdout, re.M), r.stdout
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            p.communicate(timeout=60)
        fifo.close()
        dh.kill_marked(env["DTRUN_TEST_MARK"])


def store(port, *args):
    """dtrun-store's client on the job's store."""
    r = subprocess.run([str(dh.BUILD_DIR / "launcher" / "dtrun-store"),
                        f"--endpoint=127.0.0.1:{port}", *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def metrics_until(url, pattern, timeout=60):
    """GET `url` until its body matches `pattern`: the agent reads the
    job's spares from the store with each status publication (every 5 s),
    so the figure appears at a time no log line marks."""
    deadline = time.monotonic() + timeout
    while True:
        body = get(url)[2]
        if re.search(pattern, body, re.M) or time.monotonic() > deadline:
            return body
        time.sleep(0.5)


def test_a_spare_shows_in_status_and_metrics(tmp_path):
    """Three agents for --nnodes=2: the third arrives after round 0 closed
    and waits as a spare; `dtrun status` lists it, /metrics counts it."""
    port = dh.free_port()
    env = dh.job_env(DTRUN_CONTROL_DIR=str(tmp_path / "control"))
    fifo = dh.Fifo(tmp_path)
    run_id = f"spare-{env['DTRUN_TEST_MARK'][:8]}"
    endpoint = [f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={run_id}"]

    def agent(is_host, *flags):
        return dh.start(["--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d", *endpoint,
                         f"--rdzv-conf={dh.FAST_RDZV},is_host={is_host}", "-v", *flags,
                         "--no-python", "/bin/sh", "-c",
                         f"echo ready > {fifo.path}; exec sleep 600"], env)

    procs = []
    try:
        procs.append(agent(1, "--metrics-port=0"))
        line = dh.wait_for_stderr(procs[0], "metrics: http://")
        metrics = re.search(r"(http://127\.0\.0\.1:\d+)/metrics", line).group(1) + "/metrics"
        procs.append(agent(0))
        for p in procs:
            dh.wait_for_stderr(p, "round 0: status published to the store")
        fifo.lines(2)
        procs.append(agent(0))
        dh.wait_for_stderr(procs[2], "is full (2 nodes); waiting for the next one")

        r = dtrun("status", *endpoint, env=env)
        assert r.returncode == 0, r.stderr
        assert "nodes: 2 active, 1 spare, 0 quarantined" in r.stdout, r.stdout
        assert re.search(r"^SPARE +HOST +ADDRESS +WAITING IN ROUND$", r.stdout, re.M), r.stdout
        assert re.search(r"^3 +\S+ +\S+ +0$", r.stdout, re.M), r.stdout
        assert "QUARANTINED" not in r.stdout
        r = dtrun("status", "--json", *endpoint, env=env)
        [doc] = json.loads(r.stdout)
        assert doc["node_counts"] == {"active": 2, "spare": 1, "quarantined": 0}
        [spare] = doc["spares"]
        assert spare["arrival"] == 3 and spare["round"] == 0 and spare["host"], spare
        assert doc["quarantined"] == []

        body = metrics_until(metrics, r'^dtrun_nodes\{[^}]*state="spare"\} 1$')
        assert re.search(r'^dtrun_nodes\{[^}]*state="spare"\} 1$', body, re.M), body
        assert re.search(r'^dtrun_nodes\{[^}]*state="active"\} 2$', body, re.M), body
        assert re.search(r'^dtrun_nodes\{[^}]*state="quarantined"\} 0$', body, re.M), body
        assert re.search(r'^dtrun_node_state\{[^}]*state="running"\} 1$', body, re.M), body

        # Two machines in the job's quarantine list (as an agent writes them,
        # docs/agent.md "Quarantine"): one still out, one whose cooldown ran.
        now = time.time()
        for i, (host, until) in enumerate([("h-bad", now + 600), ("h-old", now - 60)]):
            record = {"machine": f"{host}-machine-key-0123", "host": host, "quarantines": 2,
                      "since": now - 900, "until": until, "cooldown_s": 600,
                      "reason": "rank 1 failed with SIGBUS", "rank": 1, "fault": "SIGBUS"}
            store(port, "set", f"dtrun/{run_id}/quarantine/{i}", json.dumps(record))
            store(port, "add", f"dtrun/{run_id}/quarantine/count", "1")
        r = dtrun("status", *endpoint, env=env)
        assert "nodes: 2 active, 1 spare, 1 quarantined" in r.stdout, r.stdout
        assert re.search(r"^h-bad +h-bad-machin +\S+ \S+ \(in \S+\) +2 +rank 1 failed with "
                         r"SIGBUS$", r.stdout, re.M), r.stdout
        assert "h-old" not in r.stdout
        body = metrics_until(metrics, r'^dtrun_nodes\{[^}]*state="quarantined"\} 1$')
        assert re.search(r'^dtrun_nodes\{[^}]*state="quarantined"\} 1$', body, re.M), body
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            p.communicate(timeout=60)
        fifo.close()
        dh.kill_marked(env["DTRUN_TEST_MARK"])


def test_stacks_with_several_runs_here_lists_them_and_asks_which(tmp_path):
    # It used to signal every job of the user on the machine.
    control = tmp_path / "control"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with running_job(tmp_path / "a", nproc=1, control=control) as (first, env), \
            running_job(tmp_path / "b", nproc=1, control=control) as (second, _):
        runs = {s["agent_pid"]: s["run_id"]
                for s in json.loads(dtrun("status", "--json", env=env).stdout)}
        assert sorted(runs) == sorted([first.pid, second.pid])
        r = dtrun("stacks", env=env)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.splitlines()
        assert lines[0] == ("dtrun stacks: 2 runs have agents here; choose one with --run-id ID "
                            "or --agent PID:")
        assert sorted(lines[1:]) == sorted(f"  --agent {pid}   (run {run})"
                                           for pid, run in runs.items())
        assert r.stdout == ""
        chosen = dtrun("stacks", "--json", f"--run-id={runs[second.pid]}", env=env)
        assert chosen.returncode == 0, chosen.stderr
        assert [a["agent_pid"] for a in json.loads(chosen.stdout)] == [second.pid]
        none = dtrun("stacks", "--run-id=no-such-run", env=env)
        assert none.returncode == 3 and "no running job with run id 'no-such-run'" in none.stderr


def test_status_watch_into_a_pipe_prints_plain_snapshots(tmp_path):
    with running_job(tmp_path, nproc=1) as (proc, env):
        watch = subprocess.Popen([str(dh.DTRUN), "status", "--watch", "0.1"], env=env,
                                 stdout=subprocess.PIPE, text=True)
        try:
            seen = [watch.stdout.readline() for _ in range(12)]
        finally:
            watch.kill()
            watch.wait()
        assert not any("\x1b" in line for line in seen), seen
        assert sum(line.startswith("run ") for line in seen) >= 2, seen
