"""A real gloo job that hangs the way training jobs do: every rank joins the
process group (env://, the agent's store) and all-reduces once; then rank 1
blocks in load_batch() while the other ranks wait for it in a barrier.
With --out DIR each rank writes DIR/rank<N>.ready once it is past the
first all-reduce (so a test knows the group really formed); with --ready
FIFO it also writes a line there then.

Until then a separate process touches $DTRUN_HEARTBEAT_FILE every 0.2 s:
importing torch and forming the group take seconds (more on a loaded
machine), and a test's short --hang-timeout must only ever see the hang
it staged. A process, not a thread: an import holds the GIL for long
stretches."""

import argparse
import os
import subprocess
import time
from pathlib import Path

heartbeat = subprocess.Popen(
    ["sh", "-c", 'while :; do touch "$DTRUN_HEARTBEAT_FILE"; sleep 0.2; done'])

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def load_batch():
    time.sleep(3600)  # a data loader that never returns


def train_step(rank):
    if rank == 1:
        load_batch()
    dist.barrier()  # the others wait here for rank 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ready", type=Path)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.ones(1)
    dist.all_reduce(t)
    heartbeat.kill()
    heartbeat.wait()
    (args.out / f"rank{rank}.ready").write_text(f"{int(t.item())}\n")
    if args.ready:
        with open(args.ready, "w") as fifo:
            fifo.write(f"rank {rank} ready\n")
    train_step(rank)


if __name__ == "__main__":
    main()
