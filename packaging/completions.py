#!/usr/bin/python3
"""Writes bash and zsh completions for dtrun or dtrun-store from the
binary's own --help (CLI11's layout), so they list exactly the flags the
binary has: run at build time (cmake/packaging.cmake), never edited.

    completions.py --binary build/launcher/dtrun --shell bash --out FILE

What each option takes is read from its help line:
  - `--a,--b TEXT...`: both spellings, and that it takes a value;
  - `TEXT:{x,y}`: the value is one of x, y (CLI11's IsMember check);
  - otherwise values the description lists: `(x, y)`, `: [a number, ]x, y or z`,
    `0 none, 1 stdout, ...` (the digits), `same values as --other`;
  - `folder` / `file` / `interpreter` in the description: directory, file or
    command names.
dtrun-store's subcommands (its `Subcommands:` section) are read from
`dtrun-store SUB --help` each. Exits non-zero when the help has no options,
so a changed help layout fails the build instead of shipping an empty file.
"""

from __future__ import annotations

import argparse
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


@dataclass
class command:
    name: str
    description: str
    options: list[option]
    subcommands: list["command"] = field(default_factory=list)


def read_help(argv: list[str]) -> str:
    r = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        sys.exit(f"completions.py: {' '.join(argv)} --help failed ({r.returncode}): {r.stderr}")
    return r.stdout


def parse_options(help_text: str) -> tuple[list[option], list[tuple[str, str]]]:
    """The options and the (name, description) of the subcommands of one
    CLI11 help text."""
    options: list[option] = []
    subcommands: list[tuple[str, str]] = []
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
        if stripped.startswith("-") and line.startswith("  -"):
            head, text = (re.split(r"\s{2,}", stripped, maxsplit=1) + [""])[:2]
            spellings, _, rest = head.partition(" ")
            names = [n for n in spellings.split(",") if n.startswith("-")]
            takes_value = rest.startswith(TYPE_WORDS)
            current = option(names=names, takes_value=takes_value, description=text.strip())
            member = re.match(r"\w+:\{([^}]*)\}", rest)
            if member:
                current.choices = member.group(1).split(",")
            options.append(current)
        elif current is not None:
            current.description = (current.description + " " + stripped).strip()
    for o in options:
        if o.takes_value:
            derive_values(o, options)
    return options, subcommands


def derive_values(o: option, options: list[option]) -> None:
    """Fills o.choices or o.kind from what its description says."""
    text = re.sub(r"\s*\([^()]*\)", lambda m: m.group(0) if re.fullmatch(
        r"\s*\([\w.-]+(, [\w.-]+)+\)", m.group(0)) else "", o.description)
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
    if o.choices:
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
    options, subs = parse_options(read_help([binary]))
    if not any(n.startswith("--") for o in options for n in o.names):
        sys.exit(f"completions.py: no options found in `{binary} --help`: has its layout changed?")
    cmd = command(name, "", options)
    for sub_name, sub_text in subs:
        sub_options, _ = parse_options(read_help([binary, sub_name]))
        cmd.subcommands.append(command(sub_name, sub_text, sub_options))
    return cmd


def func_name(name: str) -> str:
    return "_" + re.sub(r"\W", "_", name)


def bash_value_cases(options: list[option], indent: str) -> list[str]:
    lines = []
    for o in options:
        if not o.takes_value:
            continue
        pattern = "|".join(o.names)
        if o.choices:
            action = f'COMPREPLY=($(compgen -W "{" ".join(o.choices)}" -- "$cur"))'
        elif o.kind == "dir":
            action = 'COMPREPLY=($(compgen -d -- "$cur"))'
        elif o.kind == "file":
            action = 'COMPREPLY=($(compgen -f -- "$cur"))'
        elif o.kind == "command":
            action = 'COMPREPLY=($(compgen -c -- "$cur"))'
        else:
            action = "COMPREPLY=()"
        lines.append(f"{indent}{pattern}) valued=1; {action} ;;")
    return lines


def value_flags(options: list[option]) -> str:
    return "|".join(n for o in options if o.takes_value for n in o.names)


def all_flags(options: list[option]) -> str:
    return " ".join(n for o in options for n in o.names)


def bash(cmd: command, version: str) -> str:
    f = func_name(cmd.name)
    lines = [
        f"# bash completion for {cmd.name} {version}.",
        f"# Generated by packaging/completions.py from `{cmd.name} --help`; do not edit.",
        f"{f}() {{",
        '    local cur=${COMP_WORDS[COMP_CWORD]} prev="" flag="" prefix="" valued="" i word',
        "    COMPREPLY=()",
        "    # The flag whose value is being completed: `--flag VALUE`, or",
        "    # `--flag=VALUE` (split into three words where '=' breaks words).",
        "    if ((COMP_CWORD > 0)); then prev=${COMP_WORDS[COMP_CWORD-1]}; fi",
        '    if [[ $cur == "=" ]]; then flag=$prev; cur=""',
        '    elif [[ $prev == "=" ]] && ((COMP_CWORD > 1)); then flag=${COMP_WORDS[COMP_CWORD-2]}',
        '    elif [[ $cur == --*=* ]]; then flag=${cur%%=*}; prefix=$flag=; cur=${cur#*=}',
        '    else flag=$prev; fi',
    ]
    if cmd.subcommands:
        lines += bash_subcommand_body(cmd)
    else:
        lines += [
            "    # The first word that is neither a flag nor a flag's value is the",
            "    # script (or program): it and everything after it go to the workers.",
            "    i=1",
            "    while ((i < COMP_CWORD)); do",
            "        word=${COMP_WORDS[i]}",
            '        case $word in',
            '            --) COMPREPLY=($(compgen -f -- "$cur")); return 0 ;;',
            f"            {value_flags(cmd.options)})",
            '                if [[ ${COMP_WORDS[i+1]-} == "=" ]]; then ((i += 2)); else ((i += 1)); fi ;;',
            "            :) ((i += 1)) ;;  # host:port, split where ':' breaks words",
            "            -*) ;;",
            '            *) COMPREPLY=($(compgen -f -- "$cur")); return 0 ;;',
            "        esac",
            "        ((i += 1))",
            "    done",
            '    case $flag in',
            *bash_value_cases(cmd.options, "        "),
            "        *)",
            '            if [[ $cur == -* ]]; then',
            f'                COMPREPLY=($(compgen -W "{all_flags(cmd.options)}" -- "$cur"))',
            "            else",
            '                COMPREPLY=($(compgen -f -- "$cur"))',
            "            fi ;;",
            "    esac",
        ]
    lines += [
        "    # `--flag=VALUE` as one word (no '=' in COMP_WORDBREAKS): keep the flag.",
        '    if [[ -n $prefix ]]; then COMPREPLY=("${COMPREPLY[@]/#/$prefix}"); fi',
        "    return 0", "}", f"complete -o default -F {f} {cmd.name}", ""]
    return "\n".join(lines)


def bash_subcommand_body(cmd: command) -> list[str]:
    names = " ".join(s.name for s in cmd.subcommands)
    lines = [
        '    local sub=""',
        "    i=1",
        "    while ((i < COMP_CWORD)); do",
        "        word=${COMP_WORDS[i]}",
        "        case $word in",
        f"            {value_flags(cmd.options)})",
        '                if [[ ${COMP_WORDS[i+1]-} == "=" ]]; then ((i += 2)); else ((i += 1)); fi ;;',
        "            :) ((i += 1)) ;;  # host:port, split where ':' breaks words",
        "            -*) ;;",
        "            *) sub=$word; break ;;",
        "        esac",
        "        ((i += 1))",
        "    done",
        "    case $flag in",
        *bash_value_cases(cmd.options, "        "),
        *bash_value_cases([o for s in cmd.subcommands for o in s.options
                           if o.takes_value and not any(set(o.names) & set(p.names)
                                                        for p in cmd.options)], "        "),
        "    esac",
        "    # Not a flag's value: a flag or subcommand of the level the line is at.",
        '    [[ -n $valued ]] || case $sub in',
        f'        "") COMPREPLY=($(compgen -W "{all_flags(cmd.options)} {names}" -- "$cur")) ;;',
    ]
    for s in cmd.subcommands:
        lines.append(f'        {s.name}) COMPREPLY=($(compgen -W "{all_flags(s.options)}" -- "$cur")) ;;')
    lines.append("    esac")
    return lines


def zsh_quote(text: str) -> str:
    return text.replace("'", "'\\''")


def zsh_spec(o: option) -> list[str]:
    text = zsh_quote(o.description.replace("[", "(").replace("]", ")"))
    if o.choices:
        action = ":value:(" + " ".join(o.choices) + ")"
    elif o.kind == "dir":
        action = ":folder:_files -/"
    elif o.kind == "file":
        action = ":file:_files"
    elif o.kind == "command":
        action = ":program:_command_names -e"
    elif o.takes_value:
        action = ":value: "
    else:
        action = ""
    exclusive = " ".join(o.names)
    specs = []
    for n in o.names:
        long_value = o.takes_value and n.startswith("--")
        suffix = "=" if long_value else ("+" if o.takes_value else "")
        specs.append(f"'({exclusive}){n}{suffix}[{text}]{action}'")
    return specs


def zsh(cmd: command, version: str) -> str:
    lines = [
        f"#compdef {cmd.name}",
        f"# zsh completion for {cmd.name} {version}.",
        f"# Generated by packaging/completions.py from `{cmd.name} --help`; do not edit.",
        "",
    ]
    specs = [s for o in cmd.options for s in zsh_spec(o)]
    if cmd.subcommands:
        described = " ".join(
            f'{s.name}\\:"{zsh_quote(s.description.replace(chr(34), ""))}"' for s in cmd.subcommands)
        lines += [
            "local curcontext=$curcontext state line",
            "typeset -A opt_args",
            "_arguments -C -s \\",
            *[f"  {s} \\" for s in specs],
            f"  '1:subcommand:(({described}))' \\",
            "  '*::argument:->args'",
            "case $state in",
            "  args)",
            "    case $words[1] in",
        ]
        for s in cmd.subcommands:
            sub_specs = " ".join(x for o in s.options for x in zsh_spec(o))
            lines.append(f"      {s.name}) _arguments -s {sub_specs} '*:argument: ' ;;")
        lines += ["    esac ;;", "esac", ""]
    else:
        lines += [
            "_arguments -s -S \\",
            *[f"  {s} \\" for s in specs],
            "  '(-)1:script or program:_files' \\",
            "  '(-)*::arguments for the workers:_files'",
            "",
        ]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", required=True)
    p.add_argument("--shell", choices=["bash", "zsh"], required=True)
    p.add_argument("--version", default="", help="the version, for the header comment")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    cmd = read_command(args.binary)
    text = bash(cmd, args.version) if args.shell == "bash" else zsh(cmd, args.version)
    with open(args.out, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
