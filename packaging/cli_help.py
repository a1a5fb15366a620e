"""Reads a CLI11 program's options from its own --help: every spelling of
each flag, whether it takes a value, and which values (packaging/completions.py
writes the shell completions from this).

What each option takes is read from its help line:
  - `--a,--b TEXT...`: both spellings, and that it takes a value;
  - `TEXT:{x,y}`: the value is one of x, y (CLI11's IsMember check);
  - otherwise values the description lists: `(x, y)`, `: [a number, ]x, y or z`,
    `0 none, 1 stdout, ...` (the digits), `same values as --other`;
  - `folder` / `file` / `interpreter` in the description: directory, file or
    command names.
Subcommands (a `Subcommands:` section) are read from `PROGRAM SUB --help`
each; so are dtrun's commands, which its help lists in a footer section
`Commands, as the first word ...:` (`dtrun status [--json]   text`): a
program that takes a script as its first word offers them there too. Exits non-zero when the help has no options, so a changed help layout
fails the build instead of shipping an empty completion.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field

TYPE_WORDS = ("TEXT", "INT", "UINT", "FLOAT", "NUMBER", "BOOLEAN")


@dataclass
class option:
    names: list[str]           # every spelling, e.g. ["--nproc-per-node", "--nproc_per_node"]
    takes_value: bool
    description: str = ""
    choices: list[str] = field(default_factory=list)
    kind: str = ""             # "", "file", "dir" or "command": what the value names
    numeric: bool = False      # its value is a number (INT, FLOAT ...): it names no file


@dataclass
class command:
    name: str
    description: str
    options: list[option]
    subcommands: list["command"] = field(default_factory=list)
    # dtrun's commands (status, stacks, help): words that may come first
    # instead of the script.
    first_words: list["command"] = field(default_factory=list)


def read_help(argv: list[str]) -> str:
    r = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        sys.exit(f"completions.py: {' '.join(argv)} --help failed ({r.returncode}): {r.stderr}")
    return r.stdout


FIRST_WORDS_SECTION = "Commands, as the first word"


def parse_options(help_text: str) -> tuple[list[option], list[tuple[str, str]],
                                           list[tuple[str, str]]]:
    """The options, the (name, description) of the subcommands and those of
    the first-word commands of one CLI11 help text."""
    options: list[option] = []
    subcommands: list[tuple[str, str]] = []
    first_words: list[tuple[str, str]] = []
    section = ""
    current: option | None = None
    for line in help_text.splitlines():
        if line and not line.startswith(" "):
            section = line.rstrip(":")
            current = None
            continue
        stripped = line.strip()
        if not stripped:
            current = None
            continue
        if section == "Subcommands":
            name, _, text = stripped.partition(" ")
            subcommands.append((name, text.strip()))
            continue
        if section.startswith(FIRST_WORDS_SECTION):
            # "dtrun status [--json] [--watch]   the running jobs ...": the
            # second word is the command, the text after the wide gap its
            # description.
            usage, text = (re.split(r"\s{2,}", stripped, maxsplit=1) + [""])[:2]
            words = usage.split()
            if len(words) >= 2:
                first_words.append((words[1], text.strip()))
            continue
        if stripped.startswith("-") and line.startswith("  -"):
            head, text = (re.split(r"\s{2,}", stripped, maxsplit=1) + [""])[:2]
            spellings, _, rest = head.partition(" ")
            # A flag whose bare form sets a value (CLI11's `--preflight{once}`)
            # is spelled without it; its other values are given as `--flag=VALUE`.
            names = [re.sub(r"\{[^}]*\}$", "", n) for n in spellings.split(",")
                     if n.startswith("-")]
            takes_value = rest.startswith(TYPE_WORDS)
            current = option(names=names, takes_value=takes_value, description=text.strip(),
                             numeric=rest.startswith(("INT", "UINT", "FLOAT", "NUMBER")))
            member = re.match(r"\w+:\{([^}]*)\}", rest)
            if member:
                current.choices = member.group(1).split(",")
            options.append(current)
        elif current is not None:
            current.description = (current.description + " " + stripped).strip()
    for o in options:
        if o.takes_value:
            derive_values(o, options)
    return options, subcommands, first_words


def derive_values(o: option, options: list[option]) -> None:
    """Fills o.choices or o.kind from what its description says."""
    # Without its asides, e.g. "null, dynamic_rendezvous (no events) or console".
    text = re.sub(r"\s*\([^()]*\)", "", o.description)
    if not o.choices:
        listed = re.search(r"\(([\w.-]+(?:, [\w.-]+)+)\)", o.description)
        spelled = re.search(r": (?:a number, )?((?:[\w.-]+, )*[\w.-]+ or [\w.-]+)\s*$", text)
        digits = re.findall(r"(?:^|: |, )(\d) [a-z]+", o.description)
        same = re.search(r"same values as (--[\w-]+)", o.description)
        if listed:
            o.choices = listed.group(1).split(", ")
        elif spelled:
            o.choices = re.split(r", | or ", spelled.group(1))
        elif len(digits) >= 2:
            o.choices = digits
        elif same:
            other = next((p for p in options if same.group(1) in p.names), None)
            if other is not None:
                if not other.choices:
                    derive_values(other, options)
                o.choices = list(other.choices)
    if o.choices or o.numeric:  # "--hang-timeout SECONDS ... heartbeat file": a number
        return
    lower = o.description.lower()
    if "interpreter" in lower:
        o.kind = "command"
    elif "folder" in lower or "directory" in lower:
        o.kind = "dir"
    elif re.search(r"\bfile\b", lower):
        o.kind = "file"


def read_command(binary: str) -> command:
    name = binary.rsplit("/", 1)[-1]
    options, subs, firsts = parse_options(read_help([binary]))
    if not any(n.startswith("--") for o in options for n in o.names):
        sys.exit(f"completions.py: no options found in `{binary} --help`: has its layout changed?")
    cmd = command(name, "", options)
    for sub_name, sub_text in subs:
        sub_options, _, _ = parse_options(read_help([binary, sub_name]))
        cmd.subcommands.append(command(sub_name, sub_text, sub_options))
    for word, text in firsts:
        # `dtrun help` is the help itself: nothing follows it.
        word_options = [] if word == "help" else parse_options(read_help([binary, word]))[0]
        cmd.first_words.append(command(word, text, word_options))
    return cmd
