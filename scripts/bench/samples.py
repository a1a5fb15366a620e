"""Machine-readable results of the benchmark scripts, for scripts/bench/all.

Each benchmark script that is given `--json FILE` appends one JSON line per
measured quantity:

    {"bench": "launch", "metric": "wall", "subject": "dtrun", "unit": "ms",
     "values": [18.2, 18.9, ...]}

`values` are the individual repetitions after the warm-up (never an
aggregate), so `all` computes the median and the spread the same way for
every benchmark. `subject` names what was measured: "dtrun" (or
"dtrun-store") and the anchors ("torchrun", "torch", "floor", ...).
Optional extra keys (e.g. "nodes") describe the cell.
"""

from __future__ import annotations

import json
from pathlib import Path


class Samples:
    """Appends result lines to a file; a no-op when no file was given."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None

    def add(self, bench: str, metric: str, subject: str, unit: str,
            values: list[float], **extra) -> None:
        if self.path is None:
            return
        line = {"bench": bench, "metric": metric, "subject": subject, "unit": unit,
                "values": [float(v) for v in values], **extra}
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")


def load(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
