"""The shell completions and man pages as shipped (taken from the tarball):
bash completes both spellings of every flag `dtrun --help` lists (so they
cannot drift apart), the values of choice flags, files for the script;
zsh parses its files; `man -l` renders the pages with the real flags."""

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import packages  # noqa: E402

STORE = dh.BUILD_DIR / "launcher" / "dtrun-store"


@pytest.fixture(scope="module")
def share(tmp_path_factory) -> Path:
    art = packages.artifacts()
    root = tmp_path_factory.mktemp("tarball")
    with tarfile.open(art.tarball) as tar:
        tar.extractall(root)
    (top,) = root.iterdir()
    return top / "share"


def long_flags(help_text: str) -> list[str]:
    """Every --flag spelling on the option lines of a CLI11 help."""
    flags = []
    for line in help_text.splitlines():
        match = re.match(r"  (-\S+)", line)
        if match:
            # A flag whose bare form sets a value shows it: --preflight{once}.
            flags += [re.sub(r"\{[^}]*\}$", "", f) for f in match.group(1).split(",")
                      if f.startswith("--")]
    return flags


def complete(share: Path, tool: str, words: list[str], cwd: Path | None = None) -> list[str]:
    """COMPREPLY of the shipped bash completion of `tool` for the command
    line `words` (the last one the word being completed), in a plain bash
    without the bash-completion package: the file must stand alone."""
    script = f"""
source {share}/bash-completion/completions/{tool}
spec=$(complete -p {tool}) || exit 3
func=$(sed -n 's/.* -F \\([^ ]*\\) .*/\\1/p' <<<"$spec")
COMP_WORDS=("$@")
COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))
COMP_LINE="$*"
COMP_POINT=${{#COMP_LINE}}
"$func" {tool} "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", script, "bash", tool, *words],
                       capture_output=True, text=True, cwd=cwd, timeout=60)
    assert r.returncode == 0 and r.stderr == "", f"rc {r.returncode}: {r.stderr}"
    return [w for w in r.stdout.split("\n") if w]


def test_bash_completes_both_spellings(share):
    assert sorted(complete(share, "dtrun", ["--nproc"])) == ["--nproc-per-node",
                                                             "--nproc_per_node"]
    assert sorted(complete(share, "dtrun", ["--rdzv-b"])) == ["--rdzv-backend"]
    assert sorted(complete(share, "dtrun", ["--rdzv_b"])) == ["--rdzv_backend"]


def test_bash_completes_every_flag_dtrun_help_lists(share):
    help_text = dh.run(["--help"]).stdout
    flags = long_flags(help_text)
    assert len(flags) > 60 and "--nproc_per_node" in flags and "--dry-run" in flags
    offered = set(complete(share, "dtrun", ["--"]))
    assert sorted(set(flags) - offered) == [], "flags --help lists that do not complete"
    assert sorted(offered - set(flags)) == [], "completions that --help does not list"


def test_bash_completes_choice_values(share):
    assert complete(share, "dtrun", ["--rdzv-backend", ""]) == [
        "static", "c10d", "etcd-v3", "etcd", "etcd-v2"]
    assert complete(share, "dtrun", ["--rdzv_backend", "=", "c"]) == ["c10d"]
    assert complete(share, "dtrun", ["--redirects", ""]) == ["0", "1", "2", "3"]
    assert complete(share, "dtrun", ["-t", ""]) == ["0", "1", "2", "3"]
    assert complete(share, "dtrun", ["--numa-binding", ""]) == [
        "node", "socket", "exclusive", "core-complex"]
    assert complete(share, "dtrun", ["--numa_binding=s"]) == ["--numa_binding=socket"]
    assert complete(share, "dtrun", ["--nproc-per-node", ""]) == ["auto", "cpu", "gpu", "xpu"]
    assert complete(share, "dtrun", ["--start-method", "f"]) == ["fork", "forkserver"]
    assert complete(share, "dtrun", ["--local-rank-arg", ""]) == ["dash", "underscore"]
    assert complete(share, "dtrun-store", ["--dialect", ""]) == ["auto", "v2", "v1.13"]


def test_bash_completes_the_script_then_leaves_its_arguments_to_it(share, tmp_path):
    (tmp_path / "train.py").write_text("")
    (tmp_path / "logs").mkdir()
    assert complete(share, "dtrun", ["--standalone", "--nproc-per-node", "2", "tr"],
                    cwd=tmp_path) == ["train.py"]
    assert complete(share, "dtrun", ["--log-dir", ""], cwd=tmp_path) == ["logs"]
    # After the script everything is the script's: no dtrun flags offered.
    assert complete(share, "dtrun", ["--standalone", "train.py", "--nproc"], cwd=tmp_path) == []
    assert complete(share, "dtrun", ["--rdzv-endpoint", "node1", ":", "29400", "--", "tr"],
                    cwd=tmp_path) == ["train.py"]


def test_bash_completes_dtrun_commands_as_the_first_word_and_their_flags(share, tmp_path):
    (tmp_path / "stats.py").write_text("")
    # First: dtrun's commands beside the scripts; after flags, only scripts.
    assert sorted(complete(share, "dtrun", ["st"], cwd=tmp_path)) == ["stacks", "stats.py",
                                                                     "status"]
    assert complete(share, "dtrun", ["--standalone", "st"], cwd=tmp_path) == ["stats.py"]
    for command in ("status", "stacks"):
        help_text = subprocess.run([str(dh.DTRUN), command, "--help"], capture_output=True,
                                   text=True).stdout
        assert "--json" in long_flags(help_text)
        assert sorted(complete(share, "dtrun", [command, "--"], cwd=tmp_path)) == \
            sorted(long_flags(help_text))


def test_bash_completes_dtrun_store_subcommands_and_their_flags(share):
    help_text = subprocess.run([str(STORE), "--help"], capture_output=True, text=True).stdout
    subcommands = re.findall(r"^  (\S+)  ", help_text.split("Subcommands:")[1], re.M)
    assert "serve" in subcommands and "num-keys" in subcommands
    offered = complete(share, "dtrun-store", [""])
    assert set(subcommands) <= set(offered)
    assert set(long_flags(help_text)) <= set(offered)
    serve_help = subprocess.run([str(STORE), "serve", "--help"], capture_output=True,
                                text=True).stdout
    assert sorted(complete(share, "dtrun-store", ["--endpoint", "h", ":", "1", "serve", "--"])) \
        == sorted(long_flags(serve_help))


def test_zsh_parses_the_completion_files(share):
    for tool in ("dtrun", "dtrun-store"):
        path = share / "zsh" / "vendor-completions" / f"_{tool}"
        first = path.read_text().splitlines()[0]
        assert first == f"#compdef {tool}"
        r = subprocess.run(["zsh", "-n", str(path)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr


# Types each line into an interactive zsh (on a pseudo-terminal, zsh/zpty)
# that loaded the shipped completions with compinit, waits for its prompt,
# presses TAB, then runs `print END` and reads until END: what zsh listed or
# inserted lies between.
ZSH_DRIVER = r'''
zmodload zsh/zpty
dir=$1; shift
for line in "$@"; do
  zpty z 'zsh -f -i'
  zpty -w z "bindkey -e; PS1='P> '; fpath=($dir \$fpath); autoload -Uz compinit; compinit -u -D; print RE''ADY"
  zpty -r z out '*READY*'
  zpty -r z out '*P> *'  # the line editor is reading: typed keys reach it
  zpty -w -n z "$line"$'\t'
  zpty -w z $'\C-uprint EN""D'
  zpty -r z out '*END*'
  print -r -- "=== $line"
  print -r -- "$out"
  zpty -d z
done
'''


def test_zsh_completes_flags_values_and_subcommands(share):
    cases = {
        "dtrun --nproc": ["--nproc-per-node", "--nproc_per_node"],
        "dtrun --rdzv-backend ": ["c10d", "static", "etcd-v3", "etcd-v2"],
        "dtrun --rdzv_backend=c": ["--rdzv_backend=c10d"],
        "dtrun --standalone --numa-binding ": ["node", "socket", "exclusive", "core-complex"],
        "dtrun stat": ["status"],
        "dtrun stacks --run": ["--run-id", "--run_id"],
        "dtrun-store se": ["serve", "set"],
        "dtrun-store --dialect v": ["v1.13", "v2"],
    }
    r = subprocess.run(["zsh", "-f", "-c", ZSH_DRIVER, "zsh",
                        str(share / "zsh" / "vendor-completions"), *cases],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    plain = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]|\r", "", r.stdout)
    shown = dict(part.split("\n", 1) for part in plain.split("=== ")[1:])
    for line, words in cases.items():
        # None of the words is part of the typed line: each was offered or inserted.
        missing = [w for w in words if w not in shown[line]]
        assert missing == [], f"zsh did not offer {missing} for {line!r}:\n{shown[line]}"


def test_man_pages_render_with_the_real_flags(share):
    env = dict(os.environ, MANWIDTH="200", LANG="C.UTF-8")
    help_text = dh.run(["--help"]).stdout
    page = subprocess.run(["man", "-P", "cat", "-l", str(share / "man" / "man1" / "dtrun.1.gz")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert page.returncode == 0, page.stderr
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "ENVIRONMENT",
                    "EXAMPLES", "SEE ALSO"):
        assert re.search(rf"^{section}$", page.stdout, re.M), f"no {section} in dtrun(1)"
    text = re.sub(r"\s+", " ", page.stdout)
    missing = [f for f in long_flags(help_text) if f not in text]
    assert missing == [], f"flags of --help missing from dtrun(1): {missing}"
    assert re.search(r"^dtrun \d+\.\d+\.\d+ ", page.stdout.splitlines()[-1])
    store = subprocess.run(["man", "-P", "cat", "-l",
                            str(share / "man" / "man1" / "dtrun-store.1.gz")],
                           env=env, capture_output=True, text=True, timeout=60)
    assert store.returncode == 0 and "num-keys" in store.stdout and "EXIT STATUS" in store.stdout
