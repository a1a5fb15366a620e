"""Every flag and alias of the real torchrun (the contract's torch from
PyPI, tests/pyhelpers/torch_pypi.py), given to dtrun: accepted with the
same meaning, shown by `dtrun --dry-run`, or refused with the one line
docs/compatibility.md gives for it ("Flags dtrun refuses").

The flag list is read from the installed torchrun's `--help`, so a newer
torch with a new flag fails test_every_torchrun_flag_is_known_here until
dtrun takes it (a sample below) or the page refuses it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Callable

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import torch_pypi  # noqa: E402

COMPATIBILITY = dh.SOURCE_DIR / "docs" / "compatibility.md"
# A node that is never reached: the dry run resolves, it does not connect.
FAR = "192.0.2.1"
MULTI = ["--nnodes=2", f"--rdzv-endpoint={FAR}", "--rdzv-id=job7"]
STATIC = ["--nnodes=2", f"--master-addr={FAR}", "--master-port=29555"]


def torchrun_help_options() -> list[list[str]]:
    """The option strings of the installed torchrun's --help, one list per
    option (its spellings), -h/--help left out. argparse writes each option
    as '  -x, --long VALUE' at the start of a line of the 'options:' part."""
    r = torch_pypi.run([torch_pypi.require(), "-m", "torch.distributed.run", "--help"],
                       timeout=300)
    assert r.returncode == 0, r.stderr
    part = r.stdout.split("\noptions:\n", 1)[1]
    options = []
    for line in part.splitlines():
        m = re.match(r"^  (-\S.*?)(?:\s{2,}.*)?$", line)
        if not m:
            continue
        spellings = [s.split(" ")[0] for s in m.group(1).split(", ")]
        if "--help" not in spellings:
            options.append(spellings)
    return options


def refused_flags() -> dict[str, str]:
    """docs/compatibility.md's "Flags dtrun refuses": flag -> the line
    dtrun prints after 'dtrun: error: '."""
    text = COMPATIBILITY.read_text()
    part = text.split("\n## Flags dtrun refuses\n", 1)[1].split("\n## ", 1)[0]
    refused = {}
    for line in part.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`-"):
            continue
        message = cells[1].strip("`")
        for flag in re.findall(r"`(-[^`]+)`", cells[0]):
            refused[flag] = message
    return refused


def first_worker_env(c: dict) -> dict:
    return c["workers"][0]["env"]


@dataclass
class sample:
    """One torchrun flag given to dtrun: its value (None: a switch), the
    other flags it needs, and what the dry run must show for it."""
    value: str | None
    shows: Callable[[dict], bool]
    extra: list[str] = field(default_factory=list)
    script: str = "x.py"
    env: dict[str, str] = field(default_factory=dict)


# Keyed by the option's first spelling in torchrun's --help.
SAMPLES: dict[str, sample] = {
    "--nnodes": sample("2", lambda c: c["nnodes"] == {"min": 2, "max": 2},
                       [f"--rdzv-endpoint={FAR}"]),
    "--nproc-per-node": sample("3", lambda c: c["nproc_per_node"] == 3
                               and len(c["workers"]) == 3),
    "--rdzv-backend": sample("c10d", lambda c: c["rendezvous"]["backend"] == "c10d", MULTI),
    "--rdzv-endpoint": sample(f"{FAR}:1234",
                              lambda c: c["rendezvous"]["endpoint"] == f"{FAR}:1234",
                              ["--nnodes=2"]),
    "--rdzv-id": sample("job42", lambda c: c["run_id"] == "job42",
                        ["--nnodes=2", f"--rdzv-endpoint={FAR}"]),
    "--rdzv-conf": sample("join_timeout=77,cas_backoff_max_seconds=1",
                          lambda c: c["rendezvous"]["join_timeout_s"] == 77, MULTI),
    "--standalone": sample(None, lambda c: c["standalone"]
                           and c["rdzv_endpoint"] == "127.0.0.1:0"),
    "--max-restarts": sample("4", lambda c: c["max_restarts"] == 4
                             and first_worker_env(c)["TORCHELASTIC_MAX_RESTARTS"] == "4"),
    # Accepted, no effect: dtrun reacts to process exits, it does not poll.
    "--monitor-interval": sample("2", lambda c: True),
    # Accepted, no effect: it only matters for function entry points.
    "--start-method": sample("fork", lambda c: True),
    "--event-log-handler": sample("console", lambda c: c["event_log"] == "-"),
    "--role": sample("trainer", lambda c: c["role"] == "trainer"
                     and first_worker_env(c)["ROLE_NAME"] == "trainer"),
    "-m": sample(None, lambda c: c["argv"][1:] == ["-u", "-m", "pkg.main"], script="pkg.main"),
    "--no-python": sample(None, lambda c: c["argv"] == ["/bin/true"], script="/bin/true"),
    # The script runs as by default: torchrun's runpy is invisible to it.
    "--run-path": sample(None, lambda c: c["argv"][1:] == ["-u", "x.py"]),
    "--log-dir": sample("/tmp/dtrun-flags-logs", lambda c: c["log_dir"] == "/tmp/dtrun-flags-logs"),
    "-r": sample("3", lambda c: c["logs"]["workers"][0]["stdout"] == "file"
                 and c["logs"]["workers"][0]["stderr"] == "file"),
    "-t": sample("3", lambda c: c["logs"]["workers"][0]["stdout"] == "file+console"),
    "--log-line-prefix-template": sample(
        "${hostname}:${rank}: ",
        lambda c: c["logs"]["line_prefix_template"] == "${hostname}:${rank}: "),
    "--local-ranks-filter": sample("1", lambda c: c["logs"]["local_ranks_filter"] == [1],
                                   ["--nproc-per-node=2"]),
    "--duplicate-stdout-filters": sample(
        "loss", lambda c: c["logs"]["duplicate_stdout_filters"] == ["loss"], ["--tee=3"]),
    "--duplicate-stderr-filters": sample(
        "nan", lambda c: c["logs"]["duplicate_stderr_filters"] == ["nan"], ["--tee=3"]),
    "--node-rank": sample("1", lambda c: c["rendezvous"]["backend"] == "static"
                          and first_worker_env(c)["GROUP_RANK"] == "1", STATIC),
    "--master-addr": sample(f"{FAR}", lambda c: c["rendezvous"]["endpoint"] == f"{FAR}:29555",
                            ["--nnodes=2", "--node-rank=1", "--master-port=29555"]),
    "--master-port": sample("29556", lambda c: c["rendezvous"]["endpoint"] == f"{FAR}:29556",
                            ["--nnodes=2", "--node-rank=1", f"--master-addr={FAR}"]),
    "--local-addr": sample("192.0.2.5", lambda c: c["rendezvous"]["local_addr"] == "192.0.2.5",
                           MULTI),
    "--logs-specs": sample("default", lambda c: True),
    "--signals-to-handle": sample("SIGUSR1", lambda c: "SIGUSR1" in c["signals_to_handle"]
                                  and first_worker_env(c)["TORCHELASTIC_SIGNALS_TO_HANDLE"]
                                  == "SIGUSR1"),
    "--shutdown-timeout": sample("7", lambda c: c["stop_timeout_s"] == 7),
    "--virtual-local-rank": sample(
        None, lambda c: [(w["env"]["LOCAL_RANK"], w["env"]["CUDA_VISIBLE_DEVICES"])
                         for w in c["workers"]] == [("0", "6"), ("0", "7")],
        ["--nproc-per-node=2"], env={"CUDA_VISIBLE_DEVICES": "6,7"}),
}


def numa_binding_shows(r) -> bool:
    """--numa-binding: the CPUs of each rank near its GPU, or (no GPU here)
    torch's refusal as one line."""
    if r.returncode == 0:
        return all("cpus" in w for w in json.loads(r.stdout)["workers"])
    lines = r.stderr.splitlines()
    return r.returncode == 2 and len(lines) == 1 and "--numa-binding" in lines[0]


def dry_run(args: list[str], env: dict[str, str] | None = None):
    full_env = dh.job_env(**(env or {}))
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                 "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"):
        if name not in (env or {}):
            full_env.pop(name, None)
    return dh.run(["--dry-run", *args], env=full_env)


@pytest.fixture(scope="module")
def torchrun_options() -> list[list[str]]:
    options = torchrun_help_options()
    # A floor, so that a help layout this parser misreads cannot pass by
    # finding nothing.
    assert len(options) >= 30 and ["--nnodes"] in options, options
    return options


def test_every_torchrun_flag_is_known_here(torchrun_options):
    refused = refused_flags()
    unknown = [o for o in torchrun_options
               if o[0] not in SAMPLES and o[0] != "--numa-binding"
               and not all(s in refused for s in o)]
    assert not unknown, (
        f"torchrun {torch_pypi.TORCH_VERSION_FULL} has flags this test does not know: {unknown}; "
        "make dtrun take them (and add a sample here) or refuse them in docs/compatibility.md")
    # The page refuses only flags torchrun has.
    spellings = {s for o in torchrun_options for s in o}
    assert set(refused) <= spellings, set(refused) - spellings


def test_every_spelling_of_every_torchrun_flag_means_the_same(torchrun_options):
    refused = refused_flags()
    failures = []
    for option in torchrun_options:
        if option[0] in SAMPLES:
            s = SAMPLES[option[0]]
        elif option[0] == "--numa-binding":
            s = None
        else:
            continue  # refused: the next test
        for spelling in option:
            if s is None:
                r = dry_run([spelling, "node", "x.py"])
                ok = numa_binding_shows(r)
            else:
                given = [spelling] if s.value is None else [spelling, s.value]
                r = dry_run([*s.extra, *given, s.script], s.env)
                ok = r.returncode == 0 and s.shows(json.loads(r.stdout))
            if not ok:
                failures.append(f"{spelling}: exit {r.returncode}, {r.stderr.strip()[:300]}, "
                                f"{r.stdout[:200]}")
    assert not failures, "\n".join(failures)


def test_refused_torchrun_flags_say_the_pages_line(torchrun_options):
    refused = refused_flags()
    assert refused, "docs/compatibility.md lists no refused flag: drop this test with the section"
    by_spelling = {s: o for o in torchrun_options for s in o}
    for spelling, message in refused.items():
        option = by_spelling[spelling]
        # Any value torchrun's own --help offers for it ({bash,zsh,tcsh}).
        value = "bash" if "completion" in spelling else "x"
        for args in ([spelling, value, "x.py"], [spelling, value]):
            r = dh.run(args)
            assert (r.returncode, r.stderr) == (2, f"dtrun: error: {message}\n"), (option, r)
            assert r.stdout == ""


def test_virtual_local_rank_maps_through_hip_visible_devices_as_torch_2_15():
    # torch 2.15's _set_local_rank_env: a non-empty HIP_VISIBLE_DEVICES is
    # the list (it wins over CUDA_VISIBLE_DEVICES on ROCm) and the worker
    # gets its device in both.
    r = dry_run(["--nproc-per-node=2", "--virtual-local-rank", "x.py"],
                {"HIP_VISIBLE_DEVICES": "4,5", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert r.returncode == 0, r.stderr
    seen = [(w["env"]["LOCAL_RANK"], w["env"]["CUDA_VISIBLE_DEVICES"],
             w["env"]["HIP_VISIBLE_DEVICES"]) for w in json.loads(r.stdout)["workers"]]
    assert seen == [("0", "4", "4"), ("0", "5", "5")]
    r = dry_run(["--nproc-per-node=3", "--virtual-local-rank", "x.py"],
                {"HIP_VISIBLE_DEVICES": "4,5"})
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "dtrun: error: --virtual-local-rank: local rank 2 has no device of its own: "
        "HIP_VISIBLE_DEVICES='4,5' lists 2; run at most 2 worker(s) per node or list more "
        "devices"]
