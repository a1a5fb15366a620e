#include "launcher/config/rendezvous_config.h"

#include <algorithm>
#include <cctype>
#include <string_view>

#include <fmt/format.h>

#include "rendezvous/base/endpoint.h"
#include "rendezvous/base/number_parse.h"
#include "rendezvous/base/printable.h"
#include "rendezvous/base/trim.h"
#include "rendezvous/store/store_server.h"

namespace dtrun::launcher {
namespace {

constexpr std::uint16_t c10d_default_port = 29400;

// Every rendezvous duration must be positive, as torchrun's
// RendezvousTimeout demands: dtrun also uses close_timeout as the limit of
// each store operation and keep_alive_interval as a timer period, where 0
// would fail every operation or spin.
constexpr duration_limits rdzv_duration_limits{false, max_duration_s};
constexpr std::int64_t max_keep_alive_attempts = 1'000'000;

std::chrono::milliseconds duration(const std::map<std::string, std::string>& conf,
                                   const std::string& key, std::chrono::milliseconds fallback) {
  auto it = conf.find(key);
  if (it == conf.end()) return fallback;
  return parse_duration_seconds(it->second, "--rdzv-conf " + key, rdzv_duration_limits);
}

}  // namespace

std::chrono::milliseconds rdzv_join_timeout(const std::map<std::string, std::string>& conf) {
  return duration(conf, "join_timeout", duration(conf, "timeout", std::chrono::seconds(600)));
}

namespace {

std::optional<bool> boolean(const std::map<std::string, std::string>& conf,
                            const std::string& key) {
  auto it = conf.find(key);
  if (it == conf.end()) return std::nullopt;
  std::string v = it->second;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "1" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "no") return false;
  throw usage_error(fmt::format("--rdzv-conf {}={} is not true or false", key, it->second));
}

const std::vector<std::string> known_keys = {
    "join_timeout", "last_call_timeout", "close_timeout",  "read_timeout",
    "keep_alive_interval", "keep_alive_max_attempt", "heartbeat_timeout", "is_host",
    "timeout", "store_type", "use_libuv", "exit_barrier_timeout", "worker_store",
    "store_threads", "cas_backoff_max_seconds",
    // etcd-v3 (torchrun's etcd backend takes the first five)
    "protocol", "cacert", "cert", "key", "etcd_prefix", "lease_ttl", "request_timeout"};

// --rdzv-backend=etcd-v3: the members and TLS settings. The round logic is
// the c10d backend's; only its store differs.
rendezvous::etcd_options etcd_settings(const launch_options& o,
                                       const std::map<std::string, std::string>& conf) {
  rendezvous::etcd_options e;
  if (o.rdzv_endpoint.value.empty()) {
    throw usage_error(
        "--rdzv-backend=etcd-v3 needs --rdzv-endpoint=HOST:PORT[,HOST:PORT...], the client "
        "addresses of the etcd cluster's members");
  }
  std::string error;
  auto members = rendezvous::parse_etcd_members(o.rdzv_endpoint.value, e.tls, error);
  if (!members) throw usage_error(fmt::format("--rdzv-endpoint: {}", error));
  e.members = std::move(*members);
  if (auto p = conf.find("protocol"); p != conf.end()) {
    if (p->second != "http" && p->second != "https") {
      throw usage_error(fmt::format("--rdzv-conf protocol={} is not http or https", p->second));
    }
    e.tls = p->second == "https";
  }
  auto file = [&](const char* key) {
    auto it = conf.find(key);
    return it == conf.end() ? std::string() : it->second;
  };
  e.cacert = file("cacert");
  e.cert = file("cert");
  e.key = file("key");
  if (!e.tls && (!e.cacert.empty() || !e.cert.empty())) {
    throw usage_error(
        "--rdzv-conf cacert/cert/key need TLS: add protocol=https or write the members as "
        "https://HOST:PORT");
  }
  if (e.cert.empty() != e.key.empty()) {
    throw usage_error("--rdzv-conf cert and key go together: give both or neither");
  }
  if (auto p = conf.find("etcd_prefix"); p != conf.end()) {
    e.key_prefix = p->second;
    if (e.key_prefix.empty() || e.key_prefix.back() != '/') e.key_prefix += '/';
  }
  e.request_timeout = duration(conf, "request_timeout", e.request_timeout);
  auto ttl = duration(conf, "lease_ttl", e.lease_ttl);
  if (ttl < std::chrono::seconds(2)) {
    // etcd refuses shorter leases (its minimum follows its election timeout).
    throw usage_error("--rdzv-conf lease_ttl must be at least 2 seconds");
  }
  e.lease_ttl = std::chrono::duration_cast<std::chrono::seconds>(ttl);
  return e;
}

}  // namespace

std::map<std::string, std::string> parse_rdzv_conf(const std::string& text) {
  std::map<std::string, std::string> conf;
  std::size_t start = 0;
  while (start < text.size()) {
    auto comma = std::min(text.find(',', start), text.size());
    std::string_view pair = trim(std::string_view(text).substr(start, comma - start));
    start = comma + 1;
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw usage_error(fmt::format("--rdzv-conf: '{}' is not key=value", pair));
    }
    std::string key(trim(pair.substr(0, eq)));
    if (std::find(known_keys.begin(), known_keys.end(), key) == known_keys.end()) {
      throw usage_error(fmt::format("--rdzv-conf: unknown key '{}' (known: {})", key,
                                    fmt::join(known_keys, ", ")));
    }
    conf[key] = std::string(trim(pair.substr(eq + 1)));
  }
  return conf;
}

namespace {

// The rendezvous' timings and settings from --rdzv-conf (and
// --exit-barrier-timeout, which wins over it).
void read_rdzv_settings(const std::map<std::string, std::string>& conf, const launch_options& o,
                        rendezvous::dynamic_rendezvous_options& r) {
  using std::chrono::seconds;
  r.join_timeout = rdzv_join_timeout(conf);
  r.last_call_timeout = duration(conf, "last_call_timeout", seconds(30));
  r.close_timeout = duration(conf, "close_timeout", seconds(30));
  r.keep_alive_interval = duration(conf, "keep_alive_interval", seconds(5));
  r.exit_barrier_timeout = duration(conf, "exit_barrier_timeout", seconds(300));
  if (o.exit_barrier_timeout > 0) {  // the flag wins over --rdzv-conf
    r.exit_barrier_timeout = seconds_to_duration(o.exit_barrier_timeout, "--exit-barrier-timeout",
                                                 rdzv_duration_limits);
  }
  // Accepted for torchrun compatibility (dtrun derives these), but checked.
  duration(conf, "read_timeout", seconds(60));
  duration(conf, "heartbeat_timeout", seconds(30));
  // torchrun 2.15: a random pause after a lost compare-and-set of its one
  // state key. dtrun's rounds write a key per node (docs/rendezvous.md), so
  // there is no such race to back off from; the value is checked as
  // torchrun checks it (finite, not negative).
  if (auto it = conf.find("cas_backoff_max_seconds"); it != conf.end()) {
    parse_duration_seconds(it->second, "--rdzv-conf cas_backoff_max_seconds",
                           {true, max_duration_s});
  }
  if (auto it = conf.find("keep_alive_max_attempt"); it != conf.end()) {
    r.keep_alive_max_attempt = static_cast<int>(parse_integer(
        it->second, "--rdzv-conf keep_alive_max_attempt", 1, max_keep_alive_attempts));
  }
  if (auto it = conf.find("store_threads"); it != conf.end()) {
    r.store_threads = static_cast<unsigned>(
        parse_integer(it->second, "--rdzv-conf store_threads", 0, rendezvous::max_store_threads));
  }
  // Say that nobody hosts the store well before giving up.
  r.no_host_warning = std::min<std::chrono::milliseconds>(std::chrono::seconds(5),
                                                           r.join_timeout / 2);

  if (auto ws = conf.find("worker_store"); ws != conf.end()) {
    if (ws->second != "agent" && ws->second != "rank0") {
      throw usage_error(fmt::format(
          "--rdzv-conf worker_store={} is not 'agent' (workers use the agents' store) or "
          "'rank0' (rank 0's worker hosts one, as torchrun 1.13)",
          ws->second));
    }
    r.workers_use_agent_store = ws->second == "agent";
  }
}

// c10d and static: the store on the endpoint (static: --master-addr and
// --master-port unless an endpoint is given), and who hosts it.
void meet_at_endpoint(const launch_options& o, const std::map<std::string, std::string>& conf,
                      multi_node_config& c) {
  const std::string& backend = c.backend;
  const int min_nodes = c.rendezvous.min_nodes;
  const int max_nodes = c.rendezvous.max_nodes;
  auto& r = c.rendezvous;
  std::string where;
  std::uint16_t default_port = c10d_default_port;
  if (backend == "static") {
    if (min_nodes != max_nodes) {
      throw usage_error(fmt::format(
          "--nnodes={}:{} needs --rdzv-backend=c10d; the static backend takes a fixed --nnodes=N",
          min_nodes, max_nodes));
    }
    if (o.node_rank.value < 0 || o.node_rank.value >= max_nodes) {
      throw usage_error(fmt::format("--node-rank={} is not in 0..{} (--nnodes={})",
                                    o.node_rank.value, max_nodes - 1, max_nodes));
    }
    if (o.master_port.value < 0 || o.master_port.value > max_port) {
      throw usage_error(fmt::format("--master-port: '{}' is not a whole number from 0 to {}",
                                    o.master_port.value, max_port));
    }
    r.fixed_rank = o.node_rank.value;
    // torchrun's static workers meet at --master-port in every round.
    r.fresh_worker_store = false;
    where = o.rdzv_endpoint.value.empty()
                ? fmt::format("{}:{}", o.master_addr.value, o.master_port.value)
                : o.rdzv_endpoint.value;
    default_port = static_cast<std::uint16_t>(o.master_port.value);
  } else {
    if (o.rdzv_endpoint.value.empty()) {
      throw usage_error(
          "--rdzv-backend=c10d needs --rdzv-endpoint=HOST[:PORT], the address of the node that "
          "hosts the rendezvous store (usually the first node)");
    }
    where = o.rdzv_endpoint.value;
  }
  auto ep = rendezvous::parse_endpoint(where, default_port);
  if (!ep) {
    throw usage_error(fmt::format("rendezvous endpoint '{}' is not HOST[:PORT] (IPv6 as [addr]:port)",
                                  where));
  }
  if (!rendezvous::could_resolve(ep->host)) {
    // Fails now, not after the join timeout: no DNS answer can ever come.
    throw usage_error(fmt::format(
        "rendezvous endpoint '{}': '{}' is neither an IP address nor a host name (labels of "
        "letters, digits, '-' and '_', 1-63 characters each, 253 in all); fix the address",
        printable(where), printable(ep->host)));
  }
  r.endpoint_host = ep->host;
  r.endpoint_port = ep->port;
  if (auto is_host = boolean(conf, "is_host")) {
    r.host_store = *is_host;
    c.host_decided_by = "--rdzv-conf is_host";
  } else if (backend == "static") {
    r.host_store = o.node_rank.value == 0;
    c.host_decided_by = "--node-rank=0 hosts the store";
  } else {
    r.host_store = rendezvous::is_this_machine(ep->host);
    r.join_if_store_port_in_use = r.host_store;
    c.host_decided_by = "the endpoint host is this machine";
    if (!r.host_store) c.host_decided_by = "the endpoint host is another machine";
  }
}

}  // namespace

std::optional<multi_node_config> resolve_multi_node(const launch_options& o, int min_nodes,
                                                    int max_nodes, int nproc_per_node) {
  const std::string backend = chosen_backend(o);
  if (backend != "c10d" && backend != "static" && backend != "etcd-v3") {
    throw usage_error(fmt::format("--rdzv-backend={} is not one of c10d, etcd-v3, static", backend));
  }
  // One node and nobody to meet: single-node (the caller's standalone path).
  if (max_nodes == 1 && o.rdzv_endpoint.value.empty()) return std::nullopt;

  auto conf = parse_rdzv_conf(o.rdzv_conf);
  multi_node_config c;
  c.backend = backend;
  auto& r = c.rendezvous;
  r.min_nodes = min_nodes;
  r.max_nodes = max_nodes;
  r.local_world_size = nproc_per_node;
  r.local_addr = o.local_addr;
  read_rdzv_settings(conf, o, r);
  if (backend != "static" && o.node_rank.value != 0) {
    if (o.node_rank.on_command_line()) {
      // As torchrun 2.13 (pytorch#182374). Only from the command line: a
      // PyTorchJob's PET_NODE_RANK beside c10d is the operator's, not a
      // mistake of the user's.
      c.warnings.push_back(fmt::format(
          "--node-rank={} has no effect with --rdzv-backend={}: the rendezvous assigns each "
          "node's rank (only the static backend takes --node-rank)",
          o.node_rank.value, o.rdzv_backend.given_or_derived() ? o.rdzv_backend.value : backend));
    }
  }
  if (backend == "etcd-v3") {
    c.etcd = etcd_settings(o, conf);
    // Every node opens a store for the workers; group rank 0's is used.
    r.worker_store_on_every_node = true;
    r.host_store = false;
    // A dead node's will runs when its lease expires.
    r.store_liveness = c.etcd->lease_ttl;
    c.host_decided_by = "etcd holds the rendezvous; group rank 0 hosts the workers' store";
    r.endpoint_host = c.etcd->members.front().host;
    r.endpoint_port = c.etcd->members.front().port;
    return c;
  }
  meet_at_endpoint(o, conf, c);
  return c;
}

namespace {

// What every backend's rendezvous has (nlohmann::json keeps its keys in
// order, so where they are added does not change the output).
void add_round_settings(nlohmann::json& j, const rendezvous::dynamic_rendezvous_options& r) {
  j["local_addr"] = r.local_addr;
  j["join_timeout_s"] = r.join_timeout.count() / 1000.0;
  j["last_call_timeout_s"] = r.last_call_timeout.count() / 1000.0;
  j["exit_barrier_timeout_s"] = r.exit_barrier_timeout.count() / 1000.0;
  j["keep_alive_interval_s"] = r.keep_alive_interval.count() / 1000.0;
  j["keep_alive_max_attempt"] = r.keep_alive_max_attempt;
  j["worker_store"] = r.workers_use_agent_store ? "agent" : "rank0";
  j["node_unit"] = r.node_unit;
}

}  // namespace

nlohmann::json to_json(const multi_node_config& c) {
  const auto& r = c.rendezvous;
  nlohmann::json j;
  if (c.etcd) {
    j = {
        {"backend", c.backend},
        {"endpoint", rendezvous::members_text(c.etcd->members)},
        {"protocol", c.etcd->tls ? "https" : "http"},
        {"etcd_prefix", c.etcd->key_prefix},
        {"lease_ttl_s", c.etcd->lease_ttl.count()},
        {"hosts_store", false},
        {"hosts_store_because", c.host_decided_by},
    };
  } else {
    j = {
        {"backend", c.backend},
        {"endpoint", rendezvous::to_string({r.endpoint_host, r.endpoint_port})},
        {"hosts_store", r.host_store},
        {"hosts_store_because", c.host_decided_by},
        {"node_rank", r.fixed_rank >= 0 ? nlohmann::json(r.fixed_rank) : nlohmann::json(nullptr)},
        {"store_threads", r.store_threads},
    };
  }
  add_round_settings(j, r);
  return j;
}

}  // namespace dtrun::launcher
