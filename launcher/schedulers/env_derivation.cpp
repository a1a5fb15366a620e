#include "launcher/schedulers/env_derivation.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "rendezvous/base/env_map.h"
#include "rendezvous/base/parse_whole.h"

namespace dtrun::launcher::env_derivation {

std::optional<variable> first_of(const env_map& env, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    auto it = env.find(name);
    if (it != env.end() && !it->second.empty()) return variable{name, it->second};
  }
  return std::nullopt;
}

bool has(const env_map& env, const char* name) { return first_of(env, {name}).has_value(); }

std::optional<std::uint64_t> as_number(const std::string& text) {
  if (text.size() > 12) return std::nullopt;
  return parse_whole<std::uint64_t>(text);
}

usage_error off_hint(const std::string& what) {
  return usage_error(fmt::format("{} (give the flags yourself, or --no-scheduler-detect)", what));
}

int number_of(const variable& v) {
  auto n = as_number(v.value);
  if (!n || *n > 10'000'000) throw off_hint(fmt::format("{}={} is not a number", v.name, v.value));
  return static_cast<int>(*n);
}

variable required(const env_map& env, std::initializer_list<const char*> names,
                  const std::string& scheduler) {
  if (auto v = first_of(env, names)) return *v;
  throw off_hint(fmt::format("inside a {} but {} is not set", scheduler, *names.begin()));
}

void deriver::nnodes(int n, const std::string& source) {
  if (o_.nnodes.given()) return;
  s_.flags.nnodes = n;
  apply();
  note("nnodes", std::to_string(n), source);
}
void deriver::node_rank(int rank, const std::string& source) {
  if (o_.node_rank.given()) return;
  s_.flags.node_rank = rank;
  apply();
  note("node-rank", std::to_string(rank), source);
}
void deriver::nproc(const std::string& n, const std::string& source) {
  if (o_.nproc_per_node.given()) return;
  s_.flags.nproc_per_node = nproc_flag(n);
  apply();
  note("nproc-per-node", n, source);
}
void deriver::backend(const std::string& b, const std::string& source) {
  if (o_.rdzv_backend.given() || o_.rdzv_endpoint.given()) return;
  s_.flags.rdzv_backend = b;
  apply();
  note("rdzv-backend", b, source);
}
bool deriver::endpoint(const std::string& e, const std::string& source) {
  if (o_.rdzv_endpoint.given()) return false;
  s_.flags.rdzv_endpoint = e;
  apply();
  note("rdzv-endpoint", e, source);
  return true;
}
void deriver::run_id(const std::string& id, const std::string& source) {
  if (o_.rdzv_id.given()) return;
  s_.flags.rdzv_id = id;
  apply();
  note("rdzv-id", id, source);
}
void deriver::master_addr(const std::string& addr, const std::string& source) {
  if (o_.master_addr.given()) return;
  s_.flags.master_addr = addr;
  apply();
  note("master-addr", addr, source);
}
void deriver::master_port(int port, const std::string& source) {
  if (o_.master_port.given()) return;
  if (port <= 0 || port > 65535) throw off_hint(fmt::format("{}={} is not a port", source, port));
  s_.flags.master_port = port;
  apply();
  note("master-port", std::to_string(port), source);
}
void deriver::worker_var(const std::string& name, const std::string& value, const std::string& source) {
  s_.worker_env[name] = value;
  note(name, value, source);
}
void deriver::note(const std::string& setting, const std::string& value, const std::string& source) {
  s_.derived.push_back({setting, value, source});
}

}  // namespace dtrun::launcher::env_derivation
