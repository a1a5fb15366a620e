"""The training script of scripts/bench/restart: 2-rank gloo DDP of a tiny
model in which rank 1 crashes at a step of the first attempt.

    restart_train.py LOG [--crash-at-step N] [--steps N]

Appends one line per event to LOG, `EVENT ATTEMPT RANK TIME` (time.time(),
seconds: every process is on one machine, so the clocks agree):
  enter   the script's first action, before `import torch` (a replacement
          "inside the training script")
  step    each training step done (forward, backward, the all-reduce, the
          optimiser), with its number: `step3 ...`
  crash   rank 1, attempt 0 (TORCHELASTIC_RESTART_COUNT=0), at step
          --crash-at-step, just before os._exit(1)
Each line is one O_APPEND write, so lines of different processes never mix.
Attempt 0 crashes; a later attempt runs --steps steps and exits 0.
"""

import os
import sys
import time

ENTERED = time.time()  # before anything else: the replacement is in the script
LOG = sys.argv[1]
ATTEMPT = os.environ["TORCHELASTIC_RESTART_COUNT"]
RANK = os.environ["RANK"]


def stamp(event: str, at: float) -> None:
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{event} {ATTEMPT} {RANK} {at:.6f}\n".encode())
    finally:
        os.close(fd)


stamp("enter", ENTERED)

import argparse  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("log")
    p.add_argument("--crash-at-step", type=int, default=3)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 16)
    crashing = ATTEMPT == "0" and RANK == "1"
    # Attempt 0 trains until rank 1 crashes (rank 0 then fails in the
    # step's all-reduce, or is stopped by the launcher first).
    steps = args.crash_at_step if ATTEMPT == "0" else args.steps
    for step in range(1, steps + 1):
        if crashing and step == args.crash_at_step:
            stamp("crash", time.time())
            os._exit(1)
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
        stamp(f"step{step}", time.time())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
