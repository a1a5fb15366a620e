"""dtrun --hosts without sshd (docs/ssh.md): a fake `ssh` that runs the
remote command on this machine, so the launcher's side (the bounded
set-up of connections, the host list's bounds, --dry-run's quoting) is
tested everywhere; tests/e2e/test_ssh_launch.py has real ssh."""

import os
import shlex
import stat
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

FAST_RDZV = "join_timeout=60,last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3"


def script(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_ssh_connections_are_set_up_a_few_at_a_time_and_every_host_joins(tmp_path):
    log = tmp_path / "log"
    # ssh's last two words are the host and the remote command; "begin"
    # when the launcher starts this connection.
    ssh = script(tmp_path / "ssh", '#!/bin/sh\nfor last; do :; done\n'
                 'echo begin >> "$FANOUT_LOG"\nexec sh -c "$last"\n')
    # The remote dtrun: "agent" before it runs (and so before it says it
    # started, which frees the connection's slot).
    remote = script(tmp_path / "remote-dtrun",
                    f'#!/bin/sh\necho agent >> "$FANOUT_LOG"\nexec {shlex.quote(str(dh.DTRUN))} "$@"\n')
    hosts, fanout = 8, 2
    r = dh.run([f"--hosts=127.0.0.[1-{hosts}]", f"--ssh={ssh}", f"--remote-dtrun={remote}",
                f"--ssh-fanout={fanout}", f"--rdzv-conf={FAST_RDZV}", "--no-python", "true"],
               env=dh.job_env(FANOUT_LOG=str(log)), cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    events = log.read_text().split()
    assert events.count("begin") == hosts and events.count("agent") == hosts, events
    # Connection k starts only once k - fanout agents run: at most
    # `fanout` connections are being set up at any moment.
    begun = agents = 0
    for event in events:
        if event == "agent":
            agents += 1
            continue
        begun += 1
        assert agents >= begun - fanout, events
    assert "dtrun-ssh:" not in r.stdout  # the launcher's own lines are not shown


@pytest.mark.parametrize("value", ["0", "-1", "x", "100001"])
def test_a_bad_ssh_fanout_is_one_line(value):
    r = dh.run(["--hosts=a", f"--ssh-fanout={value}", "--dry-run", "t.py"])
    assert r.returncode == 2, r
    assert r.stderr.strip().splitlines() == [
        f"dtrun: error: --ssh-fanout: '{value}' is not a whole number from 1 to 100000"], r.stderr


def test_ssh_fanout_is_in_help_and_not_passed_to_the_hosts():
    assert "--ssh-fanout" in dh.run(["--help"]).stdout
    r = dh.run(["--hosts=a,b", "--ssh-fanout=1", "--dry-run", "t.py"])
    assert r.returncode == 0, r.stderr
    assert "--ssh-fanout" not in r.stdout


def test_dry_run_escapes_control_characters_of_exported_values(tmp_path):
    value = "line1\nline2\x1b[31mred"
    r = dh.run(["--hosts=a,b", "--export=WEIRD", "--dry-run", "t.py"],
               env=dh.job_env(WEIRD=value), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and "\x1b" not in r.stdout, r.stdout
    # Pasted into bash, each line is the very argv dtrun runs.
    argv = subprocess.run(["bash", "-c", 'printf "%s\\0" ' + lines[0].split(" ", 1)[1]],
                          capture_output=True, check=True).stdout.split(b"\0")
    remote = shlex.split(argv[-2].decode())
    assert f"WEIRD={value}" in remote, remote


def test_a_hostfile_that_is_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "hosts"
    os.mkfifo(fifo)
    r = dh.run([f"--hostfile={fifo}", "--dry-run", "t.py"], timeout=30)
    assert (r.returncode, r.stderr) == (2, (
        f"dtrun: error: --hostfile: '{fifo}' is not a regular file (a FIFO, device or folder); "
        "give a file with one 'host slots=N' per line\n"))


def test_host_lists_are_bounded_as_a_whole(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a[0-999999]\nb[0-999999]\nc[0-999999]\n")  # 39 bytes
    r = dh.run([f"--hostfile={hostfile}", "--dry-run", "t.py"], timeout=30)
    assert (r.returncode, r.stderr) == (2, (
        f"dtrun: error: hostfile {hostfile} line 1: more than 100000 hosts in all, the most "
        "--nnodes allows; list fewer hosts\n"))
    r = dh.run(["--hosts=node[0-100000]", "--dry-run", "t.py"], timeout=30)
    assert (r.returncode, r.stderr) == (2, (
        "dtrun: error: --hosts: more than 100000 hosts in all, the most --nnodes allows; list "
        "fewer hosts\n"))


def test_an_ssh_that_ends_well_before_dtrun_started_is_a_failure(tmp_path):
    # An ssh (wrapper) that exits 0 without running the remote command:
    # nothing ran there, which used to pass as a job that succeeded.
    ssh = script(tmp_path / "ssh", "#!/bin/sh\nexit 0\n")
    r = dh.run(["--hosts=127.0.0.[1-3]", f"--ssh={ssh}", "--ssh-fanout=1",
                f"--rdzv-conf={FAST_RDZV}", "--no-python", "true"], cwd=tmp_path, timeout=120)
    assert r.returncode == 1, r
    assert ("dtrun: error: host 127.0.0.1: ssh ended (exit 0) before dtrun started there"
            in r.stderr), r.stderr


def test_a_host_whose_dtrun_never_starts_fails_the_launch_at_the_join_timeout(tmp_path):
    # The first host's login hangs (its ssh never runs the command); the
    # others start and wait for the rendezvous port it was to report. The
    # launch used to wait for ever; now that host's set-up deadline (the
    # join timeout) fails it, and every ssh is ended.
    # ssh's last two words are the host and the remote command.
    ssh = script(tmp_path / "ssh", '#!/bin/sh\nfor last; do :; done\n'
                 'eval "host=\\${$(($# - 1))}"\n'
                 '[ "$host" = 127.0.0.1 ] && exec sleep 600\nexec sh -c "$last"\n')
    r = dh.run(["--hosts=127.0.0.[1-3]", f"--ssh={ssh}",
                "--rdzv-conf=join_timeout=2,last_call_timeout=1", "--stop-timeout=2",
                "--no-python", "true"], cwd=tmp_path, timeout=120)
    assert r.returncode == 1, r
    assert ("dtrun: error: host 127.0.0.1: dtrun did not start there within 2 s of ssh starting"
            in r.stderr), r.stderr


def test_an_export_that_is_not_set_here_is_a_warning():
    # It used to be skipped without a word: the hosts ran without it.
    env = dh.job_env(SET_HERE_X="1")
    env.pop("NOT_SET_HERE_X", None)
    r = dh.run(["--hosts=a,b", "--export=NOT_SET_HERE_X,SET_HERE_X,GIVEN_X=2", "--dry-run",
                "t.py"], env=env)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [
        "dtrun: warning: --export NOT_SET_HERE_X: not set here, so the hosts do not get it; "
        "export it first or write --export NOT_SET_HERE_X=VALUE"]
    assert "SET_HERE_X=1" in r.stdout and "GIVEN_X=2" in r.stdout
    quiet = dh.run(["--hosts=a,b", "--export=NOT_SET_HERE_X", "-q", "--dry-run", "t.py"], env=env)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
