"""Progress from a training worker to dtrun, the launcher that started it.

    import dtrun

    for n, batch in enumerate(loader):
        dtrun.step(n)                      # step n starts now
        ...
        with dtrun.section("checkpoint"):  # or @dtrun.section("checkpoint")
            save(...)

dtrun shows each rank's step and section in `dtrun status` and /metrics,
learns how long each section takes, and with --section-timeouts names a
rank that overstays one (docs/agent.md, "Progress from the workers").

Nothing here makes a system call per step or per section: the counters go
to a page of memory the agent created and reads (agent/watch/progress_page.h
documents the layout; the constants below are the same). Outside dtrun, or
in a process dtrun did not start (a DataLoader worker, a subprocess), every
call does nothing. Call from one thread, the training loop's.

dtrun's start-up hook makes this module importable in the workers it
starts; the dtrun wheel installs the same file.
"""

import os as _os
import sys as _sys
import time as _time
from threading import get_ident as _get_ident

__all__ = ["step", "section", "enabled"]

_MAGIC = 0x3147504E55525444  # "DTRUNPG1"
_VERSION = 1
_PAGE_BYTES = 4096
_W_WRITER_PID, _W_SEQUENCE, _W_STEP, _W_STEP_START, _W_STEPS_DONE = 3, 4, 5, 6, 7
_W_CURRENT, _W_CURRENT_SINCE, _W_DEPTH, _W_NAMED = 8, 9, 10, 11
_STEP_RING, _STEP_RING_ENTRIES, _STEP_ENTRY_WORDS = 16, 16, 5
_SECTIONS, _SECTION_SLOTS, _SECTION_WORDS = 128, 24, 13
_NAME_BYTES, _NAME_WORDS, _INTERVAL_RING = 32, 4, 8

_now = _time.monotonic_ns
_page = None        # memoryview of 64-bit words, None when off
_map = None
_sequence = 0
_step = -1
_step_start = 0
_steps_done = 0
_slots = {"step": 0}  # section name -> slot
_counts = [0] * _SECTION_SLOTS
_open = []          # [slot, entered ns] of the open sections, innermost last


def enabled():
    """True when dtrun reads what this process reports."""
    return _page is not None


def _attach():
    global _page, _map, _sequence
    # The start-up hook moves the path from os.environ to sys (a worker's
    # environment stays torchrun's); --preload's workers have it in
    # os.environ.
    path = (_os.environ.get("DTRUN_PROGRESS_PAGE", "")
            or getattr(_sys, "_dtrun_progress_page", ""))
    if not path:
        return
    import mmap
    fd = _os.open(path, _os.O_RDWR | _os.O_CLOEXEC)
    try:
        m = mmap.mmap(fd, _PAGE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        _os.close(fd)
    words = memoryview(m).cast("q")
    if words[0] != _MAGIC or words[1] != _VERSION:
        words.release()
        m.close()
        return
    # The page is the first process's to import this module: a process
    # it starts with the same environment leaves it alone.
    if words[_W_WRITER_PID] not in (0, _os.getpid()):
        words.release()
        m.close()
        return
    words[_W_WRITER_PID] = _os.getpid()
    _sequence = words[_W_SEQUENCE] + (words[_W_SEQUENCE] & 1)
    _page, _map = words, m
    try:
        _os.register_at_fork(after_in_child=_detach)
    except Exception:
        pass


def _detach():
    # A forked child (a DataLoader worker) must not write its parent's page.
    global _page
    _page = None


def step(n=None):
    """Step `n` (the previous one + 1 when None) starts now; the previous
    step, if any, ended now."""
    global _explicit
    _explicit = True
    _step_now(n)


def _step_now(n):
    global _sequence, _step, _step_start, _steps_done, _wait
    p = _page
    if p is None:
        return
    now = _now()
    s = _sequence + 1
    p[_W_SEQUENCE] = s
    if _step >= 0:
        at = _STEP_RING + (_steps_done % _STEP_RING_ENTRIES) * _STEP_ENTRY_WORDS
        p[at] = _step
        p[at + 1] = _step_start
        p[at + 2] = now
        # Own work and wait: timed only once instrument_*() ran (the
        # start-up hook's, issue 48 item 2); 0 is "not timed". With DDP
        # the step's wait comes one step late (_fill_step_wait): "not
        # timed" until then, so the agent never reads its wall time as
        # its own work.
        p[at + 3] = max(1, now - _step_start - _wait) if _timing and not _ddp_fills else 0
        p[at + 4] = _wait
        _wait = 0
        _steps_done += 1
        p[_W_STEPS_DONE] = _steps_done
        _close_interval(p, 0, now - _step_start)
    _step = _step + 1 if n is None else int(n)
    _step_start = now
    p[_W_STEP] = _step
    p[_W_STEP_START] = now
    if not _open:
        p[_W_CURRENT] = 0
        p[_W_CURRENT_SINCE] = now
    _sequence = s + 1
    p[_W_SEQUENCE] = _sequence


def _close_interval(p, slot, interval):
    count = _counts[slot] + 1
    _counts[slot] = count
    base = _SECTIONS + slot * _SECTION_WORDS + _NAME_WORDS
    p[base + 1 + (count - 1) % _INTERVAL_RING] = interval
    p[base] = count


def _slot_of(p, name):
    slot = _slots.get(name)
    if slot is not None:
        return slot
    slot = len(_slots)
    if slot >= _SECTION_SLOTS:
        return -1  # no room: timed by nobody, still nested correctly
    raw = name.encode("utf-8", "replace")[:_NAME_BYTES - 1]
    raw = raw + b"\0" * (_NAME_BYTES - len(raw))
    base = _SECTIONS + slot * _SECTION_WORDS
    for i in range(_NAME_WORDS):
        p[base + i] = int.from_bytes(raw[8 * i:8 * i + 8], "little", signed=True)
    _slots[name] = slot
    p[_W_NAMED] = len(_slots)
    return slot


class section:
    """`with dtrun.section(name):` or `@dtrun.section(name)`: the rank is
    busy with `name` in between. Sections nest; the innermost is the one
    the rank is in."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = str(name)

    def __enter__(self):
        global _sequence
        p = _page
        if p is None:
            return self
        now = _now()
        s = _sequence + 1
        p[_W_SEQUENCE] = s
        slot = _slot_of(p, self.name)
        _open.append((slot, now))
        p[_W_CURRENT] = slot
        p[_W_CURRENT_SINCE] = now
        p[_W_DEPTH] = len(_open)
        _sequence = s + 1
        p[_W_SEQUENCE] = _sequence
        return self

    def __exit__(self, kind, value, tb):
        global _sequence
        p = _page
        if p is None or not _open:
            return False
        now = _now()
        s = _sequence + 1
        p[_W_SEQUENCE] = s
        slot, entered = _open.pop()
        if slot >= 0:
            _close_interval(p, slot, now - entered)
        # Back to the enclosing section, or to the step: its clock starts
        # again now, so a long inner section is not charged to it.
        p[_W_CURRENT] = _open[-1][0] if _open else (0 if _step >= 0 else -1)
        p[_W_CURRENT_SINCE] = now
        p[_W_DEPTH] = len(_open)
        _sequence = s + 1
        p[_W_SEQUENCE] = _sequence
        return False

    def __call__(self, function):
        import functools
        name = self.name

        @functools.wraps(function)
        def timed(*args, **kwargs):
            with section(name):
                return function(*args, **kwargs)
        return timed


# Own work per step (issue 48, item 2; docs/stragglers.md). In synchronous
# training every rank's step lasts as long as the slowest rank's, so what
# names a straggler is its own work: a step's wall time less the time the
# rank waited in collectives. dtrun's start-up hook calls instrument() when
# torch is imported (unless --worker-timing=off):
# - DistributedDataParallel: its gradient all-reduce runs in C++, so the
#   wait comes from DDP's own timing (its logging data, sampled every
#   iteration): the communication still running after the backward's last
#   gradient was ready. DDP measures an iteration at the next forward, so
#   a step's figures are filled in one step late. Without dtrun.step()
#   calls, each forward of a DDP model starts a step.
# - torch.distributed's blocking collectives (all_reduce, broadcast, ...):
#   timed around the call (async_op=True calls are not: their wait happens
#   elsewhere).
# Both run outside torch.compile's graphs (torch.compiler.disable): a
# compiled model calls them as before, with a graph break at a wrapped
# collective.
_timing = False      # instrument_*() ran: steps carry own work and wait
_wait = 0            # ns the running step waited in timed collectives
_explicit = False    # the program calls dtrun.step(): DDP's forward does not
_in_collective = 0   # nesting: all_gather_object calls all_gather
_ddp_fills = False   # a DDP model's figures arrive: steps wait for them
_owner = None        # the thread whose collectives are timed (the first to step)


def _fill_step_wait(p, step_no, wait):
    # Adds `wait` to the ring entry of completed step `step_no` (when it is
    # still in the ring) and works its own work out again.
    done = p[_W_STEPS_DONE]
    for back in range(min(done, _STEP_RING_ENTRIES)):
        at = _STEP_RING + ((done - 1 - back) % _STEP_RING_ENTRIES) * _STEP_ENTRY_WORDS
        if p[at] == step_no:
            total = p[at + 4] + wait
            p[at + 4] = total
            p[at + 3] = max(1, p[at + 2] - p[at + 1] - total)
            return


def _ddp_pre_forward(module, args):
    if not _explicit and _page is not None:
        _step_now(None)
    return None


def _ddp_post_forward(module, args, output):
    global _sequence
    p = _page
    if p is None:
        return None
    global _ddp_fills
    try:
        data = module._get_ddp_logging_data()
        iteration = int(data.get("iteration", 0))
        # The communication left after the backward's compute, as DDP's
        # timer measured the iteration: CUDA events on the GPU stream with
        # NCCL (the *_time_end fields are host-side times, where NCCL's
        # wait does not block), the CPU clock with gloo.
        exposed = (int(data["backward_comm_time"])
                   - int(data["backward_compute_comm_overlap_time"]))
    except Exception:
        return None
    _ddp_fills = True
    seen = module.__dict__.get("_dtrun_iteration", 0)
    if iteration <= seen:
        return None  # no backward since (an evaluation forward)
    module.__dict__["_dtrun_iteration"] = iteration
    s = _sequence + 1
    p[_W_SEQUENCE] = s
    _fill_step_wait(p, _step - 1, max(0, exposed))
    _sequence = s + 1
    p[_W_SEQUENCE] = _sequence
    return None


def _timed_collective(function):
    import functools

    @functools.wraps(function)
    def timed(*args, **kwargs):
        global _wait, _in_collective, _owner
        if _page is None or _in_collective or kwargs.get("async_op") or _compiling():
            return function(*args, **kwargs)
        # One thread's collectives only (the training loop's, the first to
        # call one): a checkpointing thread's barrier is not a step's wait.
        me = _get_ident()
        if _owner is None:
            _owner = me
        elif me != _owner:
            return function(*args, **kwargs)
        _in_collective += 1
        start = _now()
        try:
            return function(*args, **kwargs)
        finally:
            _in_collective -= 1
            _wait += _now() - start
    timed.__dtrun_timed__ = True
    return timed


_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object",
                "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
                "broadcast", "broadcast_object_list", "reduce", "gather", "scatter", "barrier")


def _compiling():
    # Inside torch.compile's tracing the collective is the graph's (Dynamo
    # traces it natively): nothing to time. Read at call time, as torch is
    # still importing when the collectives are wrapped.
    try:
        return _sys.modules["torch"].compiler.is_compiling()
    except Exception:
        return False


def _outside_compile(function):
    try:
        import torch
        return torch.compiler.disable(function, recursive=True)
    except Exception:
        return function


def instrument_collectives(c10d):
    """Times the blocking collectives of torch.distributed.distributed_c10d
    (called by the start-up hook right after that module ran, before
    torch.distributed copies its names)."""
    global _timing
    _timing = True
    # torch.distributed copies the names when it runs after c10d; when it
    # ran already (the module was imported before), its copies are timed too.
    package = _sys.modules.get("torch.distributed")
    for name in _COLLECTIVES:
        function = getattr(c10d, name, None)
        if callable(function) and not getattr(function, "__dtrun_timed__", False):
            timed = _timed_collective(function)
            setattr(c10d, name, timed)
            if package is not None and getattr(package, name, None) is function:
                setattr(package, name, timed)


def instrument_ddp(distributed):
    """Times DistributedDataParallel (torch.nn.parallel.distributed) models."""
    global _timing
    _timing = True
    ddp = distributed.DistributedDataParallel
    original = ddp.__init__
    if getattr(original, "__dtrun_timed__", False):
        return
    hooks = []

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        try:
            # Made at the first model, not at import: torch.compiler.disable
            # imports Dynamo (seconds), which a worker that never builds a
            # DDP model (or a --preload fork starting) must not pay.
            if not hooks:
                hooks.extend((_outside_compile(_ddp_pre_forward),
                              _outside_compile(_ddp_post_forward)))
            self._set_ddp_runtime_logging_sample_rate(1)
            self.register_forward_pre_hook(hooks[0])
            self.register_forward_hook(hooks[1])
        except Exception:
            pass
    __init__.__wrapped__ = original
    __init__.__dtrun_timed__ = True
    ddp.__init__ = __init__


try:
    _attach()
except Exception:
    _page = None
