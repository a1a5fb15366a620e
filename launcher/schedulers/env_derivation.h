// Shared by the scheduler detectors (slurm_env, kubernetes_env): reading
// variables, and filling in a flag only when the user did not give it,
// recording where each value came from.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "launcher/cli/launch_options.h"
#include "launcher/schedulers/scheduler_env.h"
#include "rendezvous/base/env_map.h"

namespace dtrun::launcher::env_derivation {


struct variable {
  std::string name;
  std::string value;
};

// The first of `names` set to a non-empty value.
std::optional<variable> first_of(const env_map& env, std::initializer_list<const char*> names);
bool has(const env_map& env, const char* name);
// A whole non-negative number, or nothing.
std::optional<std::uint64_t> as_number(const std::string& text);
// A usage error ending with how to avoid the derivation.
usage_error off_hint(const std::string& what);
// The variable's value as a number; usage error otherwise.
int number_of(const variable& v);
// The first of `names` that is set; usage error naming the first otherwise.
variable required(const env_map& env, std::initializer_list<const char*> names,
                  const std::string& scheduler);

// Fills in the flags the user did not give: the typed override in
// `s.flags`, applied to `o`, the derivation's working copy of the flags
// (what it reads next), by apply_overrides; notes each in `derived`.
class deriver {
 public:
  deriver(launch_options& o, scheduler_env& s) : o_(o), s_(s) {}

  void nnodes(int n, const std::string& source);
  void node_rank(int rank, const std::string& source);
  void nproc(const std::string& n, const std::string& source);
  void backend(const std::string& b, const std::string& source);
  // False when the user gave an endpoint.
  bool endpoint(const std::string& e, const std::string& source);
  void run_id(const std::string& id, const std::string& source);
  void master_addr(const std::string& addr, const std::string& source);
  void master_port(int port, const std::string& source);
  // A worker variable dtrun sets instead of its own.
  void worker_var(const std::string& name, const std::string& value, const std::string& source);
  void note(const std::string& setting, const std::string& value, const std::string& source);

 private:
  void apply() { apply_overrides(o_, s_.flags); }

  launch_options& o_;
  scheduler_env& s_;
};

}  // namespace dtrun::launcher::env_derivation
