"""One rank of a gloo process group bootstrapped through an existing store.

Usage: /usr/bin/python3 gloo_store_worker.py HOST PORT RANK WORLD_SIZE

Connects a PyTorch TCPStore client (is_master=False) to HOST:PORT, runs
init_process_group("gloo", store=...), an all_reduce on the world, a
barrier, and an all_reduce inside new_group([1, 3]); prints one JSON line
with what it observed. Used by tests/integration/test_store_torch_client.py.
"""

import datetime
import json
import sys

import torch
import torch.distributed as dist


def main() -> None:
    host, port, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    timeout = datetime.timedelta(seconds=60)
    store = dist.TCPStore(host, port, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)

    # Exactly representable values, so the sum can be compared exactly.
    floats = torch.tensor([rank + 1.0, 0.5 * (rank + 1), -(2.0 ** rank)])
    ints = torch.tensor([rank, 1 << (8 * rank)], dtype=torch.int64)
    dist.all_reduce(floats)
    dist.all_reduce(ints)
    dist.barrier()

    # Every rank must call new_group; only members use it.
    members = [1, 3]
    group = dist.new_group(members)
    group_sum = None
    if rank in members:
        t = torch.tensor([10 * rank], dtype=torch.int64)
        dist.all_reduce(t, group=group)
        group_sum = int(t.item())
    dist.barrier()

    print(json.dumps({
        "rank": rank,
        "world_size": dist.get_world_size(),
        "floats": floats.tolist(),
        "ints": ints.tolist(),
        "group_sum": group_sum,
    }), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
