#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/monitor/job_status.h"
#include "launcher/status/status_command.h"
#include "launcher/status/status_store.h"
#include "launcher/status/status_table.h"
#include "rendezvous/store/memory_store.h"

using namespace dtrun;
using namespace dtrun::launcher;

namespace {

std::optional<int> parse(std::vector<const char*> args, status_options& o, std::string& out) {
  args.insert(args.begin(), "dtrun status");
  return parse_status_args(static_cast<int>(args.size()), args.data(), o, out);
}

agent::job_status one_node() {
  agent::job_status s;
  s.run_id = "job1";
  s.round = 1;
  s.restarts_used = 1;
  s.max_restarts = 3;
  s.host = "node1";
  s.agent_pid = 321;
  s.phase = "running";
  s.started_at = 1000;
  agent::worker_status w;
  w.rank = 0;
  w.pid = 400;
  w.started_at = 1000;
  w.cpu_percent = 97.4;
  w.rss_bytes = 3u << 20;
  s.workers.push_back(w);
  w.rank = 1;
  w.local_rank = 1;
  w.pid = 401;
  w.cpu_percent.reset();
  w.seconds_since_output = 75;
  w.gpu_utilization_percent = 88;
  w.gpu_memory_bytes = 2ull << 30;
  w.last_output = "step 7/10";
  s.workers.push_back(w);
  return s;
}

}  // namespace

TEST_CASE("status arguments: none, --json, --watch with and without seconds, --agent") {
  status_options o;
  std::string out;
  CHECK(!parse({}, o, out));
  CHECK(!o.json);
  CHECK(!o.watch);
  status_options j;
  CHECK(!parse({"--json", "--agent", "42"}, j, out));
  CHECK(j.json);
  CHECK(j.agent_pid == std::optional<int>(42));
  status_options w;
  CHECK(!parse({"--watch"}, w, out));
  CHECK(w.watch);
  CHECK(w.watch_seconds == 2);
  status_options w5;
  CHECK(!parse({"--watch", "5"}, w5, out));
  CHECK(w5.watch_seconds == 5);
}

TEST_CASE("status argument errors are usage errors (exit 2)") {
  std::string out;
  status_options a;
  CHECK(parse({"--bogus"}, a, out) == std::optional<int>(2));
  status_options b;
  CHECK(parse({"--watch", "0"}, b, out) == std::optional<int>(2));
  status_options c;
  CHECK(parse({"--rdzv-endpoint", "h:1"}, c, out) == std::optional<int>(2));
  CHECK(out.find("go together") != std::string::npos);
  status_options d;
  CHECK(parse({"--agent", "-3"}, d, out) == std::optional<int>(2));
  status_options h;
  CHECK(parse({"--help"}, h, out) == std::optional<int>(0));
  CHECK(out.find("--watch") != std::string::npos);
}

TEST_CASE("the status table shows the job line and one row per worker") {
  auto text = render_status(one_node(), 1000 + 3725);
  CHECK(text.find("run job1  round 1  restarts 1/3  phase running  nodes 1  agent pid 321 on node1  up 1h02m\n") == 0);
  INFO(text);
  CHECK(text.find("RANK  LOCAL  PID  STATE    UPTIME  CPU%  RSS      SINCE OUTPUT  GPU%  GPU MEM  "
                  "STEP  SECTION  LAST OUTPUT\n") != std::string::npos);
  CHECK(text.find("0     0      400  running  1h02m   97    3.0 MiB  -             -     -        "
                  "-     -        -\n") != std::string::npos);
  CHECK(text.find("1     1      401  running  1h02m   -     3.0 MiB  1m15s         88    2.0 GiB  "
                  "-     -        step 7/10\n") != std::string::npos);
  CHECK(text.find("NODE") == std::string::npos);  // one node: no nodes table
}

TEST_CASE("the status table of a merged job has a nodes table and a node column") {
  auto a = one_node();
  a.generated_at = 1990;
  auto merged = agent::merge_nodes({a, std::nullopt});
  auto text = render_status(merged, 2000);
  CHECK(text.find("NODE  HOST   AGENT PID  STATE    LAST SEEN\n") != std::string::npos);
  CHECK(text.find("0     node1  321        running  10s ago\n") != std::string::npos);
  CHECK(text.find("1     -      -          unknown  -\n") != std::string::npos);
  CHECK(text.find("RANK  LOCAL  NODE  PID") != std::string::npos);
}

TEST_CASE("the preflight's verdict travels in the status and is named in the table") {
  auto s = one_node();
  agent::preflight_verdict v;
  v.nodes = 3;
  v.measured = 3;
  v.median_bandwidth_bps = 400e6;
  v.seconds = 2.5;
  v.slow.push_back({2, "h3", "bandwidth", 1.2e6, 400e6, true});
  s.preflight = v;
  std::string error;
  auto back = agent::parse_status(agent::to_json(s).dump(), error);
  REQUIRE(back);
  REQUIRE(back->preflight);
  REQUIRE(back->preflight->named(2));
  CHECK(back->preflight->named(2)->leaves);
  auto text = render_status(*back, 1000);
  CHECK(text.find("preflight: 3 of 3 node(s) measured in 2.5 s, median bandwidth 400 MB/s; 1 "
                  "node(s) far below the median\n") != std::string::npos);
  CHECK(text.find("preflight: node 2 (host h3) is slow: bandwidth 1.2 MB/s against the job's "
                  "median 400 MB/s (under 1/3 of it); it left the job\n") != std::string::npos);
  CHECK_FALSE(agent::parse_status(agent::to_json(one_node()).dump(), error)->preflight);
}

TEST_CASE("failing health checks are named with their reasons under the job line") {
  auto s = one_node();
  s.health.push_back({0, "storage",
                      "storage check failed: /mnt/ckpt did not answer a 4 KiB write, fsync and "
                      "read within 1 min (probe pid 77); check with: mount | grep /mnt/ckpt and "
                      "dmesg | tail",
                      false, {}});
  s.health.push_back({0, "nic", "network interface eth1 (the workers' socket interface) is down "
                                "(operstate \"down\"); check with: ip -s link show eth1\x1b[2J",
                      true, {}});
  auto text = render_status(s, 1000);
  INFO(text);
  CHECK(text.find("\nhealth: storage (warning): storage check failed: /mnt/ckpt did not answer a "
                  "4 KiB write, fsync and read within 1 min (probe pid 77); check with: mount | "
                  "grep /mnt/ckpt and dmesg | tail\n") != std::string::npos);
  CHECK(text.find("\nhealth: nic (keeps the node out): network interface eth1 (the workers' "
                  "socket interface) is down (operstate \"down\"); check with: ip -s link show "
                  "eth1\\x1b[2J\n") != std::string::npos);
  // Before the workers' table; none at all when every check passed.
  CHECK(text.find("health: ") < text.find("RANK"));
  CHECK(render_status(one_node(), 1000).find("health") == std::string::npos);

  // Several nodes: each line names its node.
  auto other = one_node();
  other.health = {s.health[1]};
  auto merged = agent::merge_nodes({one_node(), other});
  CHECK(render_status(merged, 1000).find("\nhealth: node 1 nic (keeps the node out): network "
                                         "interface eth1") != std::string::npos);
}

TEST_CASE("text from other agents is made printable in the table") {
  auto s = one_node();
  s.run_id = "evil\x1b[2Jrun";
  auto text = render_status(s, 1000);
  CHECK(text.find('\x1b') == std::string::npos);
}

TEST_CASE("the last output column fits 40 characters and is made printable") {
  auto s = one_node();
  s.workers[0].last_output = "epoch 1 \x1b[2J " + std::string(50, 'x');
  s.workers[1].last_output = std::string(37, 'a') + "\xc3\xa9\xc3\xa9\xc3\xa9";  // 40 characters
  auto text = render_status(s, 1000);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find("  epoch 1 \\x1b[2J " + std::string(21, 'x') + "...\n") != std::string::npos);
  CHECK(text.find("  " + std::string(37, 'a') + "\xc3\xa9\xc3\xa9\xc3\xa9\n") != std::string::npos);
}

TEST_CASE("human sizes and durations") {
  CHECK(human_bytes(512) == "512 B");
  CHECK(human_bytes(1536) == "1.5 KiB");
  CHECK(human_bytes(5ull << 40) == "5.0 TiB");
  CHECK(human_duration(59.9) == "59s");
  CHECK(human_duration(61) == "1m01s");
  CHECK(human_duration(90000) == "1d01h");
  CHECK(human_duration(-1) == "-");
}

TEST_CASE("a multi-node job is read back from the store and merged") {
  rendezvous::memory_store store;
  std::string error;
  CHECK(!read_job_status(store, "job1", error));
  CHECK(error.find("no dtrun agent published") != std::string::npos);
  store.set(status_count_key("job1"), "3");
  auto n0 = one_node();
  auto n2 = one_node();
  n2.node_rank = 2;
  n2.host = "node3";
  n2.workers[0].rank = 4;
  n2.workers[1].rank = 5;
  store.set(status_node_key("job1", 0), agent::to_json(n0).dump());
  store.set(status_node_key("job1", 1), "{not json");
  store.set(status_node_key("job1", 2), agent::to_json(n2).dump());
  auto merged = read_job_status(store, "job1", error);
  REQUIRE(merged);
  REQUIRE(merged->nodes.size() == 3);
  CHECK(merged->nodes[1].state == "unknown");
  CHECK(merged->nodes[2].host == "node3");
  REQUIRE(merged->workers.size() == 4);
  CHECK(merged->workers[3].node_rank == 2);
  store.set(status_count_key("job1"), "0");
  CHECK(!read_job_status(store, "job1", error));
  CHECK(error.find("not a node count") != std::string::npos);
}
