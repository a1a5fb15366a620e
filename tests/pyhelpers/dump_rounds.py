"""A worker that writes its environment to <out>/round<R>_rank<RANK>.json,
R being TORCHELASTIC_RESTART_COUNT, and exits 0; with --fail-rank=N, rank
N exits 3 in round 0 instead (after writing), so the launcher restarts
the group. Used to compare dtrun's worker environment with torchrun's
(tests/pyhelpers/torch_env_compare.py)."""

import json
import os
import sys

out = sys.argv[1]
fail_rank = next((int(a.split("=", 1)[1]) for a in sys.argv[2:] if a.startswith("--fail-rank=")),
                 None)
rnd = os.environ["TORCHELASTIC_RESTART_COUNT"]
with open(os.path.join(out, f"round{rnd}_rank{os.environ['RANK']}.json"), "w") as f:
    json.dump(dict(os.environ), f, indent=1, sort_keys=True)
if fail_rank is not None and int(os.environ["RANK"]) == fail_rank and rnd == "0":
    sys.exit(3)
