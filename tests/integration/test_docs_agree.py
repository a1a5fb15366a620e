"""The docs agree with the program (issue 33): every flag of --help is
documented, every example command of the README and the man page runs in
--dry-run, and samples of output are what dtrun prints."""

import glob
import os
import re
import shlex
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

SOURCE = dh.SOURCE_DIR


def docs_text() -> str:
    files = glob.glob(str(SOURCE / "docs" / "*.md")) + [str(SOURCE / "README.md")]
    return "".join(open(f).read() for f in files)


def example_commands() -> list[str]:
    """`dtrun ...` lines of the README's code blocks and the man page's
    EXAMPLES (not the status/stacks commands, which need a running job, nor
    report, which reads a finished job's event log)."""
    found = []
    for block in re.findall(r"```\n(.*?)```", (SOURCE / "README.md").read_text(), re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("dtrun ") and not re.match(r"dtrun (status|stacks|report)\b", line):
                found.append(line)
    man = (SOURCE / "packaging" / "man" / "dtrun.h2m").read_text()
    found += [m.replace("\\-", "-") for m in re.findall(r"^\.B (dtrun \\-.*)$", man, re.M)]
    return found


def test_every_flag_of_help_is_documented():
    flags = set(re.findall(r"(--[a-z][a-z0-9-]+)", dh.run(["--help"]).stdout))
    text = docs_text()
    assert sorted(f for f in flags if f not in text) == []


def test_every_example_command_runs_in_dry_run():
    commands = example_commands()
    assert len(commands) >= 8, commands
    for line in commands:
        r = dh.run(["--dry-run", *shlex.split(line)[1:]])
        assert r.returncode == 0, (line, r.stderr)


def test_the_readme_shows_what_version_prints():
    shown = re.search(r"`dtrun --version` / `dtrun-store --version`: `([^`]*)`",
                      (SOURCE / "README.md").read_text())
    assert shown, "README lost its --version sample"
    version = dh.run(["--version"]).stdout.strip()
    pattern = re.escape(shown.group(1)).replace("abc1234", r"(?:[0-9a-f]{7}(?:-dirty)?|unknown)")
    assert re.fullmatch(pattern.replace("0\\.1\\.0", r"\d+\.\d+\.\d+"), version), (shown, version)


def test_restart_count_is_not_said_to_be_torchruns():
    # It is dtrun's round number (it grows on membership changes too).
    row = next(line for line in (SOURCE / "docs" / "compatibility.md").read_text().splitlines()
               if line.startswith("| `TORCHELASTIC_RESTART_COUNT`"))
    assert "**differs**" in row and "round number" in row, row


def test_every_source_path_the_docs_name_exists():
    """A file moved (issue 47 grouped agent/ and launcher/ by folder) is
    renamed where the docs name it too. torch's own files that the docs
    quote are not ours."""
    torch_files = {"launcher/api.py"}
    named = set()
    for doc in glob.glob(str(SOURCE / "docs" / "*.md")) + [str(SOURCE / "README.md")]:
        text = open(doc).read()
        for path in re.findall(r"(?<![\w/.-])((?:agent|launcher|rendezvous|tests|scripts|cmake)"
                               r"/[\w./-]+\.(?:h|cpp|py|cmake))\b", text):
            named.add((os.path.basename(doc), path))
    missing = sorted((doc, path) for doc, path in named
                     if path not in torch_files and not (SOURCE / path).exists())
    assert missing == []
