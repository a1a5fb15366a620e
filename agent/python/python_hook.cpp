#include "agent/python/python_hook.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include <boost/filesystem.hpp>

#include "rendezvous/base/printable.h"

namespace dtrun::agent {

namespace {

// Kept in step with the header line stack_dump.h parses
// (parse_hook_header). Every step is guarded: a worker must never fail
// because of the hook. No imports beyond the ones Python has already made
// at start-up, except ctypes where Yama asks for PR_SET_PTRACER.
constexpr const char* hook_source = R"PY(# Written by dtrun, the launcher that started this process; it lets dtrun
# ask for this process's Python stacks (faulthandler) when the job hangs,
# and report a program that cannot start (torch missing, a SyntaxError).
# It then imports the next sitecustomize on sys.path, as if it were not here.
import os as _os
import sys as _sys

_dtrun_fd = -1
_dtrun_signal = 0
# Where the uncaught exception's type and first line go, for dtrun's
# failure class (not shown as an error file: that stays @record's).
_dtrun_exception_file = _os.environ.pop("DTRUN_EXCEPTION_FILE", "")


def _dtrun_in_forked_child():
    # A forked child (a DataLoader worker, say) is not the process dtrun
    # started: it must not write into the parent's file. The signal is then
    # ignored rather than left at its default, which would kill.
    global _dtrun_fd
    try:
        import faulthandler
        import signal
        faulthandler.unregister(_dtrun_signal)
        signal.signal(_dtrun_signal, signal.SIG_IGN)
    except Exception:
        pass
    try:
        if _dtrun_fd >= 0:
            _os.close(_dtrun_fd)
    except Exception:
        pass
    _dtrun_fd = -1


def _dtrun_allow_tracer(tracer):
    # Yama's ptrace_scope=1 lets a process trace only its descendants; the
    # agent's eu-stack is this worker's sibling, so name the agent.
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            if f.read().strip() != "1":
                return
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(0x59616d61, ctypes.c_ulong(tracer), ctypes.c_ulong(0),
                   ctypes.c_ulong(0), ctypes.c_ulong(0))
    except Exception:
        pass


def _dtrun_register():
    global _dtrun_fd, _dtrun_signal
    path = _os.environ.pop("DTRUN_STACK_FILE", "")
    signum = _os.environ.pop("DTRUN_STACK_SIGNAL", "")
    tracer = _os.environ.pop("DTRUN_STACK_TRACER", "")
    if not path or not signum.isdigit():
        return
    import faulthandler
    import _thread
    _dtrun_signal = int(signum)
    fd = _os.open(path, _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT | _os.O_CLOEXEC, 0o600)
    try:
        faulthandler.register(_dtrun_signal, file=fd, all_threads=True, chain=False)
    except Exception:
        _os.close(fd)
        raise
    _dtrun_fd = fd
    if tracer.isdigit():
        _dtrun_allow_tracer(int(tracer))
    try:
        _os.register_at_fork(after_in_child=_dtrun_in_forked_child)
    except Exception:
        pass
    main = _sys.argv[0] if _sys.argv else ""
    if main and main not in ("-c", "-m"):
        main = _os.path.abspath(main)
    main = main.replace("\n", "?").replace("\r", "?")
    header = "dtrun-stack-hook pid=%d main_thread=0x%016x signal=%d python=%s main=%s\n" % (
        _os.getpid(), _thread.get_ident(), _dtrun_signal,
        "%d.%d.%d" % _sys.version_info[:3], main)
    # Written last: the agent signals only a process whose header it has
    # read, and by then the handler is in place.
    _os.write(fd, header.encode("utf-8", "replace"))


def _dtrun_report_start_failure(kind, value, tb):
    # What stops the program before its entry point runs (torch missing
    # from this interpreter, a script that does not compile) is out of
    # reach of torch's @record: write the error file @record would have
    # written, so dtrun's summary shows it. Never over one already there.
    try:
        path = _os.environ.get("TORCHELASTIC_ERROR_FILE", "")
        name = getattr(value, "name", None) or ""
        torch_missing = isinstance(value, ImportError) and (
            name == "torch" or name.startswith("torch."))
        if path and (torch_missing or isinstance(value, SyntaxError)):
            import json
            import time
            import traceback
            record = {"message": {
                "message": "%s: %s" % (kind.__name__, value),
                "extraInfo": {
                    "py_callstack": "".join(traceback.format_exception(kind, value, tb)),
                    "timestamp": str(int(time.time()))}}}
            fd = _os.open(path, _os.O_WRONLY | _os.O_CREAT | _os.O_EXCL | _os.O_CLOEXEC, 0o644)
            with _os.fdopen(fd, "w") as f:
                json.dump(record, f)
    except Exception:
        pass
    try:
        if _dtrun_exception_file:
            line = ("%s: %s" % (kind.__name__, value)).split("\n")[0][:512]
            fd = _os.open(_dtrun_exception_file,
                          _os.O_WRONLY | _os.O_CREAT | _os.O_TRUNC | _os.O_CLOEXEC, 0o644)
            with _os.fdopen(fd, "w") as f:
                f.write(line + "\n")
    except Exception:
        pass
    _dtrun_excepthook(kind, value, tb)


def _dtrun_restore_pythonpath(here):
    # The agent put our directory first on PYTHONPATH only to get here:
    # the program (and what it starts) sees the PYTHONPATH it was given,
    # as under torchrun.
    parts = _os.environ.get("PYTHONPATH", "").split(_os.pathsep)
    if parts and _os.path.abspath(parts[0] or ".") == here:
        rest = parts[1:]
        if rest:
            _os.environ["PYTHONPATH"] = _os.pathsep.join(rest)
        else:
            del _os.environ["PYTHONPATH"]


def _dtrun_chain():
    # Import the sitecustomize this one hides (Debian's in /usr/lib/python3,
    # a user's on PYTHONPATH): the next one on sys.path after our directory.
    here = _os.path.dirname(_os.path.abspath(__file__))
    try:
        _dtrun_restore_pythonpath(here)
    except Exception:
        pass
    me = _sys.modules.get("sitecustomize")
    _sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
    _sys.modules.pop("sitecustomize", None)
    try:
        import importlib
        importlib.import_module("sitecustomize")
    except ImportError as e:
        if getattr(e, "name", None) != "sitecustomize":
            print("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s"
                  % (type(e).__name__, e), file=_sys.stderr)
        if "sitecustomize" not in _sys.modules and me is not None:
            _sys.modules["sitecustomize"] = me
    except Exception as e:
        # What site.py itself does with a failing sitecustomize.
        print("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s"
              % (type(e).__name__, e), file=_sys.stderr)
        if "sitecustomize" not in _sys.modules and me is not None:
            _sys.modules["sitecustomize"] = me


def _dtrun_offer_module():
    # `import dtrun` (progress to the agent, agent/python/dtrun.py) from
    # the folder the agent wrote it to, last on sys.path: a dtrun the
    # program installed (the wheel's, the same file) comes first.
    # The page's path leaves os.environ, as the hook's own variables do, so
    # that the program and what it starts see torchrun's environment;
    # dtrun.py finds it on sys.
    page = _os.environ.pop("DTRUN_PROGRESS_PAGE", "")
    if page:
        _sys._dtrun_progress_page = page
        here = _os.path.dirname(_os.path.abspath(__file__))
        _sys.path.append(_os.path.join(here, "modules"))


class _DtrunAfterImport:
    # Own work per step (docs/stragglers.md): once torch's c10d module and
    # DDP's have run, dtrun's module times them. A finder first on
    # sys.meta_path that finds nothing itself: it asks the others and wraps
    # the loader's exec_module; it leaves sys.meta_path once both are done.
    def __init__(self):
        self._actions = {"torch.distributed.distributed_c10d": "instrument_collectives",
                         "torch.nn.parallel.distributed": "instrument_ddp"}

    def find_spec(self, name, path=None, target=None):
        action = self._actions.get(name)
        if action is None:
            return None
        for finder in _sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = getattr(spec, "loader", None)
        run = getattr(loader, "exec_module", None)
        if run is None:
            return None
        del self._actions[name]
        if not self._actions and self in _sys.meta_path:
            _sys.meta_path.remove(self)

        # A loader may serve other modules too (zipimport's, a bundler's):
        # only `name` is timed, and the loader is its own again after it.
        def exec_module(module):
            if getattr(module, "__name__", None) != name:
                return run(module)
            try:
                del loader.exec_module
            except AttributeError:
                pass
            run(module)
            try:
                import dtrun
                getattr(dtrun, action)(module)
            except Exception:
                pass
        loader.exec_module = exec_module
        return spec


def _dtrun_time_torch():
    # --worker-timing=off sets DTRUN_WORKER_TIMING=0 (taken out of
    # os.environ, as the page's path is). Modules already imported (a
    # --preload interpreter's) are timed now; the others when imported.
    timing = _os.environ.pop("DTRUN_WORKER_TIMING", "1") != "0"
    if not timing or not getattr(_sys, "_dtrun_progress_page", ""):
        return
    after = _DtrunAfterImport()
    for name, action in list(after._actions.items()):
        module = _sys.modules.get(name)
        if module is not None:
            del after._actions[name]
            import dtrun
            getattr(dtrun, action)(module)
    if after._actions:
        _sys.meta_path.insert(0, after)


def _dtrun_torch_version():
    # (major, minor) of the torch this interpreter would import, read from
    # torch/version.py on sys.path as the import would find it (torch
    # itself is not imported); None when there is none.
    for entry in _sys.path:
        if not isinstance(entry, str):
            continue  # as the import skips it
        try:
            with open(_os.path.join(entry or ".", "torch", "version.py")) as f:
                for line in f:
                    if line.startswith("__version__"):
                        text = line.split("=", 1)[1].strip().strip("'\"")
                        major, minor = text.split(".")[:2]
                        return int(major), int("".join(c for c in minor if c.isdigit()))
        except (OSError, ValueError, IndexError):
            continue
    return None


def _dtrun_flight_recorder_names():
    # dtrun turns on torch's NCCL flight recorder on GPU nodes under the
    # names every torch reads (worker_env.h); torch 2.8 and later read two
    # of them under new names and warn of the old ones on every rank, so
    # for such a torch the ones dtrun set (DTRUN_FLIGHT_RECORDER) move.
    names = _os.environ.pop("DTRUN_FLIGHT_RECORDER", "").split(",")
    if names == [""] or (_dtrun_torch_version() or (0, 0)) < (2, 8):
        return
    for old, new in (("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE"),
                     ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE")):
        if old in names and old in _os.environ:
            _os.environ[new] = _os.environ.pop(old)


try:
    _dtrun_flight_recorder_names()
except Exception:
    pass
try:
    _dtrun_register()
except Exception:
    pass
try:
    _dtrun_chain()
except Exception:
    pass
try:
    _dtrun_offer_module()
except Exception:
    pass
try:
    _dtrun_time_torch()
except Exception:
    pass
# After the chained sitecustomize, which may install its own (apport's).
_dtrun_excepthook = _sys.excepthook
_sys.excepthook = _dtrun_report_start_failure
)PY";

}  // namespace

const char* python_hook_source() { return hook_source; }

namespace {

// Writes `text` to `path` (mode 0644) beside and renamed: a worker starting
// meanwhile reads the old file or the new one, never half of one.
void write_whole_file(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    throw std::runtime_error("cannot write the Python hook " + printable(path) + ": " +
                             std::strerror(errno));
  }
  const char* p = text.data();
  std::size_t left = text.size();
  bool ok = true;
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  int saved = errno;
  ok = ::fchmod(fd, 0644) == 0 && ok;  // whatever the umask
  if (::close(fd) != 0) ok = false;
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    if (ok) saved = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot write the Python hook " + printable(path) + ": " +
                             std::strerror(saved));
  }
}

}  // namespace

void write_python_hook(const std::string& dir) {
  boost::system::error_code ec;
  boost::filesystem::create_directories(dir + "/modules", ec);
  if (ec) {
    throw std::runtime_error("cannot create the Python hook directory " + printable(dir) + ": " +
                             ec.message());
  }
  write_whole_file(dir + "/sitecustomize.py", std::string(hook_source) + python_preload_source());
  write_whole_file(dir + "/modules/dtrun.py", dtrun_module_source());
}

int stack_dump_signal() { return SIGRTMIN + 3; }

void add_python_hook_path(env_map& env, const std::string& hook_dir) {
  auto existing = env.find("PYTHONPATH");
  if (existing == env.end() || existing->second.empty()) {
    env["PYTHONPATH"] = hook_dir;
  } else {
    existing->second = hook_dir + ":" + existing->second;
  }
}

void add_python_hook_env(env_map& env, const std::string& hook_dir, const std::string& stack_file) {
  add_python_hook_path(env, hook_dir);
  env["DTRUN_STACK_FILE"] = stack_file;
  env["DTRUN_STACK_SIGNAL"] = std::to_string(stack_dump_signal());
  env["DTRUN_STACK_TRACER"] = std::to_string(::getpid());
}

}  // namespace dtrun::agent
