"""A real gloo job that hangs the way training jobs do: every rank joins the
process group (env://, the agent's store) and all-reduces once; then rank 1
blocks in load_batch() while the other ranks wait for it in a barrier.
With --out DIR each rank writes DIR/rank<N>.ready once it is past the
first all-reduce (so a test knows the group really formed)."""

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist


def load_batch():
    time.sleep(3600)  # a data loader that never returns


def train_step(rank):
    if rank == 1:
        load_batch()
    dist.barrier()  # the others wait here for rank 1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.ones(1)
    dist.all_reduce(t)
    (args.out / f"rank{rank}.ready").write_text(f"{int(t.item())}\n")
    train_step(rank)


if __name__ == "__main__":
    main()
