"""Real gloo DDP training with docs/agent.md's checkpoint pattern
("Preemption"): the checkpoint signal only sets a flag; at every step
boundary the ranks all-reduce the flag (MAX), so they all see it at the same
step; then every rank saves that step, waits for the others and exits 0.

For the tests, each rank also:
- appends one line per checkpoint signal it receives to
  <out>/signals-r<round>-rank<rank> (the round is TORCHELASTIC_RESTART_COUNT),
  so a test counts the signals every worker got;
- after saving, waits for its own signal (a self-pipe, no polling) before it
  leaves, so that a worker the agents never signalled hangs the test instead
  of passing it by luck (the flag reaches it through the all-reduce anyway);
- writes "training" to --progress once rank 0 of a round without a
  checkpoint has trained a few steps;
- on a resumed round, trains --steps-after-resume more steps and reports
  <out>/result-rank<rank>.json (its start step, world size, checksum).
A round that found no checkpoint trains until the checkpoint signal."""

import argparse
import glob
import json
import os
import select
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--progress", default="")
    p.add_argument("--step-sleep", type=float, default=0.05)
    p.add_argument("--steps-after-resume", type=int, default=5)
    a = p.parse_args()

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    round_ = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    ckpt_dir = os.path.join(a.out, "ckpt")
    os.makedirs(ckpt_dir, exist_ok=True)

    # The signal's wake-up: the C handler writes to it whichever thread the
    # signal lands on (gloo has threads of its own).
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    flag = {"asked": False}

    def on_checkpoint_signal(signum, frame):
        flag["asked"] = True
        with open(os.path.join(a.out, f"signals-r{round_}-rank{rank}"), "a") as f:
            f.write(f"{signal.Signals(signum).name} pid {os.getpid()} at {time.time():.6f}\n")

    signal.signal(signal.SIGUSR1, on_checkpoint_signal)

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    # Resume: the one step every rank saved (a test asserts it is one).
    saved = sorted({int(os.path.basename(f).split("-")[0][4:])
                    for f in glob.glob(os.path.join(ckpt_dir, "step*-rank*.pt"))})
    start = 0
    if saved:
        start = saved[-1]
        state = torch.load(os.path.join(ckpt_dir, f"step{start}-rank{rank}.pt"))
        model.module.load_state_dict(state["model"])
    end = start + a.steps_after_resume if saved else None

    step = start
    while end is None or step < end:
        g = torch.Generator().manual_seed(step)
        x = torch.randn(16, 8, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step == start + 3 and rank == 0 and a.progress and not saved:
            with open(a.progress, "w") as f:
                f.write("training\n")
        asked = torch.tensor([1 if flag["asked"] else 0])
        dist.all_reduce(asked, op=dist.ReduceOp.MAX)
        if asked.item():
            torch.save({"step": step, "model": model.module.state_dict()},
                       os.path.join(ckpt_dir, f"step{step}-rank{rank}.pt"))
            ready, _, _ = select.select([wake_r], [], [], 120)
            if not ready:
                sys.exit(3)  # never signalled: the test fails on this code
            dist.barrier()
            sys.exit(0)
        if a.step_sleep:
            select.select([], [], [], a.step_sleep)  # the step's work, stretched

    checksum = sum(float(t.sum()) for t in model.module.state_dict().values())
    with open(os.path.join(a.out, f"result-rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world_size": world, "round": round_, "start_step": start,
                   "end_step": step, "param_checksum": round(checksum, 6)}, f)


if __name__ == "__main__":
    main()
