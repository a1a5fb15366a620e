"""--preflight on real hosts (docs/agent.md, "Preflight"): three network-
namespace hosts, each its own address and hostname, real gloo workers. One
host's link is made slow with a token-bucket qdisc (`tbf`, both ways: on
its eth0 and on its port of the bridge), as a port that negotiated a lower
speed would be; the check must name exactly that host, keep it (warn) or
send it away (leave) so the job trains without it. A run with no slow host
names none. No timing is asserted: what was named, and that the job
trained."""

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import ddp_checks  # noqa: E402
import dtrun_helpers as dh  # noqa: E402
import netns_hosts  # noqa: E402
from netns_jobs import env, finish, train_args  # noqa: E402


def tbf_unavailable() -> str | None:
    """Why a link cannot be rate-limited here (tc or sch_tbf missing)."""
    if netns_hosts.unavailable_reason():
        return netns_hosts.unavailable_reason()
    probe = f"dtprobe{os.getpid()}"
    try:
        subprocess.run(["ip", "netns", "add", probe], check=True, capture_output=True)
        subprocess.run(["ip", "-n", probe, "link", "add", "v0", "type", "veth", "peer", "name",
                        "v1"], check=True, capture_output=True)
        r = subprocess.run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "v0",
                            "root", "tbf", "rate", "8mbit", "burst", "32kbit", "latency",
                            "400ms"], capture_output=True, text=True)
        if r.returncode != 0:
            return f"tc cannot add a tbf qdisc here: {r.stderr.strip()}"
    except (OSError, subprocess.CalledProcessError) as e:
        return f"cannot probe tc here: {e}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


REASON = tbf_unavailable()
if REASON:
    print(f"skipping the preflight tests: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

NPROC = 2
PORT = 29400
UNHEALTHY = 75
# A round closes at once when its MAX nodes are in: the long last call only
# keeps a slow-starting host in round 0, the one round the check runs in.
RDZV = "join_timeout=60,last_call_timeout=30,keep_alive_interval=1,keep_alive_max_attempt=3"
# Far below a veth's gigabytes per second, and fast enough that the check's
# exchanges over it (4 MiB each, three tries, two or three partners) take
# seconds.
SLOW_RATE = "100mbit"


def slow_down(hosts, index):
    """Host `index`'s link, both ways, through a token bucket."""
    tbf = ["tbf", "rate", SLOW_RATE, "burst", "32kbit", "latency", "400ms"]
    subprocess.run(["ip", "netns", "exec", f"{hosts.name}-h{index}", "tc", "qdisc", "add", "dev",
                    "eth0", "root", *tbf], check=True)
    subprocess.run(["ip", "netns", "exec", f"{hosts.name}-br", "tc", "qdisc", "add", "dev",
                    f"h{index}", "root", *tbf], check=True)


def args(nnodes, folder, *flags):
    return [str(dh.DTRUN), f"--nnodes={nnodes}", f"--nproc-per-node={NPROC}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={netns_hosts.Hosts.addr(1)}:{PORT}",
            "--rdzv-id=job1", f"--rdzv-conf={RDZV}", "--preflight", *flags,
            *train_args(folder, "--epochs", "1")]


def named_lines(stderr):
    return [line for line in stderr.splitlines() if "is slow:" in line]


def bandwidth_lines(stderr):
    # What the rate-limited link names; a compute figure is timed on the 2
    # CPUs that all six workers share, which this test does not judge.
    return [line for line in named_lines(stderr) if "is slow: bandwidth" in line]


def preflight_events(path):
    events = [json.loads(line) for line in path.read_text().splitlines()]
    return [e for e in events if e["event"] == "preflight"]


def run_three(tmp_path, nnodes, slow, *flags):
    """Every agent's (exit code, stderr), host 1 first."""
    with netns_hosts.Hosts(3) as hosts:
        if slow:
            slow_down(hosts, slow)
        e = env()
        procs = [hosts.start(i, args(nnodes, tmp_path, *flags,
                                     f"--event-log={tmp_path}/events-h{i}.jsonl"), e)
                 for i in (1, 2, 3)]
        return [(code, stderr) for code, _, stderr in finish(procs)]


def test_no_slow_host_names_none(tmp_path):
    for code, stderr in run_three(tmp_path, 3, None):
        assert code == 0, stderr
        assert "preflight: 3 of 3 node(s) measured" in stderr, stderr
        assert "no node far below the median" in stderr, stderr
        assert named_lines(stderr) == [], stderr
    ddp_checks.check_trained(tmp_path, 3 * NPROC)
    (event,) = preflight_events(tmp_path / "events-h1.jsonl")
    assert event["slow"] == [] and event["measured"] == 3, event


def test_a_rate_limited_host_is_named_and_kept_with_warn(tmp_path):
    for code, stderr in run_three(tmp_path, 3, 3):
        assert code == 0, stderr
        (line,) = bandwidth_lines(stderr)
        # Its figure against the job's median, in one line.
        assert "(host h3) is slow: bandwidth" in line and "against the job's median" in line, line
        assert "kept: --preflight-action=warn" in line, line
    ddp_checks.check_trained(tmp_path, 3 * NPROC)
    for i in (1, 2, 3):
        (event,) = preflight_events(tmp_path / f"events-h{i}.jsonl")
        slow_links = [s for s in event["slow"] if s["figure"] == "bandwidth"]
        assert [s["host"] for s in slow_links] == ["h3"], event
        assert event["action"] == "warn"


def test_with_leave_the_rate_limited_host_leaves_and_the_job_trains_without_it(tmp_path):
    (h1, h2, h3) = run_three(tmp_path, "2:3", 3, "--preflight-action=leave")
    code3, err3 = h3
    assert code3 == UNHEALTHY, err3
    assert "(host h3) is slow: bandwidth" in err3, err3
    assert "this node leaves the job (exit 75)" in err3, err3
    for code, stderr in (h1, h2):
        assert code == 0, stderr
        # Named in the round's end that h3's departure caused (a node may
        # see it before it read the verdict), with the evidence.
        assert "(host h3) is slow: bandwidth" in stderr, stderr
    # h1 hosts the endpoint: node 0, which judged, so it read the verdict.
    assert "it leaves the job (--preflight-action=leave)" in h1[1], h1[1]
    # Trained by the two others alone, in the round after h3 left; the
    # check ran once (round 0), not again.
    for r in ddp_checks.check_trained(tmp_path, 2 * NPROC):
        assert r["host"] in ("h1", "h2"), r
    assert len(preflight_events(tmp_path / "events-h1.jsonl")) == 1
