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
stretches.

Each rank also writes DIR/rank<N>.start: whether torch was already
imported when the script began (a worker dtrun --preload forked from its
warm interpreter) and its parent's pid."""

import sys

PRELOADED = "torch" in sys.modules  # before the script imports anything

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

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


def load_batch_from_queue(q):
    q.get()  # never fed


def wait_for_peers_in_queue(q):
    q.get()  # never fed


def announce_when_waiting(q, ready, rank):
    # The main thread has appended its waiter to the queue's condition
    # before it blocks; it holds the GIL until it blocks, so once this
    # thread runs the main thread is inside the wait and a capture finds
    # it there, never between the announcement and the call.
    while not q.not_empty._waiters:
        pass
    with open(ready, "w") as fifo:
        fifo.write(f"rank {rank} ready\n")
    # Wait rather than end: faulthandler's dump of every thread can crash
    # CPython when a thread ends during it.
    import threading
    threading.Event().wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ready", type=Path)
    parser.add_argument("--block-in-queue", action="store_true",
                        help="rank 1 waits in load_batch_from_queue, the others in "
                        "wait_for_peers_in_queue; --ready is written once they wait")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    (args.out / f"rank{rank}.start").write_text(json.dumps(
        {"preloaded": PRELOADED, "ppid": os.getppid()}))
    t = torch.ones(1)
    dist.all_reduce(t)
    heartbeat.kill()
    heartbeat.wait()
    (args.out / f"rank{rank}.ready").write_text(f"{int(t.item())}\n")
    if args.block_in_queue:
        import queue
        import threading
        q = queue.Queue()
        threading.Thread(target=announce_when_waiting, args=(q, args.ready, rank),
                         daemon=True).start()
        (load_batch_from_queue if rank == 1 else wait_for_peers_in_queue)(q)
        return
    if args.ready:
        with open(args.ready, "w") as fifo:
            fifo.write(f"rank {rank} ready\n")
    train_step(rank)


if __name__ == "__main__":
    main()
