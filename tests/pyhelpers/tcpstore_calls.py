"""Every public call of torch's TCPStore client, against the store at
HOST:PORT, as a transcript (run by the interpreter of the torch under test,
tests/e2e/test_torch2_store.py):

    python tcpstore_calls.py OUT.json [HOST PORT]

HOST and PORT default to MASTER_ADDR and MASTER_PORT: a worker of a
launcher connects to the store its launcher gives it.

Each step is [name, result]: the method or property called (its name as in
dir(torch.distributed.TCPStore)), and what it returned, or
{"raised": ExceptionClassName}. The same script against two servers gives
the same transcript exactly when the servers answered alike, so the test
compares dtrun's store with torch's own server step by step.

The transcript is relative to the store's contents at the start
(`num_keys` counts the keys added since, `list_keys` lists them), so it
is the same on a fresh store and on one that already holds a job's keys
(the agent's). Its JSON also says which public methods of TCPStore no step
called ("uncovered"): a newer torch's new method shows up there.

Nothing here sleeps for another thread to get somewhere first: every
result is the same whichever order the threads run in.
"""

import datetime
import json
import os
import sys
import threading

import torch
import torch.distributed as dist

OUT = sys.argv[1]
HOST = sys.argv[2] if len(sys.argv) > 2 else os.environ["MASTER_ADDR"]
PORT = int(sys.argv[3] if len(sys.argv) > 3 else os.environ["MASTER_PORT"])
ms = lambda n: datetime.timedelta(milliseconds=n)  # noqa: E731


def client(timeout_s: float = 30) -> dist.TCPStore:
    return dist.TCPStore(HOST, PORT, is_master=False, timeout=datetime.timedelta(seconds=timeout_s))


def plain(value):
    """A JSON value for a call's result (bytes as latin-1 text: every byte
    kept, and readable when it is text)."""
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    return value


steps: list = []


def step(name: str, call, note: str = ""):
    """Runs call(), records [name (note), result]; returns the result
    (None when it raised)."""
    try:
        value = call()
        result = plain(value)
    except Exception as e:  # noqa: BLE001: what raised is the result
        value, result = None, {"raised": type(e).__name__}
    steps.append([f"{name} ({note})" if note else name, result])
    return value


def in_thread(target) -> threading.Thread:
    t = threading.Thread(target=target)
    t.start()
    return t


s = client()
base_keys = set(s.list_keys())
base_count = s.num_keys()
every_byte = bytes(range(256)) * 4

# Keys and values.
step("set", lambda: s.set("bin", every_byte))
step("get", lambda: s.get("bin") == every_byte, "every byte back")
step("add", lambda: s.add("counter", 5))
step("add", lambda: s.add("counter", -7), "negative")
step("get", lambda: s.get("counter"), "a counter is decimal text")
step("compare_set", lambda: s.compare_set("cas", "", "first"), "missing, empty expected")
step("compare_set", lambda: s.compare_set("cas", "wrong", "second"), "mismatch")
step("compare_set", lambda: s.compare_set("cas", "first", "second"), "match")
step("compare_set", lambda: s.compare_set("nocas", "x", "y"), "missing, expected given")
step("check", lambda: s.check(["nocas"]), "that stored nothing")
step("multi_set", lambda: s.multi_set(["m1", "m2"], ["v1", b"v2"]))
step("multi_get", lambda: s.multi_get(["m1", "m2"]))
step("append", lambda: s.append("log", "a"), "creates")
step("append", lambda: s.append("log", "bc"))
step("get", lambda: s.get("log"), "appended")
step("check", lambda: s.check(["bin", "m1"]))
step("check", lambda: s.check(["bin", "missing"]), "one missing")
step("delete_key", lambda: s.delete_key("m1"))
step("delete_key", lambda: s.delete_key("m1"), "again")
step("has_extended_api", s.has_extended_api)

# Waits: with and without a timeout, one woken by another client's write,
# and the connection still usable after a timed-out one (its CANCEL_WAIT).
step("wait", lambda: s.wait(["bin", "log"]), "present keys")
step("wait", lambda: s.wait(["missing"], ms(200)), "timeout")
step("get", lambda: s.get("counter"), "after a timed-out wait")
other = client()
woke: list = []
waiter = in_thread(lambda: (other.wait(["late"]), woke.append(other.get("late"))))
s.set("late", "here")
waiter.join(30)
steps.append(["wait (woken by another client's set)", plain(woke)])

# Queues: FIFO, blocking and non-blocking pops, a pop woken by another
# client's push, and a blocking pop that times out (the store's timeout).
step("queue_push", lambda: s.queue_push("q", "a"))
step("queue_push", lambda: s.queue_push("q", b"b"), "bytes")
step("queue_len", lambda: s.queue_len("q"))
step("check", lambda: s.check(["q"]), "a non-empty queue")
step("queue_pop", lambda: s.queue_pop("q"))
step("queue_pop", lambda: s.queue_pop("q", False), "non-blocking")
step("queue_pop", lambda: s.queue_pop("q", False), "non-blocking, empty")
step("queue_len", lambda: s.queue_len("q"), "empty")
step("check", lambda: s.check(["q"]), "an empty queue")
popped: list = []
popper_client = client()
popper = in_thread(lambda: popped.append(popper_client.queue_pop("jobs")))
s.queue_push("jobs", "job1")
popper.join(30)
steps.append(["queue_pop (blocking, woken by another client's push)", plain(popped)])
step("timeout", lambda: s.timeout)
step("set_timeout", lambda: s.set_timeout(ms(200)))
step("queue_pop", lambda: s.queue_pop("never"), "blocking, times out")
step("set_timeout", lambda: s.set_timeout(datetime.timedelta(seconds=30)), "back")
step("timeout", lambda: s.timeout, "after set_timeout")

# Barriers: one of one, three clients (clones) meeting, a lonely one that
# times out and stays counted, and the connection usable after it.
step("barrier", lambda: s.barrier("bar1", 1), "world of one")
clones = [s.clone() for _ in range(2)]
met: list = []
meeting = [in_thread(lambda c=c: (c.barrier("bar3", 3), met.append(True))) for c in clones]
step("barrier", lambda: s.barrier("bar3", 3, datetime.timedelta(seconds=30)), "three clients")
for t in meeting:
    t.join(30)
steps.append(["barrier (the two clones released too)", met])
step("barrier", lambda: s.barrier("lonely", 2, ms(200)), "times out")
step("get", lambda: s.get("lonely"), "a timed-out arrival stays counted")
step("get", lambda: s.get("bar3"), "the meeting's count")
step("clone", lambda: s.clone().get("bin") == every_byte, "a second connection")

# The store's view of itself.
step("num_keys", lambda: s.num_keys() - base_count, "added by this script")
step("list_keys", lambda: sorted(set(s.list_keys()) - base_keys), "added by this script")
step("host", lambda: s.host == HOST)
step("port", lambda: s.port == PORT)
step("libuvBackend", lambda: s.libuvBackend)

# A gloo process group of two ranks (threads) bootstrapped on the store.
sums = [None, None]


def rank(r: int) -> None:
    store = dist.PrefixStore("gloo_pg", client())
    pg = dist.ProcessGroupGloo(store, r, 2, datetime.timedelta(seconds=30))
    t = torch.tensor([float(r + 1)])
    pg.allreduce([t]).wait()
    pg.barrier().wait()
    sums[r] = t.item()


ranks = [in_thread(lambda r=r: rank(r)) for r in range(2)]
for t in ranks:
    t.join(60)
steps.append(["gloo allreduce", sums])

# Bad input: a barrier on a value that is not a number. Both servers close
# that connection (it raises); the data and the other connection stay.
bad = client()
step("set", lambda: bad.set("text", "abc"), "for a bad barrier")
step("barrier", lambda: bad.barrier("text", 2, ms(2000)), "on text")
step("get", lambda: bad.get("bin") == every_byte, "on the closed connection")
step("get", lambda: s.get("text"), "the text kept")
step("get", lambda: s.get("bin") == every_byte, "another connection's data kept")

public = {m for m in dir(dist.TCPStore) if not m.startswith("_")}
called = {name.split(" ")[0] for name, _ in steps}
with open(OUT, "w") as f:
    json.dump({"torch": torch.__version__, "base_keys": len(base_keys), "steps": steps,
               "uncovered": sorted(public - called), "host": HOST}, f)
