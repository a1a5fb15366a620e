"""The chaos harness's training job: a tiny gloo DDP model, a checkpoint
every --ckpt-every steps, and a journal every worker appends to.

Journal lines (JSON, one os.write each on an O_APPEND file, so lines from
every worker of every host interleave whole and in the order they were
written; the hosts share the file system):
  start  round, rank, world, group_rank, local_rank, host, pid, resume (the
         step the checkpoint it loaded ended at, 0 for none)
  step   round, rank, world, group_rank, step (after its optimizer step)
  ckpt   round, rank, step (rank 0, after the checkpoint file was replaced)
  done   round, rank, world, step (the last step trained, then exit 0)
`round` is TORCHELASTIC_RESTART_COUNT, dtrun's round number.

Rank 0 also writes "step <round> <step>" to --progress (a FIFO the harness
reads), so the harness waits on training itself instead of guessing."""

import argparse
import datetime
import errno
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--journal", required=True)
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--ckpt-every", type=int, default=5)
    p.add_argument("--step-sleep", type=float, default=0.2)
    p.add_argument("--progress", default="")
    p.add_argument("--collective-timeout", type=float, default=5.0,
                   help="seconds a training collective may wait for a peer")
    a = p.parse_args()

    rnd = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    group_rank = int(os.environ["GROUP_RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    jfd = os.open(a.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def record(kind, **fields):
        line = json.dumps({"kind": kind, "t": time.time(), "round": rnd, "pid": os.getpid(),
                           "host": socket.gethostname(), **fields}) + "\n"
        os.write(jfd, line.encode())

    # Bounded: a peer that vanished mid-collective must not hold us for
    # gloo's default 30 minutes (dtrun stops us when the round ends anyway).
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    # Training collectives time out as a real job's do (NCCL/gloo timeouts),
    # but sooner: a peer stopped or cut off for longer makes every other
    # worker fail at about the same moment on several nodes, the case where
    # one failed round must still cost one restart. (init above keeps 60 s:
    # the workers of a round start torch at different speeds.)
    pg = dist.new_group(timeout=datetime.timedelta(seconds=a.collective_timeout))
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ckpt = os.path.join(a.ckpt_dir, "ckpt.pt")
    resume = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        resume = state["step"]
    record("start", rank=rank, world=world, group_rank=group_rank, local_rank=local_rank,
           resume=resume)
    ddp = DDP(model, process_group=pg)
    loss_fn = nn.MSELoss()
    progress = -1
    if rank == 0 and a.progress:
        try:
            progress = os.open(a.progress, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            progress = -1
    step = resume
    for step in range(resume + 1, a.steps + 1):
        g = torch.Generator().manual_seed(step * 100 + rank)
        x = torch.randn(16, 8, generator=g)
        y = x.sum(dim=1, keepdim=True).repeat(1, 4) * 0.5
        opt.zero_grad()
        loss_fn(ddp(x), y).backward()
        opt.step()
        time.sleep(a.step_sleep)  # stands in for a bigger model's compute
        record("step", rank=rank, world=world, group_rank=group_rank, step=step)
        print(f"round {rnd} rank {rank} step {step}", flush=True)
        if rank == 0 and step % a.ckpt_every == 0:
            tmp = ckpt + f".tmp{os.getpid()}"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
            os.replace(tmp, ckpt)  # a crash never leaves half a checkpoint
            record("ckpt", rank=rank, step=step)
        if progress >= 0:
            try:
                os.write(progress, f"step {rnd} {step}\n".encode())
            except OSError as e:  # a full FIFO (harness busy) loses a line, no more
                if e.errno not in (errno.EAGAIN, errno.EPIPE):
                    raise
    dist.barrier(group=pg)
    record("done", rank=rank, world=world, step=step)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    os._exit(code)
