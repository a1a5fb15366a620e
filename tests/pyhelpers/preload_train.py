"""Real gloo DDP under dtrun, with or without --preload (tests/pyhelpers/
preload_ddp.py; tests/e2e/test_preload_ddp.py, test_torch2_preload.py).

    preload_train.py OUT

Each rank joins the process group (env://, the agent's store), wraps a
small model in DDP and takes three steps on deterministic data. In round 0
(TORCHELASTIC_RESTART_COUNT=0) rank 1 raises RuntimeError in its second
step, inside main(), which torch's @record decorates: torch writes the
error file dtrun's failure summary shows; rank 0 waits there to be
stopped. In a later round every rank trains to the end and writes
OUT/rank<N>.json: its parameters after training and the all-reduced sum.
Every round's ranks also write OUT/start<ROUND>.<RANK>.json as soon as
they start: whether they found the modules already imported (PRELOADED),
their pid, their parent's pid and executable, their torch seed, and what
else a forked worker must see as a plain start does (argv, sys.path, the
environment's names, the stdio streams).

What a worker prints is the same in every run (no pids, times or paths),
so the per-rank log files of two runs can be compared byte for byte."""

import sys
# The first thing the script does, before it imports anything: a worker
# dtrun --preload forked from its warm interpreter already has torch (and
# whatever else was preloaded); a plain start has only what Python's own
# start-up imported.
PRELOADED = sorted(m for m in ("torch", "torch.distributed") if m in sys.modules)

import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def whoami():
    ppid = os.getppid()
    return {"preloaded": PRELOADED, "pid": os.getpid(), "ppid": ppid,
            "parent_exe": os.readlink(f"/proc/{ppid}/exe"),
            "restart_count": int(os.environ["TORCHELASTIC_RESTART_COUNT"]),
            "rank": int(os.environ["RANK"]), "torch": torch.__version__,
            # A plain start seeds torch's default generator from the
            # system's entropy: every worker draws differently.
            "torch_seed": torch.initial_seed(),
            # What a forked worker must see as a plain start does.
            "argv": sys.argv, "orig_argv": getattr(sys, "orig_argv", None), "path": sys.path,
            "cwd": os.getcwd(), "environ": sorted(os.environ), "main": __file__,
            "stdio": [(f.fileno(), f.encoding, f.errors, f.line_buffering, f.write_through)
                      for f in (sys.stdin, sys.stdout, sys.stderr)]}


def write_json(path, data):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


KEEP = []


@record
def main():
    out = sys.argv[1]
    me = whoami()
    rank, attempt = me["rank"], me["restart_count"]
    write_json(os.path.join(out, f"start{attempt}.{rank}.json"), me)
    print(f"rank {rank} attempt {attempt}: training", flush=True)
    print(f"rank {rank} attempt {attempt}: a line on stderr", file=sys.stderr, flush=True)
    dist.init_process_group("gloo")
    torch.manual_seed(0)  # the same initial parameters on every rank
    model = DDP(torch.nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        g = torch.Generator().manual_seed(10 * step + rank)
        x = torch.randn(8, 4, generator=g)
        opt.zero_grad()
        model(x).pow(2).sum().backward()  # DDP all-reduces the gradients
        opt.step()
        if attempt == 0 and step == 1:
            if rank == 1:
                raise RuntimeError("rank 1 fails in round 0 at step 1")
            # Not in a collective when rank 1 fails (gloo's "connection
            # closed" would race dtrun's SIGTERM): the output is the same
            # in every run.
            signal.pause()
        print(f"rank {rank} attempt {attempt}: step {step} done", flush=True)
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    # Kept until the process ends. torch's gloo thread drops its reference
    # to a collective's tensor a moment after the collective completes; if
    # that is the last one, freeing the tensor's Python object needs the
    # GIL, and once the interpreter is finalizing the thread is ended
    # there, inside C++, and the process aborts ("terminate called without
    # an active exception": about one run in twenty on torch 2.6, with or
    # without --preload). Destroying the process group does not stop its
    # threads (torch keeps the group), so only this makes exit clean.
    # examples/ddp_gloo.py leaves by os._exit instead; here the worker's
    # normal exit is part of what is tested: a forked interpreter must end
    # (atexit, its stdio flushed) as a plain one does.
    KEEP.append(total)
    me["params"] = [p.detach().flatten().tolist() for p in model.parameters()]
    me["allreduce_sum"] = total.item()
    me["world_size"] = dist.get_world_size()
    dist.destroy_process_group()
    write_json(os.path.join(out, f"rank{rank}.json"), me)
    print(f"rank {rank} attempt {attempt}: done", flush=True)


if __name__ == "__main__":
    main()
