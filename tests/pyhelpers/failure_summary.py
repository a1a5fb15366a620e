"""Reading dtrun's failure summary (docs/agent.md, "Failure summary") in tests.

    import failure_summary as fs
    block = fs.summary(result.stderr)      # the lines between the two rules
    fs.field(block, "exit")                # "signal 11 (SIGSEGV), exit code 139"
"""

from __future__ import annotations

import re


def summary(stderr: str) -> str:
    """The summary block: the lines between the two rules, rules included.
    Fails the test unless there is exactly one block."""
    lines = stderr.splitlines()
    rules = [i for i, line in enumerate(lines) if re.fullmatch(r"dtrun: =+", line)]
    assert len(rules) == 2, stderr
    return "\n".join(lines[rules[0]:rules[1] + 1])


def field(block: str, name: str) -> str:
    """The value of one `name : value` line of the root cause."""
    m = re.search(rf"^dtrun:   {name} *: (.*)$", block, re.M)
    assert m, block
    return m.group(1)
