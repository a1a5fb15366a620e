"""A worker that writes its environment to <out>/rank<RANK>.json and exits
0. Used to compare dtrun's worker environment with torchrun's."""

import json
import os
import sys

out = sys.argv[1]
with open(os.path.join(out, f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump(dict(os.environ), f, indent=1, sort_keys=True)
