"""dtrun's command line end to end: usage errors, --help, --dry-run, PET_
defaults, and the script's arguments reaching the workers untouched."""

import json
import os
import resource
import signal
import subprocess
import sys
import uuid

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
from failure_summary import field, summary  # noqa: E402


def test_help_exits_0_and_groups_flags():
    r = dh.run(["--help"])
    assert r.returncode == 0
    for group in ("Worker group:", "Rendezvous:", "Supervision:", "Program:"):
        assert group in r.stdout


def test_unknown_flag_is_a_usage_error():
    r = dh.run(["--bogus", "--standalone", "x.py"])
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "unrecognized arguments: --bogus" in lines[0]
    assert "--help" in lines[0]


def test_missing_script_is_a_usage_error():
    r = dh.run(["--standalone"])
    assert r.returncode == 2
    assert "no training script" in r.stderr


def test_bad_values_are_usage_errors():
    for args in (["--nproc-per-node=zero", "x.py"], ["--nnodes=3:1", "x.py"],
                 ["--max-restarts=-1", "x.py"], ["--signals-to-handle=SIGKILL", "x.py"],
                 ["--no-python", "-m", "x"]):
        r = dh.run(["--standalone", *args])
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


SECONDS = "is not a number of seconds from 0 to 315360000 (10 years)"
POSITIVE = "is not a number of seconds from 0.001 to 315360000 (10 years)"


@pytest.mark.parametrize("args, message", [
    (["--max-restarts=-1"], "--max-restarts: '-1' is not a whole number from 0 to 1000000"),
    (["--max-restarts=99999999999999999999"],
     "--max-restarts: '99999999999999999999' is not a whole number from 0 to 1000000"),
    (["--stop-timeout=nan"], f"--stop-timeout: 'nan' {SECONDS}"),
    (["--stop-timeout=1e300"], f"--stop-timeout: '1e300' {SECONDS}"),
    (["--shutdown-timeout=inf"], f"--shutdown-timeout: 'inf' {SECONDS}"),
    (["--monitor-interval=-1"], f"--monitor-interval: '-1' {SECONDS}"),
    (["--master-port=65536"], "--master-port: '65536' is not a whole number from 0 to 65535"),
    (["--nproc-per-node=0"], "--nproc-per-node: '0' is not a whole number from 1 to 4096, "
     "'auto', 'cpu', 'gpu' or 'xpu'"),
    (["--nnodes=1:0x10"], "--nnodes MAX: '0x10' is not a whole number from 1 to 100000"),
    (["--nnodes=2", "--rdzv-endpoint=192.0.2.1", "--rdzv-conf=keep_alive_interval=0"],
     f"--rdzv-conf keep_alive_interval: '0' {POSITIVE}"),
    (["--nnodes=2", "--rdzv-endpoint=192.0.2.1", "--rdzv-conf=join_timeout=1e20"],
     f"--rdzv-conf join_timeout: '1e20' {POSITIVE}"),
    (["--nnodes=2", "--rdzv-endpoint=192.0.2.1", "--rdzv-conf=keep_alive_max_attempt=2.5"],
     "--rdzv-conf keep_alive_max_attempt: '2.5' is not a whole number from 1 to 1000000"),
    (["--nnodes=2", "--rdzv-endpoint=192.0.2.1", "--rdzv-conf=store_threads=1025"],
     "--rdzv-conf store_threads: '1025' is not a whole number from 0 to 1024"),
    (["--nnodes=2", "--rdzv-endpoint=192.0.2.1", "--rdzv-conf=store_threads=-1"],
     "--rdzv-conf store_threads: '-1' is not a whole number from 0 to 1024"),
    # No resolver can ever answer these: refused at once, not retried.
    (["--nnodes=2", "--rdzv-endpoint=no such:29400"],
     "rendezvous endpoint 'no such:29400': 'no such' is neither an IP address nor a host name "
     "(labels of letters, digits, '-' and '_', 1-63 characters each, 253 in all); fix the "
     "address"),
    (["--nnodes=2", "--rdzv-endpoint=node..1"],
     "rendezvous endpoint 'node..1': 'node..1' is neither an IP address nor a host name "
     "(labels of letters, digits, '-' and '_', 1-63 characters each, 253 in all); fix the "
     "address"),
])
def test_bad_numbers_are_one_line_usage_errors_naming_the_flag(args, message):
    r = dh.run([*args, "--dry-run", "x.py"])
    assert r.returncode == 2, r
    assert r.stdout == ""
    assert r.stderr.strip().splitlines() == [f"dtrun: error: {message}"]


def test_a_bad_number_from_a_pet_variable_names_the_variable():
    r = dh.run(["--dry-run", "x.py"], env=dh.job_env(PET_STOP_TIMEOUT="-5"))
    assert r.returncode == 2, r
    assert r.stderr.strip().splitlines() == [f"dtrun: error: PET_STOP_TIMEOUT (--stop-timeout): "
                                             f"'-5' {SECONDS}"]
    r = dh.run(["--dry-run", "x.py"], env=dh.job_env(PET_NPROC_PER_NODE="1e3"))
    assert r.returncode == 2, r
    assert r.stderr.strip().splitlines() == [
        "dtrun: error: PET_NPROC_PER_NODE (--nproc-per-node): '1e3' is not a whole number from 1 "
        "to 4096, 'auto', 'cpu', 'gpu' or 'xpu'"]
    r = dh.run(["--dry-run", "x.py"], env=dh.job_env(PET_SHUTDOWN_TIMEOUT="nan"))
    assert r.returncode == 2, r
    assert r.stderr.strip().splitlines() == [f"dtrun: error: PET_SHUTDOWN_TIMEOUT: 'nan' {SECONDS}"]


def test_an_event_log_that_cannot_be_written_fails_the_start(tmp_path):
    ran = tmp_path / "ran"
    for log in ("/dev/full", str(tmp_path / "missing" / "events.jsonl")):
        r = dh.run(["--standalone", f"--event-log={log}", "--no-python", "touch", str(ran)])
        assert r.returncode == 1, r
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert lines[0].startswith("dtrun: error: cannot "), lines[0]
        assert f"the event log {log}" in lines[0] and "(--event-log)" in lines[0], lines[0]
        assert not ran.exists(), "no worker may start when the event log is unusable"
    assert "No space left on device" in dh.run(
        ["--standalone", "--event-log=/dev/full", "--no-python", "true"]).stderr


def test_a_python_hook_that_cannot_be_written_leaves_no_run_folder(tmp_path):
    logs = tmp_path / "logs"
    script = tmp_path / "t.py"
    script.write_text("")

    def no_file_writes():  # as a full disk: every write to a file fails (EFBIG)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

    r = subprocess.run([str(dh.DTRUN), "--standalone", f"--log-dir={logs}", str(script)],
                       env=dh.job_env(), capture_output=True, text=True, timeout=60,
                       preexec_fn=no_file_writes)
    assert r.returncode == 1, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot write the Python hook" in lines[0], r.stderr
    assert "File too large" in lines[0], lines[0]
    assert list(logs.iterdir()) == [], "an empty run folder was left behind"


def test_an_unresolvable_endpoint_is_said_at_once_then_retried():
    # Its first line, long before the join timeout: the name may still
    # appear (a pod or Slurm job starting), so it is not an error yet.
    p = subprocess.Popen([str(dh.DTRUN), "--nnodes=2", "--rdzv-endpoint=no-such-host.invalid:29400",
                          "--rdzv-conf=join_timeout=300", "--no-python", "true"],
                         env=dh.job_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    try:
        first = p.stderr.readline()
        still_running = p.poll() is None
    finally:
        p.kill()
        p.communicate()
    assert first.startswith("dtrun: warning: cannot resolve the rendezvous endpoint "
                            "'no-such-host.invalid' ("), first
    assert first.endswith("); retrying for up to 300 s in case the name appears (a pod or job "
                          "still starting); check --rdzv-endpoint\n"), first
    assert still_running


def test_multi_node_dry_run_shows_how_the_nodes_meet():
    r = dh.run(["--nnodes=2:3", "--rdzv-endpoint=192.0.2.1", "--rdzv-id=job9", "--dry-run",
                "x.py"])
    assert r.returncode == 0, r.stderr
    config = json.loads(r.stdout)
    assert config["run_id"] == "job9"
    assert config["rendezvous"]["backend"] == "c10d"
    assert config["rendezvous"]["endpoint"] == "192.0.2.1:29400"
    assert config["rendezvous"]["hosts_store"] is False
    assert config["rendezvous"]["store_threads"] == 0  # the agent's own loop
    r = dh.run(["--nnodes=2", "--rdzv-endpoint=192.0.2.1", "--rdzv-conf=store_threads=4",
                "--dry-run", "x.py"])
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["rendezvous"]["store_threads"] == 4


def test_dry_run_prints_the_resolved_configuration():
    r = dh.run(["--standalone", "--nproc_per_node=3", "--max-restarts=2", "--dry-run",
                "train.py", "--lr", "3"])
    assert r.returncode == 0, r.stderr
    config = json.loads(r.stdout)
    assert config["nproc_per_node"] == 3
    assert config["nnodes"] == {"min": 1, "max": 1}
    assert config["rdzv_endpoint"] == "127.0.0.1:0"
    assert len(config["run_id"]) == 36
    assert config["argv"][1:] == ["-u", "train.py", "--lr", "3"]
    ranks = [w["env"]["LOCAL_RANK"] for w in config["workers"]]
    assert ranks == ["0", "1", "2"]
    assert all(w["env"]["TORCHELASTIC_MAX_RESTARTS"] == "2" for w in config["workers"])


def test_dry_run_shows_what_the_agent_is_handed_whole():
    # What main.cpp once patched into the agent's options after --dry-run
    # had printed them (issue 47): the interpreter the failure hints name,
    # and the flags dtrun --hosts gives each host's agent.
    r = dh.run(["--standalone", "--dry-run", "--stop-on-stdin-eof", "--prefix-console",
                "--python=/usr/bin/python3", "train.py"])
    assert r.returncode == 0, r.stderr
    config = json.loads(r.stdout)
    assert config["interpreter"] == "/usr/bin/python3 (--python)"
    assert config["stop_on_stdin_eof"] is True
    assert config["logs"]["prefix_console"] is True
    assert config["logs"]["line_prefix_template"] == "[rank$rank]:"
    plain = json.loads(dh.run(["--standalone", "--dry-run", "--no-python", "/bin/true"]).stdout)
    assert plain["interpreter"] is None
    assert plain["stop_on_stdin_eof"] is False
    assert plain["logs"]["prefix_console"] is False


def test_dry_run_of_arguments_that_are_not_utf8_prints_json():
    # Python hands such bytes to dtrun unchanged (surrogateescape).
    r = dh.run(["--standalone", "--dry-run", "--no-python", "/bin/echo", "caf\udce9"])
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["argv"] == ["/bin/echo", "caf\ufffd"]


def test_pet_variables_are_defaults_and_flags_win():
    env = dh.job_env(PET_NPROC_PER_NODE="4", PET_MAX_RESTARTS="1", PET_STANDALONE="1")
    config = json.loads(dh.run(["--dry-run", "x.py"], env=env).stdout)
    assert config["nproc_per_node"] == 4
    assert config["max_restarts"] == 1
    config = json.loads(dh.run(["--dry-run", "--nproc-per-node=2", "x.py"], env=env).stdout)
    assert config["nproc_per_node"] == 2


def test_script_arguments_reach_the_workers_untouched(tmp_path):
    out = tmp_path / "argv"
    script = tmp_path / "show_args.py"
    script.write_text(
        "import json, os, sys\n"
        f"open({str(out)!r} + os.environ['RANK'], 'w').write(json.dumps(sys.argv[1:]))\n")
    r = dh.run(["--standalone", "--nproc-per-node=2", "--python", dh.PYTHON, str(script),
                "--lr", "3", "--nproc-per-node=x", "--", "--standalone"])
    assert r.returncode == 0, r.stderr
    for rank in range(2):
        args = json.loads((tmp_path / f"argv{rank}").read_text())
        assert args == ["--lr", "3", "--nproc-per-node=x", "--", "--standalone"]


def test_double_dash_separates_the_program(tmp_path):
    out = tmp_path / "out"
    r = dh.run(["--standalone", "--no-python", "--", "/bin/sh", "-c",
                f"echo \"$0 $1\" > {out}", "a", "b"])
    assert r.returncode == 0, r.stderr
    assert out.read_text().strip() == "a b"


def test_module_mode_runs_python_dash_m(tmp_path):
    (tmp_path / "pkg_dtrun_test").mkdir()
    (tmp_path / "pkg_dtrun_test" / "__init__.py").write_text("")
    (tmp_path / "pkg_dtrun_test" / "main.py").write_text(
        "import os, sys\n"
        "open(os.path.join(sys.argv[1], 'ran'), 'w').write(sys.argv[2])\n")
    env = dh.job_env(PYTHONPATH=str(tmp_path))
    r = dh.run(["--standalone", "--python", dh.PYTHON, "-m", "pkg_dtrun_test.main",
                str(tmp_path), "ok"], env=env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "ran").read_text() == "ok"


def test_python_comes_from_dtrun_python(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(f"import sys; open({str(tmp_path / 'exe')!r}, 'w').write(sys.executable)\n")
    r = dh.run(["--standalone", str(script)], env=dh.job_env(DTRUN_PYTHON=dh.PYTHON))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "exe").read_text() == dh.PYTHON


def test_nnodes_1_without_endpoint_runs_like_standalone(tmp_path):
    out = tmp_path / "env"
    r = dh.run(["--nnodes=1", "--rdzv-id=myjob", "--nproc-per-node=2", "--no-python",
                "/bin/sh", "-c", f'echo "$TORCHELASTIC_RUN_ID $WORLD_SIZE" > {out}$RANK'])
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "env0").read_text().split() == ["myjob", "2"]


def test_nnodes_1_without_run_id_or_master_port_gets_a_fresh_run_id(tmp_path):
    # The newest torchrun's run(): static, no endpoint, no --master-port,
    # one node -> standalone with a uuid4 run id. An explicit --master-port
    # keeps the static backend and its default run id "none".
    def run_id(*flags):
        out = tmp_path / "id"
        r = dh.run([*flags, "--nproc-per-node=1", "--no-python", "/bin/sh", "-c",
                    f'echo "$TORCHELASTIC_RUN_ID" > {out}'])
        assert r.returncode == 0, r.stderr
        return out.read_text().strip()

    first, second = run_id(), run_id()
    assert first != second
    for value in (first, second):
        assert uuid.UUID(value).version == 4 and str(uuid.UUID(value)) == value
    assert run_id(f"--master-port={dh.free_port()}") == "none"


def test_error_file_message_is_reported_and_kept_in_log_dir(tmp_path):
    worker = ('[ "$RANK" = 1 ] || exit 0; '
              'echo \'{"message": {"message": "RuntimeError: boom", "extraInfo": {}}}\' '
              '> "$TORCHELASTIC_ERROR_FILE"; exit 1')
    r = dh.run(["--standalone", "--nproc-per-node=2", f"--log-dir={tmp_path}", "--no-python",
                "/bin/sh", "-c", worker])
    assert r.returncode == 1
    assert "dtrun:   error     : RuntimeError: boom" in r.stderr  # the failure summary
    error_files = list(tmp_path.glob("*/attempt_0/1/error.json"))
    assert len(error_files) == 1


def test_error_file_named_by_the_summary_outlives_dtrun_without_log_dir(tmp_path):
    # Without --log-dir the run folder is temporary; a failure summary that
    # shows an error_file must not point at a file dtrun then deletes.
    worker = ('[ "$RANK" = 1 ] || exit 0; '
              'echo \'{"message": {"message": "RuntimeError: boom", "extraInfo": {}}}\' '
              '> "$TORCHELASTIC_ERROR_FILE"; exit 1')
    r = dh.run(["--standalone", "--nproc-per-node=2", "--no-python", "/bin/sh", "-c", worker],
               env=dh.job_env(TMPDIR=str(tmp_path)))
    assert r.returncode == 1, r.stderr
    named = field(summary(r.stderr), "error_file")
    assert named.startswith(str(tmp_path)) and os.path.isfile(named), r.stderr
    assert "RuntimeError: boom" in open(named).read()
    run_dir = os.path.dirname(os.path.dirname(os.path.dirname(named)))
    assert f"dtrun: run folder: {run_dir} (kept: it holds the error file named above; " \
           "choose the folder with --log-dir)" in r.stderr


def test_a_successful_run_without_log_dir_leaves_no_run_folder(tmp_path):
    r = dh.run(["--standalone", "--nproc-per-node=2", "--no-python", "/bin/true"],
               env=dh.job_env(TMPDIR=str(tmp_path)))
    assert r.returncode == 0, r.stderr
    assert list(tmp_path.iterdir()) == []
    assert "run folder" not in r.stderr


@pytest.mark.parametrize("nnodes", ["2", "1:2", "2:4"])
def test_standalone_with_several_nodes_is_a_usage_error(nnodes):
    # torchrun waits for nodes that cannot reach its private store; dtrun
    # ran one node's workers while --dry-run said nnodes 2.
    for extra in ([], ["--dry-run"]):
        r = dh.run(["--standalone", f"--nnodes={nnodes}", "--nproc-per-node=2", *extra,
                    "--no-python", "/bin/true"])
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert lines[0].startswith(f"dtrun: error: --standalone runs a single node, but "
                                   f"--nnodes={nnodes} asks for more; ")
        assert "--rdzv-endpoint=HOST:PORT" in lines[0]
        assert r.stdout == ""


def test_standalone_with_pet_nnodes_names_the_variable():
    r = dh.run(["--standalone", "--no-python", "/bin/true"], env=dh.job_env(PET_NNODES="2"))
    assert r.returncode == 2, r.stderr
    assert "but PET_NNODES (--nnodes)=2 asks for more" in r.stderr


@pytest.mark.parametrize("nnodes", ["1", "1:1"])
def test_standalone_with_one_node_is_fine(nnodes):
    r = dh.run(["--standalone", f"--nnodes={nnodes}", "--dry-run", "--no-python", "/bin/true"])
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["nnodes"] == {"min": 1, "max": 1}


def test_help_lists_the_commands_every_backend_and_no_internal_defaults():
    # Issue 33: dtrun status/stacks appeared nowhere in --help, the backends
    # listed only static and c10d, --metrics-port showed its internal -1.
    text = dh.run(["--help"]).stdout
    for command in ("dtrun status", "dtrun stacks", "dtrun help"):
        assert f"\n  {command} " in text, command
    assert "Rendezvous backend (static, c10d, etcd-v3, etcd, etcd-v2)" in text
    metrics = next(line for line in text.splitlines() if "--metrics-port" in line)
    assert "-1" not in metrics, metrics


def test_completion_reads_the_backends_and_completes_no_file_for_a_number():
    # packaging/cli_help.py derives what each flag's value completes to
    # from --help: --hang-timeout ("... heartbeat file ...") took file names.
    sys.path.insert(0, str(dh.SOURCE_DIR / "packaging"))
    import cli_help
    options = cli_help.parse_options(dh.run(["--help"]).stdout)[0]
    by_name = {n: o for o in options for n in o.names}
    assert by_name["--rdzv-backend"].choices == ["static", "c10d", "etcd-v3", "etcd", "etcd-v2"]
    assert by_name["--hang-timeout"].kind == ""
    assert by_name["--log-dir"].kind == "dir"
    assert by_name["--event-log"].kind == "file"
