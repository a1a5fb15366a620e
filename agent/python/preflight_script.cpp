#include "agent/python/preflight_script.h"

#include <fstream>
#include <stdexcept>
#include <system_error>

#include <boost/filesystem.hpp>

#include "rendezvous/base/printable.h"

namespace dtrun::agent {

namespace {

// The pairs' exchanges are timed after a one-element handshake, so a
// partner still busy with an earlier step does not count as a slow link;
// each is repeated and the best time kept (noise only adds time).
constexpr const char* script_source = R"PY(# dtrun's preflight check, written by dtrun (docs/agent.md, "Preflight").
# Run in place of the training, with its environment and ranks: a compute
# timing and pairwise bandwidth between nodes, written as one JSON result.
import json
import os
import sys
import time


def _timed(fn, sync):
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def _compute_seconds(torch, device, sync):
    # A fixed matrix product; the best of several (noise only adds time).
    n = 2048 if device.type == "cuda" else 256
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    for _ in range(2):
        torch.matmul(a, b)
    return min(_timed(lambda: torch.matmul(a, b), sync) for _ in range(10))


def _exchange(dist, backend, send, recv, peer):
    if backend == "nccl":
        # Grouped, so that both sides' sends cannot wait on each other.
        ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
        requests = dist.batch_isend_irecv(ops)
    else:
        requests = [dist.isend(send, peer), dist.irecv(recv, peer)]
    for r in requests:
        r.wait()


def _bandwidth(torch, dist, backend, device, sync, plan, peers):
    count = max(1, int(plan["payload_bytes"]) // 4)
    send = torch.ones(count, device=device)
    recv = torch.empty(count, device=device)
    ping = torch.zeros(1, device=device)
    pong = torch.zeros(1, device=device)
    exchanges = []
    for step, peer in enumerate(peers):
        if peer is None:
            continue
        best = None
        for _ in range(int(plan["repeats"])):
            _exchange(dist, backend, ping, pong, peer)
            sync()
            seconds = _timed(lambda: _exchange(dist, backend, send, recv, peer), sync)
            best = seconds if best is None else min(best, seconds)
        exchanges.append({"step": step, "partner_node": plan["partners"][step],
                          "bytes": count * 4, "seconds": best})
    return exchanges


def _peers(torch, dist, device, node, local_rank, partners):
    # Every rank's (node, local rank): the partner node's same local rank.
    mine = torch.tensor([node, local_rank], dtype=torch.int64, device=device)
    table = [torch.zeros(2, dtype=torch.int64, device=device)
             for _ in range(dist.get_world_size())]
    dist.all_gather(table, mine)
    where = {(int(t[0]), int(t[1])): r for r, t in enumerate(table)}
    return [where.get((p, local_rank)) if p >= 0 else None for p in partners]


def _write(path, result):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, path)


def main():
    started = time.perf_counter()
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    result_path = sys.argv[2]
    from datetime import timedelta
    import torch
    import torch.distributed as dist
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    backend = plan["backend"]
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        sync = torch.cuda.synchronize
    else:
        device = torch.device("cpu")
        sync = lambda: None
    timeout = timedelta(seconds=float(plan["timeout_s"]))
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          world_size=world, is_master=(not agent_store and rank == 0),
                          timeout=timeout)
    store = dist.PrefixStore(plan["store_prefix"], store)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    # Every rank times its compute at the same moment, so that none is
    # timed alone while the others still start (import torch) or idle.
    dist.barrier()
    compute = _compute_seconds(torch, device, sync)
    peers = _peers(torch, dist, device, plan["node"], local_rank, plan["partners"])
    exchanges = _bandwidth(torch, dist, backend, device, sync, plan, peers)
    dist.barrier()
    dist.destroy_process_group()
    _write(result_path, {"version": 1, "rank": rank, "node": plan["node"],
                         "local_rank": local_rank, "backend": backend, "device": str(device),
                         "compute_s": compute, "exchanges": exchanges,
                         "total_s": time.perf_counter() - started})


if __name__ == "__main__":
    main()
)PY";

}  // namespace

const char* preflight_script_source() { return script_source; }

std::string write_preflight_script(const std::string& dir) {
  boost::system::error_code ec;
  boost::filesystem::create_directories(dir, ec);
  std::string path = dir + "/dtrun_preflight.py";
  std::ofstream out;
  if (!ec) out.open(path, std::ios::trunc);
  if (ec || !(out << script_source) || !out.flush()) {
    throw std::runtime_error("cannot write the preflight script " + printable(path) + ": " +
                             (ec ? ec.message() : std::string("write failed")));
  }
  return path;
}

}  // namespace dtrun::agent
