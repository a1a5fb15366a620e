#include "agent/python/python_hook.h"

namespace dtrun::agent {
namespace {

// Appended to the hook (python_hook.cpp), whose functions it calls to do a
// plain start's hook work in each forked worker. Like the hook, it keeps
// to what Python has imported at start-up, plus _socket, ctypes, signal,
// io and importlib (and select and warnings, when an import left threads).
constexpr const char* preload_source = R"PY(
# --preload: this interpreter is dtrun's warm interpreter (DTRUN_PRELOAD
# names the modules). Started exactly as a worker would be (the same
# program, flags, script and environment), it imports the modules, then
# forks each worker on the agent's request and hands over to a forked
# successor; each forked child becomes the worker and returns from here,
# so Python's own start-up goes on to run the script (or -m module) as a
# plain start would (docs/agent.md, "Preload").
#
# The agent talks on fd 0, a SOCK_SEQPACKET socket (moved to a high fd
# before the import, fd 0 then reading /dev/null: _dtrun_serve). Requests:
#   spawn\0<cwd>\0<n cpus>\0<cpu>...\0<n args>\0<arg>...\0<NAME=value>...
#     with the worker's stdin, stdout and stderr and its "go" pipe
#     attached (SCM_RIGHTS); the args are the script's own (sys.argv[1:]).
#     Reply: "pid <n>".
#   next   with the successor's socket and its "go" pipe attached. Reply
#     "pid <n>", then this interpreter exits, so its children become the
#     agent's; each goes on once the agent writes a byte to its "go" (and
#     exits at an end of file without one: the agent never got its pid).
# Replies otherwise: "ready" once the modules are imported, or
# "error <one line>" and exit.


def _dtrun_preload_fail(sock, line):
    try:
        sock.send(("error " + line.replace("\n", " ")).encode("utf-8", "replace")[:4000])
    except Exception:
        pass
    _os._exit(3)


def _dtrun_cwd():
    # None when the folder was removed (getcwd fails; the process can stay).
    try:
        return _os.getcwdb()
    except OSError:
        return None


def _dtrun_threads():
    # Threads that are ending (PF_EXITING, 0x4, in stat's flags) do not
    # count: pthread_join returns a moment before the thread leaves
    # /proc/self/task.
    count = 0
    for tid in _os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/stat" % tid, "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[6]) & 0x4:
                continue
        except (FileNotFoundError, ProcessLookupError):
            continue  # gone since the listing
        except (OSError, IndexError, ValueError):
            pass
        count += 1
    return count


def _dtrun_threads_past_a_fork():
    # The threads left once the process has forked. Some libraries stop
    # their threads in a pthread_atfork handler and start them again on
    # their next use: OpenBLAS does, which numpy loads (and torch imports
    # numpy) with a thread per core unless OMP_NUM_THREADS or
    # OPENBLAS_NUM_THREADS is 1. Their threads are no obstacle: one
    # throwaway fork, whose child exits at once, ends them here, and only
    # what is left counts.
    # The child's end of a pipe closes when it exits: waited for with a
    # bound (a fork with threads is the one whose child could hang, in an
    # at-fork handler), after which the threads count as they were.
    threads = _dtrun_threads()
    if threads == 1:
        return 1
    import select
    import signal
    import warnings
    try:
        ended, w = _os.pipe()
    except OSError:
        return threads
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded"
            pid = _os.fork()
        if pid == 0:
            _os._exit(0)
    except OSError:
        pid = None  # no fork (EAGAIN, ENOMEM): as they were
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _os.close(w)
    try:
        if pid is None:
            return threads
        exited = bool(select.select([ended], [], [], 10)[0])
        if not exited:
            _os.kill(pid, signal.SIGKILL)
        try:
            _os.waitpid(pid, 0)
        except ChildProcessError:
            pass  # reaped by another (SIGCHLD ignored)
        return _dtrun_threads() if exited else threads
    finally:
        _os.close(ended)


def _dtrun_cuda_initialized():
    torch = _sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:
        return False


def _dtrun_random_state(name, module):
    # What identifies the random state an import of torch or numpy drew.
    if name == "torch":
        return module.initial_seed()
    return bytes(module.random.get_state()[1])


class _DtrunDrawnState:
    # A finder that only watches: torch's and numpy's own imports draw their
    # random state; it records that state as their import left it, so that a
    # forked worker draws afresh only a state nothing set since (a module
    # that called torch.manual_seed(0) at import keeps its seed, as in a
    # plain start).
    def __init__(self):
        self.drawn = {}

    def find_spec(self, name, path=None, target=None):
        if name not in ("torch", "numpy"):
            return None
        for finder in _sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec
        drawn = self.drawn

        def exec_and_record(module):
            exec_module(module)
            try:
                drawn[name] = _dtrun_random_state(name, module)
            except Exception:
                pass
        try:
            loader.exec_module = exec_and_record
        except Exception:
            pass
        return spec


def _dtrun_import_all(sock, modules):
    # Imported as the script would import them: its folder first on
    # sys.path (Python adds it only after sitecustomize, where we are).
    main = _sys.argv[0] if _sys.argv else ""
    if main == "-m":
        first = _os.fsdecode(_dtrun_cwd() or b"")
    else:
        first = _os.path.dirname(_os.path.realpath(main)) if main else ""
    added = bool(first) and not getattr(_sys.flags, "safe_path", False)
    if added:
        _sys.path.insert(0, first)
    watch = _DtrunDrawnState()
    _sys.meta_path.insert(0, watch)
    try:
        import importlib
        for name in modules:
            try:
                importlib.import_module(name)
            except BaseException as e:
                _dtrun_preload_fail(sock, "--preload: importing %s failed: %s: %s" % (
                    name, type(e).__name__, str(e).split("\n")[0][:300]))
            threads = _dtrun_threads_past_a_fork()
            if threads > 1:
                _dtrun_preload_fail(sock, (
                    "--preload: importing %s left %d threads running in the warm interpreter, "
                    "which cannot be forked safely; drop %s from --preload (or make it start no "
                    "threads, e.g. OMP_NUM_THREADS/OPENBLAS_NUM_THREADS=1)") % (
                        name, threads, name))
            if _dtrun_cuda_initialized():
                _dtrun_preload_fail(sock, (
                    "--preload: importing %s initialised CUDA in the warm interpreter, which a "
                    "forked worker cannot use; drop %s from --preload") % (name, name))
    finally:
        if watch in _sys.meta_path:
            _sys.meta_path.remove(watch)
        if added and _sys.path and _sys.path[0] == first:
            del _sys.path[0]
    return watch.drawn


def _dtrun_received_fds(ancillary):
    import _socket
    fds = []
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds += [int.from_bytes(data[i:i + 4], _sys.byteorder) for i in range(0, usable, 4)]
    return fds


def _dtrun_stdio(fd, write, name, encoding, errors, buffered):
    # As Python's start-up makes sys.stdin/stdout/stderr (create_stdio):
    # the worker's descriptors may be a terminal where ours were a file.
    import io
    buffering = 0 if (write and not buffered) else -1
    buf = io.open(fd, "wb" if write else "rb", buffering, closefd=False)
    raw = buf.raw if buffering else buf
    try:
        raw.name = name
    except Exception:
        pass
    stream = io.TextIOWrapper(buf, encoding, errors, "\n",
                              buffered and (raw.isatty() or fd == 2), not buffered)
    stream.mode = "w" if write else "r"
    return stream


def _dtrun_wait_for_agent(libc, go, agent):
    # Our parent, the warm interpreter, exits once the round is started;
    # the agent (its subreaper) then becomes our parent, and only then can
    # the parent-death signal be the agent's. The agent writes a byte to
    # `go` once it has reaped the warm interpreter, by when the kernel has
    # re-parented us. (Waiting for the parent's own death signal instead
    # races with setting it: each side may miss the other's write.) An end
    # of file without that byte: the agent is gone, or our parent died
    # before it could tell the agent our pid; a worker the agent does not
    # know of would run beside the one it starts instead (the same RANK
    # twice).
    if not _os.read(go, 1):
        _os._exit(1)
    _os.close(go)
    libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    if _os.getppid() != agent:
        _os._exit(1)  # the agent died meanwhile


def _dtrun_become_worker(fields, fds, state):
    import signal
    _os.setsid()
    cwd = fields[1]
    count = int(fields[2])
    cpus = [int(c) for c in fields[3:3 + count]]
    at = 3 + count
    count = int(fields[at])
    script_args = [_os.fsdecode(a) for a in fields[at + 1:at + 1 + count]]
    env = fields[at + 1 + count:]
    _os.environb.clear()
    for entry in env:
        key, _, value = entry.partition(b"=")
        _os.environb[key] = value
    for key in state["env_unset"]:
        _os.environb.pop(key, None)
    _os.environb.update(state["env_set"])
    before, after = state["cwd"]
    _os.chdir(after if after is not None and cwd == before else cwd)
    if cpus:
        _os.sched_setaffinity(0, cpus)
    go = fds[3]
    for target, fd in zip((0, 1, 2), fds[:3]):
        _os.dup2(fd, target)
    for fd in set(fds[:3]):
        if fd > 2:
            _os.close(fd)
    old = (_sys.__stdin__, _sys.__stdout__, _sys.__stderr__)
    buffered = state["buffered"]
    new = [_dtrun_stdio(i, i > 0, "<%s>" % n, getattr(o, "encoding", None),
                        getattr(o, "errors", None), buffered)
           for i, (n, o) in enumerate(zip(("stdin", "stdout", "stderr"), old))]
    # A stream a preloaded module put in place while importing (a wrapper
    # that colours or tags output) stays, as a plain start's own import
    # would leave it: it writes through the warm interpreter's stream,
    # whose descriptor is now the worker's.
    if _sys.stdin is old[0]:
        _sys.stdin = new[0]
    if _sys.stdout is old[1]:
        _sys.stdout = new[1]
    if _sys.stderr is old[2]:
        _sys.stderr = new[2]
    _sys.__stdin__, _sys.__stdout__, _sys.__stderr__ = new
    # The worker's arguments after the script (or module), which may differ
    # from the warm interpreter's ({rank} templates).
    prefix = len(getattr(_sys, "orig_argv", [])) - len(_sys.argv)
    _sys.argv[1:] = script_args
    if hasattr(_sys, "orig_argv") and prefix >= 0:
        _sys.orig_argv[prefix + 1:] = script_args
    for sig, handler in state["handlers"].items():
        try:
            if handler is not None and signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)
        except (OSError, ValueError, TypeError):
            pass
    # A plain start draws fresh random state where an import draws it:
    # numpy's global generator and torch's CPU one were drawn in the warm
    # interpreter, the same for every worker and round (Python's random
    # reseeds itself on fork; torch's CUDA generators start from a fixed
    # default either way). Not a state a module set after that (a seed
    # given at import is the program's: a plain start keeps it too).
    # multiprocessing's authkey, drawn at its import, is each process's
    # own secret for its children's connections.
    for module, reseed in (("numpy", lambda m: m.random.seed()),
                           ("torch", lambda m: m.default_generator.seed()),
                           ("multiprocessing.process",
                            lambda m: setattr(m.current_process(), "authkey", _os.urandom(32)))):
        if module in _sys.modules:
            try:
                drawn = state["drawn"].get(module)
                if drawn is None or drawn == _dtrun_random_state(module, _sys.modules[module]):
                    reseed(_sys.modules[module])
            except Exception:
                pass
    # The hook's per-worker part, now that the environment is the worker's.
    global _dtrun_exception_file
    _dtrun_exception_file = _os.environ.pop("DTRUN_EXCEPTION_FILE", "")
    try:
        _dtrun_flight_recorder_names()
    except Exception:
        pass
    _dtrun_restore_pythonpath(state["here"])
    _dtrun_register()
    _dtrun_offer_module()
    # torch was imported in the warm interpreter, without a page: timed
    # now, as a plain start's import would have been.
    try:
        _dtrun_time_torch()
    except Exception:
        pass
    _dtrun_wait_for_agent(state["libc"], go, state["agent"])
    signal.pthread_sigmask(signal.SIG_SETMASK, state["mask"])


def _dtrun_serve(modules):
    import _socket
    import ctypes
    import fcntl
    import signal
    # The agent's socket leaves fd 0 before the import, and fd 0 reads
    # /dev/null: a module that read stdin while importing would otherwise
    # wait on the socket for ever (the agent waits for "ready"), and one
    # that closed or replaced fd 0 would take the socket with it. High, so
    # that the descriptors the modules open are numbered as in a plain
    # start (a forked worker closes it), but not so high that every fork
    # copies a descriptor table sized for it (RLIMIT_NOFILE is often 2^20).
    high = max(3, min(_os.sysconf("SC_OPEN_MAX") // 2, 1000))
    sock = _socket.socket(fileno=fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, high))
    null = _os.open(_os.devnull, _os.O_RDONLY)
    _os.dup2(null, 0)
    _os.close(null)
    state = {
        "here": _os.path.dirname(_os.path.abspath(__file__)),
        "libc": ctypes.CDLL(None, use_errno=True),
        "agent": _os.getppid(),
        "mask": signal.pthread_sigmask(signal.SIG_BLOCK, []),
        # -u (or PYTHONUNBUFFERED), as Python's start-up applied it.
        "buffered": not getattr(_sys.stdout, "write_through", False),
    }
    # What importing changes in the environment and the folder, a plain
    # start's worker would see changed (its own import would have changed
    # it): each forked worker, given its own environment and folder, has
    # the same changes made (_dtrun_become_worker).
    env_before = dict(_os.environb)
    cwd_before = _dtrun_cwd()
    state["drawn"] = _dtrun_import_all(sock, modules)
    state["env_set"] = {k: v for k, v in _os.environb.items() if env_before.get(k) != v}
    state["env_unset"] = [k for k in env_before if k not in _os.environb]
    state["cwd"] = (cwd_before, _dtrun_cwd())
    # As the modules' import left them: a plain start's worker imports them
    # itself and keeps the handlers they install (a SIGTERM handler that
    # saves a checkpoint, a signal ignored).
    state["handlers"] = {s: signal.getsignal(s) for s in signal.valid_signals()
                         if s not in (signal.SIGKILL, signal.SIGSTOP)}
    sock.send(b"ready")
    while True:
        try:
            # Room for the largest environment exec takes (ARG_MAX, 2 MiB
            # by default; the agent may raise its send buffer to send it).
            data, ancillary, flags, _ = sock.recvmsg(1 << 23, _socket.CMSG_SPACE(4 * 4))
        except InterruptedError:
            continue
        except OSError as e:
            _dtrun_preload_fail(sock, "--preload: the agent's request failed: %s" % e)
        fds = _dtrun_received_fds(ancillary)
        if flags & (_socket.MSG_TRUNC | _socket.MSG_CTRUNC):
            # Cut short, the environment would be a truncated one.
            _dtrun_preload_fail(sock, "--preload: a request from the agent was too long")
        if not data:
            _os._exit(0)  # the agent is gone or done with us
        fields = data.split(b"\0")
        kind = fields[0]
        if kind not in (b"spawn", b"next") or len(fds) != (4 if kind == b"spawn" else 2):
            _dtrun_preload_fail(sock, "--preload: a malformed request from the agent")
        for stream in (_sys.stdout, _sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        # Blocked across the fork: the child sets up with no handler of
        # ours running, and a signal sent meanwhile waits for the worker.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        pid = _os.fork()
        if pid == 0:
            try:
                if kind == b"spawn":
                    sock.close()
                    _dtrun_become_worker(fields, fds, state)
                    return  # Python's start-up goes on: the script runs
                # The successor: the same warm interpreter on a new socket.
                _os.dup2(fds[0], sock.fileno(), inheritable=False)
                _os.close(fds[0])
                sock = _socket.socket(fileno=sock.detach())
                _os.setsid()
                _dtrun_wait_for_agent(state["libc"], fds[1], state["agent"])
                # A module's os.register_at_fork(after_in_child=...) ran in
                # this copy too, and may have started a thread: the check
                # made after the import, made again before any fork from it.
                threads = _dtrun_threads()
                if threads > 1:
                    _dtrun_preload_fail(sock, (
                        "--preload: the warm interpreter's successor has %d threads running "
                        "after its fork (a preloaded module's os.register_at_fork handler "
                        "started them) and cannot be forked safely") % threads)
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                sock.send(b"ready")
                continue
            except BaseException as e:
                try:
                    _os.write(2, ("dtrun: a preloaded worker could not start: %s: %s\n" % (
                        type(e).__name__, e)).encode("utf-8", "replace"))
                finally:
                    _os._exit(1)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for fd in fds:
            _os.close(fd)
        sock.send(b"pid %d" % pid)
        if kind == b"next":
            _os._exit(0)


_dtrun_preload_modules = _os.environ.pop("DTRUN_PRELOAD", "")
if _dtrun_preload_modules:
    try:
        _dtrun_serve([m for m in _dtrun_preload_modules.split(",") if m])
    except BaseException as e:
        # Only the warm interpreter gets here (a forked worker returns from
        # _dtrun_serve). It must never go on into Python's start-up: that
        # would run the script in a process that is no worker (site.py
        # reports a sitecustomize error and carries on).
        try:
            _os.write(2, ("dtrun: the warm interpreter failed: %s: %s\n" % (
                type(e).__name__, e)).encode("utf-8", "replace"))
        finally:
            _os._exit(3)
)PY";

}  // namespace

const char* python_preload_source() { return preload_source; }

}  // namespace dtrun::agent
