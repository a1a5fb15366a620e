// The agent's side of the warm interpreter's protocol (--preload,
// preload_runner.h), as plain data: whether a worker can be forked from
// the warm interpreter at all, the request that asks for it, the reply.
// The interpreter's side is python_preload.cpp.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "agent/process/worker_process.h"

namespace dtrun::agent {

// Variables that differ between the workers of a node or between rounds,
// and that Python programs and their libraries read only once running
// (torch at init_process_group, NCCL at its first communicator): torchrun's
// rank variables, CUDA_VISIBLE_DEVICES (--virtual-local-rank), the files
// dtrun names per rank (DTRUN_*), NCCL's flight recorder. A worker may
// differ from the warm interpreter in these only.
bool is_per_worker_variable(const std::string& name);

// Why `worker` cannot be forked from a warm interpreter started as `warm`
// (nullopt: it can): "the program", "the interpreter's flags or the
// script" (args before `script_args_at` differ) or "the variable NAME"
// (an environment variable other than the per-worker ones: libraries read
// them at import, and Python at start-up).
std::optional<std::string> preload_mismatch(const spawn_request& warm,
                                            const spawn_request& worker,
                                            std::size_t script_args_at);

// The request that forks `worker` (python_preload.cpp has the format):
// "spawn", the working folder, the CPUs, the script's own arguments
// (`worker.args` from `script_args_at`), the environment, NUL-separated.
std::string spawn_message(const spawn_request& worker, std::size_t script_args_at,
                          const std::string& cwd);

// The pid in a "pid <n>" reply; nullopt for anything else.
std::optional<pid_t> pid_reply(std::string_view reply);

}  // namespace dtrun::agent
