#include <string>

#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>

#include "agent/monitor/job_census.h"
#include "agent/monitor/job_monitor.h"
#include "agent/monitor/job_status.h"
#include "agent/devices/nvml_api.h"
#include "agent/spec/wall_clock.h"

using namespace dtrun::agent;

namespace {

quarantine_record census_record(const std::string& machine, int quarantines, double since,
                         double until) {
  quarantine_record r;
  r.machine = machine;
  r.host = "host-" + machine;
  r.quarantines = quarantines;
  r.since = since;
  r.until = until;
  return r;
}

bool census_has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("spares are the arrivals beyond a closed round's members", "[census]") {
  CHECK(spare_count(3, 2) == 1);
  CHECK(spare_count(2, 2) == 0);
  CHECK(spare_count(5, 0) == 0);  // still gathering, or stopped (closed = 0)
  CHECK(spare_count(1, 4) == 0);
}

TEST_CASE("a quarantine is current while its machine's latest record runs", "[census]") {
  double now = 1000;
  auto current = current_quarantines({census_record("a", 1, 100, 900),    // expired
                                      census_record("b", 1, 200, 2000),   // current
                                      census_record("a", 2, 950, 1500),   // a again: current
                                      census_record("c", 1, 100, 999.5)}, // expired
                                     now);
  REQUIRE(current.size() == 2);
  CHECK(current[0].machine == "b");
  CHECK(current[1].machine == "a");
  CHECK(current[1].quarantines == 2);
  // A machine whose latest record expired is out of quarantine, however
  // long an older one ran.
  CHECK(current_quarantines({census_record("a", 1, 0, 5000), census_record("a", 2, 10, 20)}, now)
            .empty());
}

TEST_CASE("dtrun_nodes counts the job's nodes by state; dtrun_node_state this node's phase",
          "[census]") {
  job_status s;
  s.run_id = "j";
  s.nnodes = 4;
  s.phase = "outside";
  auto text = to_prometheus(s);
  CHECK(census_has(text, "# TYPE dtrun_nodes gauge\n"));
  CHECK(census_has(text, R"(dtrun_nodes{run_id="j",node_rank="0",state="active"} 4)"));
  // Not read from the store yet: unknown, left out.
  CHECK(!census_has(text, R"(state="spare")"));
  CHECK(census_has(text, R"(dtrun_node_state{run_id="j",node_rank="0",state="outside"} 1)"));
  CHECK(census_has(text, R"(dtrun_node_state{run_id="j",node_rank="0",state="running"} 0)"));
  s.spare_nodes = 1;
  s.quarantined_nodes = 2;
  s.phase = "somewhere new";
  text = to_prometheus(s);
  CHECK(census_has(text, R"(dtrun_nodes{run_id="j",node_rank="0",state="spare"} 1)"));
  CHECK(census_has(text, R"(dtrun_nodes{run_id="j",node_rank="0",state="quarantined"} 2)"));
  CHECK(census_has(text, R"(dtrun_node_state{run_id="j",node_rank="0",state="somewhere new"} 1)"));
  CHECK(census_has(text, R"(dtrun_node_state{run_id="j",node_rank="0",state="outside"} 0)"));
}

TEST_CASE("the status document carries the spare and quarantined counts", "[census]") {
  job_status s;
  auto j = to_json(s);
  CHECK(j["spare_nodes"].is_null());
  s.spare_nodes = 3;
  s.quarantined_nodes = 1;
  std::string error;
  auto back = from_json(to_json(s), error);
  REQUIRE(back);
  CHECK(back->spare_nodes == 3);
  CHECK(back->quarantined_nodes == 1);
}

TEST_CASE("the monitor counts spares and current quarantines at each publication", "[census]") {
  boost::asio::io_context io;
  job_monitor::options opts;
  opts.control_socket = false;
  job_monitor::hooks hooks;
  int lists = 0;
  std::int64_t quarantines = 2;
  double now = wall_clock_seconds();
  hooks.publish = [](std::string) {};
  hooks.debug = [](const std::string&) {};  // gpu_stats says why NVML is absent
  nvml_session no_gpus(nvml::functions{});
  hooks.nvml = [&no_gpus]() -> nvml_session& { return no_gpus; };
  hooks.census = [&](auto done) { done({3, 2, quarantines}); };
  hooks.quarantine_list = [&](auto done) {
    ++lists;
    done({census_record("a", 1, now - 10, now + 600).to_json(),
          census_record("b", 1, now - 900, now - 300).to_json(), "not a record"});
  };
  job_monitor monitor(io, opts, hooks);
  CHECK(!monitor.snapshot().spare_nodes);  // not asked yet: unknown
  monitor.start_publishing();
  auto s = monitor.snapshot();
  CHECK(s.spare_nodes == 1);
  CHECK(s.quarantined_nodes == 1);
  CHECK(lists == 1);
  // The list is read again only when it grew.
  monitor.start_publishing();
  CHECK(lists == 1);
  quarantines = 3;
  monitor.start_publishing();
  CHECK(lists == 2);
}
