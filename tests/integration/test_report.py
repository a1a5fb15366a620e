"""dtrun report: a real job's event log read back as its timeline and
goodput, checked against the log's own lines; --json, --plot, and bad
input."""

import json
import os
import sys
import xml.etree.ElementTree as ET
from datetime import datetime

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

WORKER = dh.SOURCE_DIR / "tests" / "pyhelpers" / "report_worker.py"


def seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def events(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_failing_once(tmp_path):
    """The job: 2 workers, rank 1 fails in the first round, then success."""
    log = tmp_path / "events.jsonl"
    r = dh.run(["--standalone", "--nproc-per-node=2", "--max-restarts=2", "--event-log", str(log),
                f"--python={dh.PYTHON}", str(WORKER), str(tmp_path / "marker")])
    assert r.returncode == 0, r.stderr
    return log


def test_report_of_a_job_that_failed_once(tmp_path):
    log = run_failing_once(tmp_path)
    lines = events(log)
    r = dh.run(["report", str(log), "--json"])
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    report = json.loads(r.stdout)

    rounds = {e["round"] for e in lines if e["event"] == "rendezvous_completed"}
    assert [x["round"] for x in report["rounds"]] == sorted(rounds) == [0, 1]
    assert len(report["incidents"]) == 1
    assert report["restarts"] == max(e["count"] for e in lines if e["event"] == "restart") == 1
    assert report["outcome"]["state"] == "succeeded"
    assert report["outcome"]["exit_code"] == 0
    assert 0 < report["goodput"] < 1

    incident = report["incidents"][0]
    assert incident["round"] == 0
    assert incident["rank"] == 1
    logged = [e for e in lines if e["event"] == "incident"]
    # Until the agent writes `incident` events, the class comes from the
    # failure: no error file, a plain non-zero exit.
    assert incident["class"] == (logged[0]["class"] if logged else "exit")
    failed = next(e for e in lines if e["event"] == "worker_failed")
    running_again = max(seconds(e["time"]) for e in lines
                        if e["event"] == "worker_started" and e["round"] == 1)
    assert abs(incident["recover_s"] - (running_again - seconds(failed["exit_time"]))) < 1

    started = seconds(next(e for e in lines if e["event"] == "agent_started")["time"])
    exited = seconds(next(e for e in lines if e["event"] == "agent_exiting")["time"])
    assert abs(report["total_s"] - (exited - started)) < 0.002
    lost = sum(report["lost_s"].values())
    assert report["productive_s"] + lost == pytest.approx(report["total_s"], abs=0.01)

    text = dh.run(["report", str(log)])
    assert text.returncode == 0, text.stderr
    assert "2 rounds, 1 incident, 1 restart" in text.stdout
    assert f"goodput {report['goodput'] * 100:.1f}%" in text.stdout
    assert "rank 1 on " in text.stdout


def test_plot_names_every_incident_class(tmp_path):
    log = run_failing_once(tmp_path)
    svg = tmp_path / "timeline.svg"
    r = dh.run(["report", str(log), "--json", "--plot", str(svg)])
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    root = ET.parse(svg).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = ["".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")]
    for incident in report["incidents"]:
        assert f"{incident['class']} (round {incident['round']})" in texts
    assert any(f"goodput {report['goodput'] * 100:.1f}%" in t for t in texts)


def test_lines_that_are_not_events_are_skipped_and_said(tmp_path):
    log = run_failing_once(tmp_path)
    noisy = tmp_path / "noisy.jsonl"
    noisy.write_text("a stray line\n" + log.read_text() + '{"half": ')
    r = dh.run(["report", str(noisy), "--json"])
    assert r.returncode == 0, r.stderr
    assert r.stderr == "dtrun report: skipped 2 lines: not a JSON object with a time and an event\n"
    assert json.loads(r.stdout)["skipped_lines"] == 2


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("not an event\n")
    cases = {
        (str(tmp_path / "missing.jsonl"),): "cannot read",
        (str(tmp_path),): "is a directory",
        (str(garbage),): "no dtrun event in",
        # Endless: read up to the cap, not until the memory runs out.
        ("/dev/zero",): "not an event log",
        (): "name the event log",
    }
    for args, says in cases.items():
        r = dh.run(["report", *args])
        assert r.returncode == 2, (args, r.stderr)
        assert r.stdout == ""
        assert r.stderr.count("\n") == 1 and says in r.stderr, (args, r.stderr)
    r = dh.run(["report", "--help"])
    assert r.returncode == 0 and "--plot" in r.stdout


def test_unwritable_plot_is_one_line_and_exit_1(tmp_path):
    log = run_failing_once(tmp_path)
    r = dh.run(["report", str(log), "--plot", str(tmp_path / "no" / "such" / "dir.svg")])
    assert r.returncode == 1
    assert r.stderr.startswith("dtrun report: cannot write the plot to ")
    assert r.stderr.count("\n") == 1


def test_a_log_of_many_rounds_is_reported_whole(tmp_path):
    """20,000 rounds, each ended by an incident of a class of its own (a
    hostile or a very long log): every round, incident and class is in the
    report. How fast is not asserted here (a timing would fail by chance on
    a loaded machine): the report looks each round's incident and class up
    instead of scanning them all per round, which took 115 s for 100,000
    rounds and now about 5 s; the timeout only guards against a hang."""
    rounds = 20_000
    lines = ['{"time": "2026-01-01T00:00:00.000Z", "event": "agent_started", "host": "h", '
             '"agent_pid": 7, "run_id": "big", "nproc_per_node": 1}']
    for k in range(rounds):
        at = (f"2026-01-{1 + k // 86400:02d}T{k // 3600 % 24:02d}:{k // 60 % 60:02d}:"
              f"{k % 60:02d}")
        lines.append(f'{{"time": "{at}.100Z", "event": "rendezvous_completed", "host": "h", '
                     f'"agent_pid": 7, "round": {k}, "world_size": 1, "ranks": [0, 0]}}')
        lines.append(f'{{"time": "{at}.200Z", "event": "worker_started", "host": "h", '
                     f'"agent_pid": 7, "round": {k}}}')
        if k % 2 == 0:
            lines.append(f'{{"time": "{at}.500Z", "event": "incident", "host": "h", '
                         f'"agent_pid": 7, "round": {k}, "class": "c{k}", '
                         f'"failed_at": "{at}.500Z"}}')
        else:
            lines.append(f'{{"time": "{at}.500Z", "event": "worker_failed", "host": "h", '
                         f'"agent_pid": 7, "round": {k}, "rank": 0, "exit_code": 1}}')
    log = tmp_path / "big.jsonl"
    log.write_text("\n".join(lines) + "\n")
    r = dh.run(["report", str(log), "--plot", str(tmp_path / "big.svg")], timeout=600)
    assert r.returncode == 0, r.stderr
    assert f"{rounds} rounds, {rounds} incidents" in r.stdout
    ET.parse(tmp_path / "big.svg")
    r = dh.run(["report", str(log), "--json"], timeout=600)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert len(report["rounds"]) == rounds and len(report["incidents"]) == rounds
    assert len(report["lost_s"]) == rounds // 2 + 2  # start-up, exit, and a class each
