// Reading what the worker hook (python_hook.h) writes: its header line and
// faulthandler's dumps of every thread's Python stack; and the hang
// summary that groups ranks by where they are stuck. Pure: no I/O, so
// tests feed it dumps captured from real Pythons (tests/fixtures/stacks/).
//
// faulthandler's format (the same in 3.8-3.13): one block per thread,
// newest thread first, so the main thread (the oldest) comes last:
//   Thread 0x00007f...c0 (most recent call first):      ("Current thread"
//     File "/path/x.py", line 42 in load_batch           for the one that
//     File "/path/x.py", line 60 in <module>              took the signal)
//   <blank line>
// innermost frame first; at most 100 frames a thread (3.11 then writes
// "  ...", 3.13 writes nothing more); "  <no Python frame>" for a thread
// without any; line "???" when unknown. Only the text is trusted to have
// that shape: anything else is skipped, never an error.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrun::agent {

// The hook's line: "dtrun-stack-hook pid=<n> main_thread=0x<hex>
// signal=<n> python=<x.y.z> main=<rest of the line>".
struct hook_header {
  pid_t pid = 0;
  std::string main_thread;  // "0x..." as faulthandler prints idents
  int signal = 0;
  std::string python;
  std::string main;  // absolute script path, "-m", "-c" or empty
};

// The header in `line` (no newline), or nullopt when it is not one.
std::optional<hook_header> parse_hook_header(std::string_view line);

// The last complete header line in a stack file's text (a worker that was
// restarted with the same file appends another), and the offset just past
// it, where that process's dumps start. nullopt: none yet.
struct located_header {
  hook_header header;
  std::size_t end = 0;
};
std::optional<located_header> find_last_header(std::string_view file_text);

struct stack_frame {
  std::string file;
  int line = 0;  // 0: faulthandler did not know ("???")
  std::string function;

  bool operator==(const stack_frame& o) const {
    return file == o.file && line == o.line && function == o.function;
  }
  bool operator!=(const stack_frame& o) const { return !(*this == o); }
};

struct python_thread {
  std::string ident;  // "0x..."
  bool current = false;  // the thread that ran the signal handler
  bool main = false;
  std::vector<stack_frame> frames;  // innermost first
  bool truncated = false;  // "  ..." (more than 100 frames)
  bool ended = false;  // a later line shows the block is over
};

struct python_dump {
  std::vector<python_thread> threads;
  // The main thread's block has been written through its outermost frame
  // (see parse_dump): the dump is finished, since the main thread is last.
  bool complete = false;

  // The main thread's block, or nullptr when there is none (yet).
  const python_thread* main_thread() const;
};

// Parses the dump text that follows a header (one dump: when a file holds
// several, pass the text after the offset the capture began at). A final
// line without its newline is not read (still being written). `complete`
// when the main thread's block (the thread whose ident is
// header.main_thread; without a match, the last block) ends in an
// outermost frame: runpy's _run_module_as_main, a "<module>" of the main
// script (header.main, same basename accepted: symlinks) or of
// "<string>"/"<stdin>", "<no Python frame>", the depth cut (100 frames or
// "  ..."), or when another block follows it.
python_dump parse_dump(std::string_view text, const hook_header& header);

// Whether `file` (as faulthandler prints co_filename) is the user's code:
// not "<frozen ...>" or any other "<...>" name except "<string>" and
// "<stdin>" (python -c, python -); no path component "site-packages",
// "dist-packages" or "torch"; not under a "lib/pythonX.Y" directory (the
// standard library of /usr, /usr/local, a venv's base, conda). Decided on
// the path alone, so it needs no knowledge of the worker's sys.prefix.
bool is_user_file(std::string_view file);

// The main thread's innermost frame, and its innermost frame that is the
// user's code; nullopt when there is none.
std::optional<stack_frame> innermost(const python_dump& dump);
std::optional<stack_frame> innermost_user(const python_dump& dump);

// One rank's part of the summary.
struct rank_stack {
  int rank = 0;
  bool has_python = false;  // a hooked worker's dump was read
  bool complete = true;  // the dump was finished (has_python only)
  std::optional<stack_frame> innermost;
  std::optional<stack_frame> innermost_user;
  // The main thread's innermost native frame (native_stack.h), or why
  // there is none ("eu-stack not installed ..."); empty: not known.
  std::string native;
};

// Where one rank is, as its summary line says it after "rank N: "
// ("load_batch (train.py:42)"); equal text means the same place.
std::string stuck_at(const rank_stack& rank);

// One line per group of ranks stuck at the same place (same innermost and
// innermost_user frames; ranks without a Python stack grouped by native
// frame), groups ordered by their lowest rank, each line ending in '\n':
//   rank 1: load_batch (train.py:42)
//   ranks 0,2-5: barrier (distributed_c10d.py:3456) called from train_step (train.py:60)
//   rank 6: no Python stack (not a Python worker, or its hook did not load); native: nanosleep
// "called from" only when the innermost frame is not the user's; file
// names are basenames; a group with an unfinished dump says
// "(dump incomplete)". Text from workers goes through printable().
std::string hang_summary(const std::vector<rank_stack>& ranks);

// "rank 3", "ranks 0,2,3", "ranks 0-7", "ranks 0-3,5" (sorted, distinct).
std::string format_ranks(std::vector<int> ranks);

}  // namespace dtrun::agent
