"""--rdzv-backend=etcd-v3 (and its torchrun names etcd, etcd-v2) on the
command line: what --dry-run resolves, the one-line usage errors, and an
etcd cluster that nobody runs (a clear error, nothing left running). The
real cluster is in tests/e2e/test_etcd_rendezvous.py."""

import json
import os
import socket
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402


def dry_run(*flags):
    r = dh.run(["--dry-run", "--nnodes=2", *flags, "train.py"])
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["rendezvous"]


@pytest.mark.parametrize("name", ["etcd-v3", "etcd", "etcd-v2"])
def test_every_etcd_name_uses_the_v3_api(name):
    rdzv = dry_run(f"--rdzv-backend={name}", "--rdzv-endpoint=e1:2379,e2,[::1]:2380")
    assert rdzv["backend"] == "etcd-v3"
    assert rdzv["endpoint"] == "e1:2379,e2:2379,[::1]:2380"
    assert rdzv["protocol"] == "http"
    assert rdzv["hosts_store"] is False


def test_https_members_and_torchrun_conf_keys():
    rdzv = dry_run("--rdzv-backend=etcd", "--rdzv-endpoint=https://e1:2379",
                   "--rdzv-conf=cacert=/ca.pem,cert=/c.pem,key=/k.pem,etcd_prefix=/team,"
                   "lease_ttl=4")
    assert rdzv["protocol"] == "https"
    assert rdzv["etcd_prefix"] == "/team/"
    assert rdzv["lease_ttl_s"] == 4


@pytest.mark.parametrize("flags,needle", [
    (["--rdzv-backend=etcd-v3"], "needs --rdzv-endpoint"),
    (["--rdzv-backend=etcd-v3", "--rdzv-endpoint=e1:99999"], "'e1:99999'"),
    (["--rdzv-backend=etcd-v3", "--rdzv-endpoint=https://e1,http://e2"], "mix http"),
    (["--rdzv-backend=etcd-v3", "--rdzv-endpoint=e1", "--rdzv-conf=cacert=/ca.pem"],
     "need TLS"),
    (["--rdzv-backend=etcd-v3", "--rdzv-endpoint=e1", "--rdzv-conf=protocol=ftp"],
     "protocol=ftp"),
    (["--rdzv-backend=etcd-v3", "--rdzv-endpoint=https://e1", "--rdzv-conf=cert=/c.pem"],
     "cert and key go together"),
    (["--rdzv-backend=etcd-v3", "--rdzv-endpoint=e1", "--rdzv-conf=lease_ttl=1"],
     "at least 2 seconds"),
    (["--rdzv-backend=zookeeper", "--rdzv-endpoint=e1"], "not one of c10d, etcd-v3, static"),
])
def test_bad_etcd_settings_are_one_line_usage_errors(flags, needle):
    r = dh.run(["--nnodes=2", *flags, "--no-python", "/bin/true"])
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dtrun: error:"), r.stderr
    assert needle in lines[0], r.stderr


def test_a_cluster_nobody_runs_is_a_clear_error_and_leaves_nothing():
    # A bound socket that never listens: connections to it are refused, and
    # no other test can take the port while we hold it.
    with socket.socket() as hold:
        hold.bind(("127.0.0.1", 0))
        port = hold.getsockname()[1]
        env = dh.job_env()
        r = dh.run(["--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=etcd-v3",
                    f"--rdzv-endpoint=127.0.0.1:{port}",
                    "--rdzv-conf=join_timeout=2,request_timeout=1", "--no-python", "/bin/true"],
                   env=env)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert f"127.0.0.1:{port}" in last, r.stderr
    assert "no quorum or cannot be reached" in last, r.stderr
    assert dh.gone_within(env["DTRUN_TEST_MARK"]) == []
