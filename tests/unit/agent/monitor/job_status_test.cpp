#include <string>

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "agent/monitor/job_status.h"

using namespace dtrun::agent;

namespace {

job_status sample_job() {
  job_status s;
  s.run_id = "job\"1\\\nx";
  s.round = 2;
  s.restarts_used = 1;
  s.max_restarts = 3;
  s.host = "node1";
  s.agent_pid = 4242;
  s.node_rank = 1;
  s.nnodes = 2;
  s.phase = "running";
  s.started_at = 1700000000.5;
  s.generated_at = 1700000100.25;
  s.hangs_detected = 1;
  s.failures = 2;
  s.rounds = 3;
  s.restarts_by_class = {{"exception", 2}, {"node", 1}};
  s.productive_seconds = 90.5;
  s.lost_seconds = 9.5;
  worker_status w;
  w.rank = 2;
  w.local_rank = 0;
  w.node_rank = 1;
  w.pid = 100;
  w.started_at = 1700000001;
  w.cpu_seconds = 12.5;
  w.cpu_percent = 99.5;
  w.rss_bytes = 1 << 20;
  w.seconds_since_output = 3.0;
  w.gpu_utilization_percent = 50;
  w.gpu_memory_bytes = 2048;
  w.last_output = "epoch 3 step 120/500";
  s.workers.push_back(w);
  w.rank = 3;
  w.local_rank = 1;
  w.pid = 101;
  w.state = "exited";
  w.exit_code = 1;
  w.cpu_percent.reset();
  w.seconds_since_output.reset();
  w.gpu_utilization_percent.reset();
  w.gpu_memory_bytes.reset();
  w.last_output.reset();
  s.workers.push_back(w);
  return s;
}

}  // namespace

TEST_CASE("job status round-trips through its JSON form") {
  auto original = sample_job();
  auto j = to_json(original);
  CHECK(j["schema"] == "dtrun.status/1");
  CHECK(j.begin().key() == "schema");  // the schema comes first, readable at a glance
  CHECK(j["workers"][1]["cpu_percent"].is_null());
  std::string error;
  auto back = parse_status(j.dump(), error);
  REQUIRE(back);
  CHECK(back->run_id == original.run_id);
  CHECK(back->round == 2);
  CHECK(back->restarts_used == 1);
  CHECK(back->max_restarts == 3);
  CHECK(back->node_rank == 1);
  CHECK(back->nnodes == 2);
  CHECK(back->started_at == original.started_at);
  CHECK(back->failures == 2);
  CHECK(back->restarts_by_class == original.restarts_by_class);
  CHECK(back->productive_seconds == std::optional<double>(90.5));
  CHECK(back->lost_seconds == std::optional<double>(9.5));
  REQUIRE(back->workers.size() == 2);
  CHECK(back->workers[0].cpu_percent == std::optional<double>(99.5));
  CHECK(back->workers[0].gpu_memory_bytes == std::optional<std::uint64_t>(2048));
  CHECK(back->workers[0].seconds_since_output == std::optional<double>(3.0));
  CHECK(!back->workers[1].cpu_percent);
  CHECK(back->workers[1].exit_code == std::optional<int>(1));
  CHECK(back->workers[1].state == "exited");
  CHECK(back->workers[0].last_output == std::optional<std::string>("epoch 3 step 120/500"));
  CHECK(j["workers"][1]["last_output"].is_null());
  CHECK(!back->workers[1].last_output);
  CHECK(to_json(*back) == j);
}

TEST_CASE("status from another process tolerates missing and ill-typed fields") {
  std::string error;
  auto s = parse_status(R"({"run_id": 5, "round": -1, "nnodes": 0, "workers": [
      {"rank": 1e300, "pid": -5, "cpu_percent": "x", "rss_bytes": 1.5, "state": "running"},
      7, {"rank": 3.0, "pid": 99999999999, "gpu_utilization_percent": 150}],
      "nodes": "no"})",
                        error);
  REQUIRE(s);
  CHECK(s->run_id.empty());
  CHECK(s->round == 0);
  CHECK(s->nnodes == 1);
  CHECK(s->nodes.empty());
  REQUIRE(s->workers.size() == 2);  // the non-object entry is skipped
  CHECK(s->workers[0].rank == 0);
  CHECK(s->workers[0].pid == 0);
  CHECK(!s->workers[0].cpu_percent);
  CHECK(s->workers[0].rss_bytes == 0);
  CHECK(s->workers[1].rank == 3);
  CHECK(s->workers[1].pid == 0);
  CHECK(!s->workers[1].gpu_utilization_percent);
}

TEST_CASE("status that is not an object or names another schema is refused with a reason") {
  std::string error;
  CHECK(!parse_status("[1,2]", error));
  CHECK(error == "the status is not a JSON object");
  CHECK(!parse_status("{", error));
  CHECK(error == "the status is not valid JSON");
  CHECK(!parse_status(R"({"schema": "dtrun.status/2"})", error));
  CHECK(error.find("dtrun.status/2") != std::string::npos);
  CHECK(parse_status("{}", error));
}

TEST_CASE("a schema nested deeper than the stack is refused, not a crash") {
  // A store holds values of megabytes: parsing nests without recursion,
  // but quoting the value back (dump) recursed once per level.
  constexpr std::size_t depth = 200'000;
  std::string text = R"({"schema": )" + std::string(depth, '[') + std::string(depth, ']') + "}";
  std::string error;
  CHECK(!parse_status(text, error));
  CHECK(error == "unknown status schema of type array (this dtrun reads dtrun.status/1)");
}

TEST_CASE("long strings from another process are cut") {
  std::string error;
  auto s = parse_status(nlohmann::json{{"host", std::string(10000, 'h')}}.dump(), error);
  REQUIRE(s);
  CHECK(s->host.size() == 256);
}

TEST_CASE("label values escape backslash, quote and newline") {
  CHECK(escape_label_value("a\\b\"c\nd") == "a\\\\b\\\"c\\nd");
}

TEST_CASE("prometheus text has HELP and TYPE for each family and escaped labels") {
  auto text = to_prometheus(sample_job());
  CHECK(text.find("# TYPE dtrun_restarts_used gauge\n") != std::string::npos);
  CHECK(text.find("# TYPE dtrun_worker_cpu_seconds_total counter\n") != std::string::npos);
  CHECK(text.find("# HELP dtrun_worker_rss_bytes ") != std::string::npos);
  CHECK(text.find(R"(dtrun_restarts_used{run_id="job\"1\\\nx",node_rank="1"} 1)") !=
        std::string::npos);
  CHECK(text.find(R"(dtrun_worker_cpu_seconds_total{run_id="job\"1\\\nx",node_rank="1",rank="2",local_rank="0",pid="100"} 12.5)") !=
        std::string::npos);
  CHECK(text.find(R"(dtrun_worker_gpu_utilization_ratio{run_id="job\"1\\\nx",node_rank="1",rank="2",local_rank="0",pid="100"} 0.5)") !=
        std::string::npos);
  CHECK(text.find(R"(dtrun_workers{run_id="job\"1\\\nx",node_rank="1",state="exited"} 1)") !=
        std::string::npos);
  CHECK(text.find(R"(dtrun_workers{run_id="job\"1\\\nx",node_rank="1",state="stopping"} 0)") !=
        std::string::npos);
  // The unknown optionals of rank 3 are left out.
  CHECK(text.find(R"(dtrun_worker_seconds_since_output{run_id="job\"1\\\nx",node_rank="1",rank="3")") ==
        std::string::npos);
  // Each family's TYPE line appears once.
  std::size_t at = 0, types = 0;
  while ((at = text.find("# TYPE dtrun_worker_rss_bytes ", at)) != std::string::npos) ++types, ++at;
  CHECK(types == 1);
  CHECK(text.back() == '\n');
}

TEST_CASE("a family with no known value is left out entirely") {
  job_status s;
  s.workers.push_back(worker_status{});
  auto text = to_prometheus(s);
  CHECK(text.find("dtrun_worker_gpu_memory_bytes") == std::string::npos);
  CHECK(text.find("dtrun_worker_rss_bytes") != std::string::npos);
}

TEST_CASE("merging nodes sums counters, lists every node and orders workers by rank") {
  auto a = sample_job();
  a.node_rank = 0;
  auto b = sample_job();
  b.host = "node2";
  b.workers[0].rank = 0;
  b.workers[1].rank = 1;
  auto merged = merge_nodes({a, std::nullopt, b});
  CHECK(merged.nnodes == 3);
  REQUIRE(merged.nodes.size() == 3);
  CHECK(merged.nodes[1].state == "unknown");
  CHECK(merged.nodes[2].host == "node2");
  CHECK(merged.nodes[2].last_heartbeat == std::optional<double>(a.generated_at));
  CHECK(merged.failures == 4);
  REQUIRE(merged.workers.size() == 4);
  CHECK(merged.workers[0].rank == 0);
  CHECK(merged.workers[0].node_rank == 2);
  CHECK(merged.workers[2].node_rank == 0);
}

TEST_CASE("nodes that have not published before the first one that has are still listed") {
  // Node 0 is the one usually asked about: slow to start, or gone.
  auto b = sample_job();
  b.host = "node2";
  auto merged = merge_nodes({std::nullopt, std::nullopt, b});
  CHECK(merged.nnodes == 3);
  REQUIRE(merged.nodes.size() == 3);
  CHECK(merged.nodes[0].node_rank == 0);
  CHECK(merged.nodes[0].state == "unknown");
  CHECK(merged.nodes[1].state == "unknown");
  CHECK(merged.nodes[2].node_rank == 2);
  CHECK(merged.nodes[2].host == "node2");
  CHECK(merged.workers.size() == b.workers.size());
}

TEST_CASE("last_output is optional: older documents have none, odd ones are cut or dropped") {
  std::string error;
  auto s = parse_status(R"({"workers": [{"rank": 0}, {"rank": 1, "last_output": 7},
      {"rank": 2, "last_output": ")" + std::string(1000, 'x') + R"("}]})",
                        error);
  REQUIRE(s);
  REQUIRE(s->workers.size() == 3);
  CHECK(!s->workers[0].last_output);
  CHECK(!s->workers[1].last_output);
  CHECK(s->workers[2].last_output == std::optional<std::string>(std::string(256, 'x')));
}

TEST_CASE("agents of one run on this machine merge into one view; other runs stay apart") {
  auto node0 = sample_job();
  node0.node_rank = 0;
  node0.agent_pid = 10;
  node0.workers[0].rank = 0;
  node0.workers[1].rank = 1;
  auto node1 = sample_job();  // node rank 1, ranks 2 and 3
  node1.agent_pid = 11;
  auto other = sample_job();
  other.run_id = "other";
  other.nnodes = 1;
  other.node_rank = 0;
  auto runs = merge_runs({node1, other, node0});
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].run_id == node0.run_id);  // runs in the order first seen
  REQUIRE(runs[0].nodes.size() == 2);
  CHECK(runs[0].nodes[0].agent_pid == 10);
  CHECK(runs[0].nodes[1].agent_pid == 11);
  REQUIRE(runs[0].workers.size() == 4);
  for (int rank = 0; rank < 4; ++rank) CHECK(runs[0].workers[static_cast<std::size_t>(rank)].rank == rank);
  CHECK(runs[0].workers[3].node_rank == 1);
  CHECK(runs[1].run_id == "other");
  CHECK(runs[1].nodes.empty());  // alone: as it came
}

TEST_CASE("agents of one run id that claim the same node rank are not merged") {
  auto a = sample_job();
  auto b = sample_job();
  b.agent_pid = 99;
  auto runs = merge_runs({a, b});
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].nodes.empty());
  CHECK(runs[1].agent_pid == 99);
}

TEST_CASE("restarts by class: only known classes are read, every class is exported") {
  auto j = nlohmann::json::parse(to_json(sample_job()).dump());
  j["restarts_by_class"]["evil\"label"] = 5;
  j["restarts_by_class"]["exit"] = -1;
  std::string error;
  auto back = from_json(j, error);
  REQUIRE(back);
  CHECK(back->restarts_by_class == std::map<std::string, std::uint64_t>{{"exception", 2},
                                                                        {"node", 1}});
  auto text = to_prometheus(*back);
  CHECK(text.find(R"(dtrun_restarts_total{run_id="job\"1\\\nx",node_rank="1",class="exception"} 2)") !=
        std::string::npos);
  CHECK(text.find(R"(class="oom-kill"} 0)") != std::string::npos);
  CHECK(text.find("evil") == std::string::npos);
  CHECK(text.find("dtrun_productive_seconds_total{") != std::string::npos);
  CHECK(text.find("dtrun_lost_seconds_total{") != std::string::npos);
}

TEST_CASE("a worker's step and section travel in the status and show in the metrics") {
  job_status s;
  s.run_id = "r";
  worker_status w;
  w.pid = 7;
  w.step = 1200;
  w.section = "checkpoint";
  w.section_seconds = 12.5;
  s.workers.push_back(w);
  s.workers.push_back(worker_status{});  // no page, no --progress-file: unknown
  std::string error;
  auto back = from_json(nlohmann::json::parse(to_json(s).dump()), error);
  REQUIRE(back);
  CHECK(back->workers[0].step == 1200);
  CHECK(back->workers[0].section == std::optional<std::string>("checkpoint"));
  CHECK(back->workers[0].section_seconds == 12.5);
  CHECK_FALSE(back->workers[1].step);
  CHECK_FALSE(back->workers[1].section);
  auto text = to_prometheus(s);
  CHECK_THAT(text, Catch::Contains("# TYPE dtrun_worker_step gauge\n"));
  CHECK_THAT(text, Catch::Contains(R"(local_rank="0",pid="7"} 1200)"));
  CHECK_THAT(text, Catch::Contains(R"(pid="7",section="checkpoint"} 12.5)"));
  CHECK(text.find(R"(pid="0",section)") == std::string::npos);
}

TEST_CASE("failing health checks travel in the status whole, and merge per node") {
  job_status s = sample_job();
  std::string reason = "storage check failed: /mnt/" + std::string(600, 'p') +
                       " did not answer a 4 KiB write, fsync and read within 1 min (probe pid 77)";
  s.health.push_back({1, "storage", reason, false, {}});
  s.health.push_back({1, "command", "node health check failed: `check.sh` exited with code 3",
                      true, {"ECC errors: 12", "see dmesg"}});
  auto j = to_json(s);
  CHECK(j["health"][0] == nlohmann::ordered_json{{"node_rank", 1},
                                                 {"check", "storage"},
                                                 {"reason", reason},
                                                 {"gating", false},
                                                 {"output_tail", nlohmann::json::array()}});
  std::string error;
  auto back = parse_status(j.dump(), error);
  REQUIRE(back);
  REQUIRE(back->health.size() == 2);
  CHECK(back->health[0].reason == reason);  // longer than other strings, kept whole
  CHECK(!back->health[0].gating);
  CHECK(back->health[1].check == "command");
  CHECK(back->health[1].gating);
  CHECK(back->health[1].output_tail == std::vector<std::string>{"ECC errors: 12", "see dmesg"});
  CHECK(to_json(*back) == j);

  // Older agents wrote none; odd entries are bounded or dropped.
  auto older = parse_status(R"({"run_id": "r"})", error);
  REQUIRE(older);
  CHECK(older->health.empty());
  nlohmann::json odd = {{"health", {7,
                                    {{"check", 3}, {"reason", std::string(5000, 'r')},
                                     {"gating", "yes"}, {"output_tail", std::vector<int>(40, 1)}},
                                    {{"check", "nic"}, {"output_tail", std::vector<std::string>(
                                                                         40, "line")}}}}};
  auto cut = parse_status(odd.dump(), error);
  REQUIRE(cut);
  REQUIRE(cut->health.size() == 2);  // the non-object entry is skipped
  CHECK(cut->health[0].check.empty());
  CHECK(cut->health[0].reason.size() == 1024);
  CHECK(cut->health[0].gating);  // the default: not read from a string
  CHECK(cut->health[0].output_tail.empty());
  CHECK(cut->health[1].output_tail.size() == 16);

  // Merged, each node's findings carry its rank, in node order.
  job_status other = sample_job();
  other.node_rank = 0;
  other.health = {{0, "nic", "network interface eth9 (the workers' socket interface) is down",
                   false, {}}};
  s.node_rank = 1;
  auto merged = merge_nodes({other, s, std::nullopt});
  REQUIRE(merged.health.size() == 3);
  CHECK(merged.health[0].node_rank == 0);
  CHECK(merged.health[0].check == "nic");
  CHECK(merged.health[1].node_rank == 1);
  CHECK(merged.health[2].node_rank == 1);
  CHECK(merged.health[2].check == "command");
}

TEST_CASE("the job's stragglers travel in the status and show in the metrics, one family each") {
  job_status s;
  s.run_id = "r";
  named_straggler slow;
  slow.finding = {2, {4, 5}, true, 0.24, 0.1, 21, 30};
  slow.host = "h\"3";
  slow.leaves = true;
  s.stragglers.push_back(slow);
  std::string error;
  auto document = nlohmann::json::parse(to_json(s).dump());
  document["stragglers"].push_back({{"host", "no figures"}});  // dropped, not a throw
  auto back = from_json(document, error);
  REQUIRE(back);
  REQUIRE(back->stragglers.size() == 1);
  CHECK(back->stragglers[0].host == "h\"3");
  CHECK(back->stragglers[0].finding.ranks == std::vector<int>{4, 5});
  CHECK(back->stragglers[0].finding.last_step == 30);
  CHECK(back->stragglers[0].leaves);
  auto text = to_prometheus(s);
  const std::string labels =
      R"(straggler_node_rank="2",straggler_host="h\"3",straggler_ranks="4,5"})";
  auto own = text.find("# TYPE dtrun_straggler_own_work_seconds gauge\n");
  auto own_sample = text.find("dtrun_straggler_own_work_seconds{");
  auto median = text.find("# TYPE dtrun_straggler_job_median_seconds gauge\n");
  auto median_sample = text.find("dtrun_straggler_job_median_seconds{");
  REQUIRE(own != std::string::npos);
  REQUIRE(median != std::string::npos);
  // Each family's samples follow its own HELP and TYPE.
  CHECK((own < own_sample && own_sample < median && median < median_sample));
  CHECK_THAT(text, Catch::Contains(labels + " 0.24\n") && Catch::Contains(labels + " 0.1\n"));
}
