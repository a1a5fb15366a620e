// The worker start-up hook that lets the agent ask a hung Python worker for
// its stacks without any change to the user's program: a sitecustomize.py,
// embedded in the binary (dtrun ships as one file), that the agent writes
// to a directory it puts first on the workers' PYTHONPATH.
//
// On import, in a worker whose environment has DTRUN_STACK_FILE, the hook
// opens that file for append, writes one header line
//   dtrun-stack-hook pid=<pid> main_thread=0x<ident> signal=<n> python=<x.y.z> main=<path>
// and registers faulthandler for signal <n> (all threads, no chaining), so
// that the agent's signal makes the worker append a dump of every thread's
// Python stack there. The agent signals a worker only when the file's last
// header names that worker's pid (see stack_capture): an unhandled
// real-time signal would kill it.
//
// It also wraps sys.excepthook: an uncaught ImportError of torch or a
// SyntaxError (the script never reached an @record entry point) is
// written, in @record's format, to TORCHELASTIC_ERROR_FILE unless a file
// is there, so the failure summary names it (and failure_hint.h says what
// to do) even when the worker's output went only to the console. Every
// uncaught exception's "Type: first line" goes to DTRUN_EXCEPTION_FILE
// (the worker's exception.txt), which the agent reads only to classify
// the failure (failure_class.h): an `exception`, its type for
// --no-restart-on, without @record and with the output on the console.
//
// The hook removes its variables from os.environ, so processes the worker
// starts (spawned DataLoader workers, subprocesses) do not register on the
// same file; children it forks inherit the handler, so a fork handler
// turns it off in them (the signal is then ignored there). It never breaks
// the program: every step is in try/except and silent; the next
// sitecustomize on sys.path (Debian's, a user's) is imported after it.
#pragma once

#include <string>

#include "rendezvous/base/env_map.h"

namespace dtrun::agent {

// The Python source of the hook (a sitecustomize.py).
const char* python_hook_source();

// The warm interpreter of --preload (preload_runner.h), appended to the
// hook's sitecustomize.py: in an interpreter started with DTRUN_PRELOAD it
// imports those modules and forks the workers; elsewhere it does nothing.
const char* python_preload_source();

// The `dtrun` module workers import (agent/python/dtrun.py, embedded at
// build time): dtrun.step(), dtrun.section(). The hook appends
// `dir`/modules to sys.path in a worker that has DTRUN_PROGRESS_PAGE.
const char* dtrun_module_source();

// Creates `dir` (and its parents, mode 0755) and writes
// `dir`/sitecustomize.py (mode 0644: the hook, then the warm interpreter)
// and `dir`/modules/dtrun.py, replacing those there. Throws
// std::runtime_error naming the path on failure.
void write_python_hook(const std::string& dir);

// The signal that asks a hooked worker for a dump: SIGRTMIN+3. A real-time
// signal because the user's program and its libraries own SIGUSR1/SIGUSR2
// (checkpoint-on-preemption scripts, Slurm's --signal), and real-time
// signals are not coalesced; +3 because libraries that use real-time
// signals take the first ones (LinuxThreads took SIGRTMIN..+2, some
// profilers and timer libraries take SIGRTMIN). Computed at run time
// (glibc's SIGRTMIN is 34, musl's 35), and passed to the worker as a number
// in DTRUN_STACK_SIGNAL so both sides agree whatever the worker's libc.
int stack_dump_signal();

// Lays the hook onto a worker's environment: `hook_dir` first on PYTHONPATH
// (an existing non-empty value follows after a ':'), DTRUN_STACK_FILE=
// `stack_file`, DTRUN_STACK_SIGNAL=stack_dump_signal(), and
// DTRUN_STACK_TRACER=<this process's pid> (the hook declares it with
// prctl(PR_SET_PTRACER) where Yama's ptrace_scope is 1, so the agent's
// eu-stack child may attach to its sibling). Call in the agent.
void add_python_hook_env(env_map& env, const std::string& hook_dir, const std::string& stack_file);

// Only `hook_dir` first on PYTHONPATH: the hook loads but registers for no
// stacks (the warm interpreter's environment).
void add_python_hook_path(env_map& env, const std::string& hook_dir);

}  // namespace dtrun::agent
