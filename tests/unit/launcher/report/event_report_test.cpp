// dtrun report's model, text, JSON and SVG, from synthetic event logs
// written the way the agent writes them (docs/agent.md, "Event log").
#include <sstream>
#include <string>
#include <vector>

#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/report/event_report.h"
#include "launcher/report/report_svg.h"
#include "launcher/report/report_text.h"

using namespace dtrun::launcher;
using Catch::Matchers::Contains;

namespace {

using ojson = nlohmann::ordered_json;

// 2026-11-22T20:00:00Z, the base of every synthetic time.
constexpr double base = 1795377600;

std::string at(double s) {
  auto ms = static_cast<long>(s * 1000 + 0.5);
  return fmt::format("2026-11-22T20:{:02}:{:02}.{:03}Z", ms / 60000, ms / 1000 % 60, ms % 1000);
}

// One line of host's agent (pid) at base + s.
std::string line(double s, const std::string& event, const std::string& host, long pid,
                 ojson fields = ojson::object()) {
  ojson j{{"time", at(s)}, {"event", event}, {"host", host}, {"agent_pid", pid}};
  for (auto& [k, v] : fields.items()) j[k] = v;
  return j.dump() + "\n";
}

struct node_log {
  std::string host;
  long pid;
  int first_rank;
  int nproc;
  std::string text;
  void add(double s, const std::string& event, ojson fields = ojson::object()) {
    text += line(s, event, host, pid, std::move(fields));
  }
  void started(double s, const std::string& run = "job1") {
    add(s, "agent_started", {{"run_id", run}, {"nproc_per_node", nproc}});
  }
  void round(double s, int round, int world) {
    add(s, "rendezvous_completed", {{"round", round},
                                    {"ranks", {first_rank, first_rank + nproc - 1}},
                                    {"world_size", world}});
    for (int l = 0; l < nproc; ++l) {
      add(s + 0.1 * (l + 1), "worker_started",
          {{"round", round}, {"local_rank", l}, {"rank", first_rank + l}, {"pid", 1000 + l}});
    }
  }
  void exits_ok(double s, int round) {
    for (int l = 0; l < nproc; ++l) {
      add(s, "worker_exited", {{"round", round}, {"rank", first_rank + l}, {"exit_code", 0},
                               {"signal", nullptr}, {"stopped_by_dtrun", false}});
    }
  }
  void failed(double s, int round, int rank, ojson message = nullptr, ojson signal = nullptr) {
    add(s, "worker_failed", {{"round", round}, {"host", host}, {"rank", rank}, {"exit_code", 1},
                             {"signal", signal}, {"exit_time", at(s)}, {"message", message}});
  }
};

double total_lost(const job_report& r) {
  double sum = 0;
  for (const auto& [cause, s] : r.lost_s) sum += s;
  return sum;
}

// One node, 2 workers: round 0 fails at 5 s, round 1 succeeds.
node_log one_node_restart() {
  node_log n{"vm", 41, 0, 2, ""};
  n.started(0);
  n.round(1, 0, 2);  // all running at 1.2
  n.failed(5, 0, 1);
  n.add(5, "group_stopping", {{"round", 0}, {"reason", "worker rank 1 exited with code 1"}});
  n.add(5.1, "restart", {{"count", 1}, {"max", 2}, {"after_round", 0}});
  n.round(6, 1, 2);  // all running at 6.2
  n.exits_ok(10, 1);
  n.add(10, "job_succeeded", {{"round", 1}});
  n.add(10.5, "agent_exiting", {{"exit_code", 0}});
  return n;
}

// Two nodes (2 workers each) in one job: rank 3 on h2 raises in round 0,
// h1 hears of it through the rendezvous; round 1 succeeds.
std::pair<node_log, node_log> two_nodes() {
  node_log a{"h1", 10, 0, 2, ""}, b{"h2", 20, 2, 2, ""};
  a.started(0);
  b.started(0.5);
  a.round(1, 0, 4);  // 1.2
  b.round(1.1, 0, 4);  // 1.3: all running
  b.failed(4, 0, 3, "RuntimeError: boom\nTraceback ...");
  b.add(4, "group_stopping", {{"round", 0}, {"reason", "worker rank 3 exited with code 1"}});
  a.add(4.2, "membership_change", {{"round", 0}, {"reason", "node 1: worker rank 3 exited"}});
  b.add(4.3, "restart", {{"count", 1}, {"max", 3}, {"after_round", 0}});
  a.round(5, 1, 4);    // 5.2
  b.round(5.5, 1, 4);  // 5.7: all running
  a.exits_ok(9, 1);
  b.exits_ok(9.5, 1);
  a.add(9.6, "job_succeeded", {{"round", 1}});
  b.add(9.6, "job_succeeded", {{"round", 1}});
  a.add(9.8, "agent_exiting", {{"exit_code", 0}});
  b.add(10, "agent_exiting", {{"exit_code", 0}});
  return {a, b};
}

}  // namespace

TEST_CASE("report: ISO 8601 times as the agent writes them, and offsets") {
  CHECK(parse_iso8601("2026-11-22T20:00:00Z") == Approx(base));
  CHECK(parse_iso8601("2026-11-22T20:00:01.250Z") == Approx(base + 1.25));
  CHECK(parse_iso8601("2026-11-22T21:00:00+01:00") == Approx(base));
  CHECK(parse_iso8601("2026-11-22T19:30:00-00:30") == Approx(base));
  CHECK_FALSE(parse_iso8601("2026-11-22 20:00:00Z"));
  CHECK_FALSE(parse_iso8601("2026-13-22T20:00:00Z"));
  CHECK_FALSE(parse_iso8601("2026-11-22T20:00:00"));
  CHECK_FALSE(parse_iso8601("2026-11-22T20:00:00.Z"));
  CHECK_FALSE(parse_iso8601("yesterday"));
}

TEST_CASE("report: one node, one failure, a restart and success") {
  auto r = build_report({{"ev.jsonl", one_node_restart().text}});
  CHECK(r.run_id == "job1");
  REQUIRE(r.nodes.size() == 1);
  CHECK(r.nodes[0].label == "vm");
  REQUIRE(r.rounds.size() == 2);
  CHECK(*r.rounds[0].running_at == Approx(base + 1.2));
  CHECK(r.rounds[0].ended_at == Approx(base + 5));
  CHECK(r.rounds[0].ended_by == "incident");
  CHECK(r.rounds[1].ended_by == "succeeded");
  CHECK(r.rounds[1].world_size == 2);
  REQUIRE(r.incidents.size() == 1);
  const auto& i = r.incidents[0];
  CHECK(i.incident_class == "exit");  // no error file: a plain exit code
  CHECK(i.rank == 1);
  CHECK(i.culprit_host == "vm");
  CHECK(i.detail == "rank 1 exited with code 1");
  CHECK(*i.detect_s == Approx(0));
  CHECK(*i.recover_s == Approx(1.2));  // until round 1 ran, at 6.2
  CHECK(i.restart == 1);
  CHECK_FALSE(i.logged);
  CHECK(r.restarts == 1);
  CHECK(r.outcome.state == "succeeded");
  CHECK(r.outcome.exit_code == 0);
  CHECK(r.total_s == Approx(10.5));
  CHECK(r.productive_s == Approx(3.8 + 3.8));
  CHECK(r.goodput == Approx(7.6 / 10.5));
  CHECK(total_lost(r) + r.productive_s == Approx(r.total_s));
  REQUIRE(r.lost_s.size() == 3);
  CHECK(r.lost_s[0].first == "start-up");
  CHECK(r.lost_s[0].second == Approx(1.2));
  CHECK(r.lost_s[1].first == "exit");
  CHECK(r.lost_s[1].second == Approx(1.2));
  CHECK(r.lost_s[2].first == "shutdown");
  CHECK(r.lost_s[2].second == Approx(0.5));

  auto text = render_report(r);
  CHECK_THAT(text, Contains("goodput 72.4%"));
  CHECK_THAT(text, Contains("2 rounds, 1 incident, 1 restart"));
  CHECK_THAT(text, Contains("rank 1 on vm"));
  CHECK_THAT(text, Contains("succeeded (exit code 0)"));
  auto j = report_json(r);
  CHECK(j["schema"] == "dtrun.report/1");
  CHECK(j["incidents"][0]["recover_s"] == 1.2);
  CHECK(j["incidents"][0]["source"] == "derived");
  CHECK(j["rounds"].size() == 2);
  CHECK(report_warnings(r).empty());
}

TEST_CASE("report: two nodes in one file, the culprit on the other node") {
  auto [a, b] = two_nodes();
  auto r = build_report({{"shared.jsonl", a.text + b.text}});
  REQUIRE(r.nodes.size() == 2);
  REQUIRE(r.rounds.size() == 2);
  CHECK(r.rounds[0].nodes == 2);
  CHECK(r.rounds[0].world_size == 4);
  CHECK(*r.rounds[0].running_at == Approx(base + 1.3));  // the later node
  CHECK(*r.rounds[1].running_at == Approx(base + 5.7));
  REQUIRE(r.incidents.size() == 1);
  const auto& i = r.incidents[0];
  CHECK(i.incident_class == "exception");
  CHECK(i.rank == 3);
  CHECK(i.culprit_host == "h2");
  CHECK(i.detail == "rank 3: RuntimeError: boom");
  CHECK(*i.recover_s == Approx(1.7));
  CHECK(r.restarts == 1);
  CHECK(r.total_s == Approx(10));
  CHECK(r.rounds[1].ended_at == Approx(base + 9.5));  // the last worker's exit
  CHECK(r.productive_s == Approx(2.7 + 3.8));
  CHECK(total_lost(r) + r.productive_s == Approx(r.total_s));
}

TEST_CASE("report: one file per node reads as one shared file") {
  auto [a, b] = two_nodes();
  auto shared = report_json(build_report({{"shared.jsonl", a.text + b.text}}));
  auto split = report_json(build_report({{"h1.jsonl", a.text}, {"h2.jsonl", b.text}}));
  shared.erase("files");
  split.erase("files");
  CHECK(shared == split);
}

TEST_CASE("report: a job that fails for good: the last incident ends it") {
  node_log n = {"vm", 41, 0, 2, ""};
  n.started(0);
  n.round(1, 0, 2);
  n.failed(3, 0, 0, nullptr, "SIGSEGV");
  n.add(3.1, "restart", {{"count", 1}, {"max", 1}, {"after_round", 0}});
  n.round(4, 1, 2);
  n.failed(6, 1, 0, nullptr, "SIGSEGV");
  n.add(6.5, "job_failed", {{"round", 1}, {"reason", "max restarts reached"}});
  n.add(7, "agent_exiting", {{"exit_code", 139}});
  auto r = build_report({{"ev.jsonl", n.text}});
  CHECK(r.outcome.state == "failed");
  CHECK(r.outcome.exit_code == 139);
  CHECK(r.outcome.reason == "in round 1: max restarts reached");
  REQUIRE(r.incidents.size() == 2);
  CHECK(r.incidents[0].incident_class == "signal");
  CHECK(r.incidents[0].detail == "rank 0 was killed by SIGSEGV");
  CHECK(*r.incidents[0].recover_s == Approx(1.2));
  CHECK_FALSE(r.incidents[1].resumed_at);
  CHECK_FALSE(r.incidents[1].recover_s);
  CHECK(r.total_s == Approx(7));
  CHECK(r.productive_s == Approx(1.8 + 1.8));
  // After the last failure the job only ended: lost to that signal.
  CHECK(r.lost_s.back().first == "signal");
  CHECK(r.lost_s.back().second == Approx(1.2 + 1.0));
  CHECK_THAT(render_report(r), Contains("job ended"));
  CHECK_THAT(render_report(r), Contains("failed (exit code 139): in round 1"));
}

TEST_CASE("report: two incidents, a failure and a hang") {
  node_log n = {"vm", 41, 0, 2, ""};
  n.started(0);
  n.round(1, 0, 2);  // 1.2
  n.failed(3, 0, 1);
  n.add(3.1, "restart", {{"count", 1}, {"max", 3}, {"after_round", 0}});
  n.round(4, 1, 2);  // 4.2
  n.add(20, "hang_detected", {{"round", 1}, {"idle_s", 10.5}, {"hang_timeout_s", 10}});
  n.failed(20.1, 1, 0, nullptr, "SIGKILL");
  n.add(20.2, "restart", {{"count", 2}, {"max", 3}, {"after_round", 1}});
  n.round(21, 2, 2);  // 21.2
  n.exits_ok(25, 2);
  n.add(25, "job_succeeded", {{"round", 2}});
  n.add(25, "agent_exiting", {{"exit_code", 0}});
  auto r = build_report({{"ev.jsonl", n.text}});
  REQUIRE(r.incidents.size() == 2);
  CHECK(r.incidents[0].incident_class == "exit");
  const auto& hang = r.incidents[1];
  CHECK(hang.incident_class == "hang");
  CHECK(hang.failed_at == Approx(base + 9.5));  // the last progress
  CHECK(*hang.detect_s == Approx(10.5));
  CHECK(*hang.recover_s == Approx(21.2 - 9.5));
  CHECK(hang.rank == 0);
  CHECK(hang.restart == 2);
  CHECK(r.restarts == 2);
  CHECK(r.rounds.size() == 3);
  CHECK(r.productive_s == Approx(1.8 + 5.3 + 3.8));
  CHECK(total_lost(r) + r.productive_s == Approx(r.total_s));
}

TEST_CASE("report: incident events, when the agents wrote them, are taken as they are") {
  auto [a, b] = two_nodes();
  ojson common{{"round", 0}, {"class", "oom-kill"}, {"rank", 3}, {"culprit_host", "h2"},
               {"detail", "rank 3 was killed by the kernel's OOM killer"},
               {"failed_at", at(3.9)}, {"steps_lost", 40}, {"restart", 1}};
  ojson on_a = common, on_b = common;
  on_a.update({{"detected_at", at(4.2)}, {"resumed_at", at(5.2)}, {"detect_s", 0.3},
               {"recover_s", 1.3}});
  on_b.update({{"detected_at", at(4.0)}, {"resumed_at", at(5.7)}, {"detect_s", 0.1},
               {"recover_s", 1.8}});
  a.add(5.2, "incident", on_a);
  b.add(5.7, "incident", on_b);
  auto r = build_report({{"h1", a.text}, {"h2", b.text}});
  REQUIRE(r.incidents.size() == 1);
  const auto& i = r.incidents[0];
  CHECK(i.logged);
  CHECK(i.incident_class == "oom-kill");
  CHECK(i.rank == 3);
  CHECK(i.culprit_host == "h2");
  CHECK(i.failed_at == Approx(base + 3.9));
  CHECK(*i.detected_at == Approx(base + 4.0));  // the first node to notice
  CHECK(*i.detect_s == Approx(0.1));
  CHECK(*i.resumed_at == Approx(base + 5.7));  // the last node to run again
  CHECK(*i.recover_s == Approx(1.8));
  CHECK(i.steps_lost == 40);
  CHECK(r.rounds[0].ended_at == Approx(base + 3.9));
  CHECK(report_json(r)["incidents"][0]["source"] == "incident events");
  CHECK_THAT(render_report(r), Contains("oom-kill"));
}

TEST_CASE("report: incident events as the agent writes them: only the culprit's node knows "
          "when it failed") {
  auto [a, b] = two_nodes();
  ojson common{{"round", 0}, {"class", "exception"}, {"exception_type", "RuntimeError"},
               {"rank", 3}, {"detail", "worker rank 3 exited with code 1"}, {"step", 120},
               {"steps_lost", nullptr}, {"restart", 1}};
  ojson on_a = common, on_b = common;  // h1 learnt of it through the store at 4.2
  on_a.update({{"failed_at", at(4.2)}, {"detected_at", at(4.2)}, {"resumed_at", at(5.2)},
               {"detect_s", nullptr}, {"recover_s", 1.0}});
  on_b.update({{"failed_at", at(4.0)}, {"detected_at", at(4.001)}, {"resumed_at", at(5.7)},
               {"detect_s", 0.001}, {"recover_s", 1.7}});
  a.add(5.2, "incident", on_a);
  b.add(5.7, "incident", on_b);
  auto r = build_report({{"h1", a.text}, {"h2", b.text}});
  REQUIRE(r.incidents.size() == 1);
  const auto& i = r.incidents[0];
  CHECK(i.incident_class == "exception");
  CHECK(i.exception_type == "RuntimeError");
  CHECK(i.culprit_host == "h2");
  CHECK(i.culprit_node == "h2");
  CHECK(i.rank == 3);
  CHECK(i.step == 120);
  CHECK(i.failed_at == Approx(base + 4.0));
  CHECK(*i.detect_s == Approx(0.001));
  CHECK(*i.recover_s == Approx(1.7));  // 4.0 until h2 ran again at 5.7
  auto j = report_json(r)["incidents"][0];
  CHECK(j["exception_type"] == "RuntimeError");
  CHECK(j["step"] == 120);

  // A node lost: no node knows when; nothing is made up.
  node_log n = {"h1", 10, 0, 1, ""};
  n.started(0);
  n.round(1, 0, 2);
  n.round(5, 1, 1);
  n.add(5.1, "incident", {{"round", 0}, {"class", "node"}, {"rank", nullptr},
                          {"detail", "node 1 stopped sending heartbeats"},
                          {"failed_at", at(4)}, {"detected_at", at(4)}, {"resumed_at", at(5.1)},
                          {"detect_s", nullptr}, {"recover_s", 1.1}});
  auto lost = build_report({{"h1", n.text}});
  REQUIRE(lost.incidents.size() == 1);
  CHECK_FALSE(lost.incidents[0].detect_s);
  CHECK_FALSE(lost.incidents[0].culprit_host);
  CHECK(*lost.incidents[0].recover_s == Approx(1.1));
}

TEST_CASE("report: without incident events, a newer agent's class tag in a reason is read") {
  node_log n = {"h1", 10, 0, 1, ""};
  n.started(0);
  n.round(1, 0, 2);
  n.add(4, "membership_change",
        {{"round", 0},
         {"reason", "node 1: worker rank 1 exited with code 1 [exception:KeyError]"}});
  n.round(5, 1, 2);
  auto r = build_report({{"h1", n.text}});
  REQUIRE(r.incidents.size() == 1);
  CHECK(r.incidents[0].incident_class == "exception");
}

TEST_CASE("report: a job that ended with an incident event's null resumed_at") {
  node_log n = {"vm", 41, 0, 1, ""};
  n.started(0);
  n.round(1, 0, 1);
  n.add(3, "incident", {{"round", 0}, {"class", "preemption"}, {"rank", nullptr},
                        {"culprit_host", nullptr}, {"detail", "received SIGTERM"},
                        {"failed_at", at(2.5)}, {"detected_at", at(2.5)}, {"resumed_at", nullptr},
                        {"detect_s", 0}, {"recover_s", nullptr}, {"steps_lost", nullptr},
                        {"restart", nullptr}});
  n.add(3, "agent_exiting", {{"exit_code", 143}});
  auto r = build_report({{"ev", n.text}});
  REQUIRE(r.incidents.size() == 1);
  CHECK(r.incidents[0].incident_class == "preemption");
  CHECK_FALSE(r.incidents[0].resumed_at);
  CHECK_FALSE(r.incidents[0].rank);
  CHECK(r.outcome.exit_code == 143);
  CHECK(r.productive_s == Approx(1.4));
}

TEST_CASE("report: a membership change from a node that wants to join is its own class") {
  node_log n = {"h1", 10, 0, 1, ""};
  n.started(0);
  n.round(1, 0, 1);
  n.add(4, "membership_change", {{"round", 0}, {"reason", "a node is waiting to join"}});
  n.round(5, 1, 2);
  auto r = build_report({{"ev", n.text}});
  REQUIRE(r.incidents.size() == 1);
  CHECK(r.incidents[0].incident_class == "membership");
  CHECK(r.outcome.state == "unknown");  // the log ends before the agent exits
  CHECK_FALSE(r.end_logged);
  CHECK(r.rounds.back().ended_by == "log ends");
}

TEST_CASE("report: lines that are not events are skipped and counted") {
  std::string text = one_node_restart().text;
  text.insert(0, "not json at all\n[1, 2]\n{\"event\": \"no time\"}\n\n");
  text += "{\"time\": \"2026-11-22T20:00:1";  // cut short by a full disk
  auto r = build_report({{"ev.jsonl", text}});
  CHECK(r.skipped_lines == 4);
  CHECK(r.incidents.size() == 1);
  CHECK(r.rounds.size() == 2);
  auto warnings = report_warnings(r);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] == "skipped 4 lines: not a JSON object with a time and an event");
  CHECK(report_json(r)["skipped_lines"] == 4);
}

TEST_CASE("report: fields of the wrong type or out of range read as absent") {
  std::string text = one_node_restart().text;
  for (const char* odd : {
           R"({"event":"rendezvous_completed","host":5,"agent_pid":"x","round":"0","ranks":"a"})",
           R"({"event":"rendezvous_completed","host":"vm","agent_pid":41,"round":0,)"
           R"("ranks":[-9223372036854775807,9223372036854775807]})",
           R"({"event":"worker_failed","host":"vm","agent_pid":41,"round":1,"exit_time":7,)"
           R"("rank":"one","message":["x"],"signal":3})",
           R"({"event":"incident","host":"vm","agent_pid":41,"round":9,"class":7,)"
           R"("failed_at":"soon","restart":"x","steps_lost":1.5})",
           R"({"event":"restart","host":"vm","agent_pid":41,"count":"2","after_round":null})",
           R"({"event":"node_health","host":"vm","agent_pid":41,"round":0,"healthy":"no"})",
       }) {
    auto j = ojson::parse(odd);
    j["time"] = at(7);
    text += j.dump() + "\n";
  }
  job_report r;
  REQUIRE_NOTHROW(r = build_report({{"ev", text}}));
  CHECK(r.restarts == 1);
  CHECK(r.incidents.size() == 3);  // round 9's, and the failure logged in round 1
  CHECK_NOTHROW(render_report(r));
  CHECK_NOTHROW(render_svg(r));
  CHECK_NOTHROW(report_json(r).dump());
}

TEST_CASE("report: a log with no event is one clear error") {
  CHECK_THROWS_WITH(build_report({{"ev.jsonl", "hello\nworld\n"}}),
                    "no dtrun event in ev.jsonl (2 lines are not a dtrun event); write one with "
                    "`dtrun --event-log FILE ...`");
  CHECK_THROWS_AS(build_report({{"empty.jsonl", ""}}), report_error);
}

TEST_CASE("report: a log holding two runs reports the last unless told") {
  node_log first = one_node_restart();
  node_log second = {"vm", 77, 0, 1, ""};
  second.started(100, "job2");
  second.round(101, 0, 1);
  second.exits_ok(102, 0);
  second.add(102, "job_succeeded", {{"round", 0}});
  second.add(102.5, "agent_exiting", {{"exit_code", 0}});
  std::string text = first.text + second.text;
  auto last = build_report({{"ev", text}});
  CHECK(last.run_id == "job2");
  CHECK(last.other_runs == std::vector<std::string>{"job1"});
  CHECK(last.incidents.empty());
  CHECK_THAT(report_warnings(last).at(0), Contains("--run-id"));
  auto chosen = build_report({{"ev", text}}, "job1");
  CHECK(chosen.run_id == "job1");
  CHECK(chosen.incidents.size() == 1);
  CHECK_THROWS_WITH(build_report({{"ev", text}}, "job3"),
                    "no run 'job3' in the event log; it holds: job1, job2");
}

TEST_CASE("report: a log cut at its head still reads, its agents in the one run") {
  auto [a, b] = two_nodes();
  // h2's first lines (agent_started, its round 0) are lost.
  std::string cut = b.text.substr(b.text.find("\n", b.text.find("worker_started")) + 1);
  auto r = build_report({{"h1", a.text}, {"h2", cut}});
  CHECK(r.run_id == "job1");
  CHECK(r.other_runs.empty());
  CHECK(r.nodes.size() == 2);
  CHECK(r.incidents.size() == 1);
  auto only_cut = build_report({{"h2", cut}});
  CHECK(only_cut.run_id.empty());
  CHECK(only_cut.nodes.size() == 1);
  CHECK_THAT(render_report(only_cut), Contains("run ?: 1 node (h2)"));
}

TEST_CASE("report: two agents on one host are told apart by their pids") {
  node_log a{"vm", 10, 0, 1, ""}, b{"vm", 20, 1, 1, ""};
  a.started(0);
  b.started(0);
  a.round(1, 0, 2);
  b.round(1, 0, 2);
  b.failed(3, 0, 1);
  auto r = build_report({{"ev", a.text + b.text}});
  REQUIRE(r.nodes.size() == 2);
  CHECK(r.nodes[0].label == "vm/10");
  CHECK(r.nodes[1].label == "vm/20");
  CHECK(r.rounds[0].nodes == 2);
  REQUIRE(r.incidents.size() == 1);
  CHECK(r.incidents[0].culprit_host == "vm");
  CHECK(r.incidents[0].culprit_node == "vm/20");
  CHECK_THAT(render_report(r), Contains("rank 1 on vm/20"));
}

TEST_CASE("report: the SVG is well-formed XML naming rounds, incidents and the goodput") {
  node_log n = {"vm<&>", 41, 0, 2, ""};
  n.started(0);
  n.round(1, 0, 2);
  n.failed(3, 0, 1);
  n.round(4, 1, 2);
  n.add(20, "hang_detected", {{"round", 1}, {"idle_s", 10.5}});
  n.round(21, 2, 2);
  n.exits_ok(25, 2);
  n.add(25, "job_succeeded", {{"round", 2}});
  n.add(25, "agent_exiting", {{"exit_code", 0}});
  auto r = build_report({{"ev.jsonl", n.text}});
  std::string svg = render_svg(r);
  std::istringstream in(svg);
  boost::property_tree::ptree tree;
  REQUIRE_NOTHROW(boost::property_tree::read_xml(in, tree));
  CHECK(tree.count("svg") == 1);
  CHECK_THAT(svg, Contains(fmt::format("goodput {:.1f}%", r.goodput * 100)));
  CHECK_THAT(svg, Contains(">exit (round 0)</text>"));
  CHECK_THAT(svg, Contains(">hang (round 1)</text>"));
  CHECK_THAT(svg, Contains(">vm&lt;&amp;&gt;</text>"));  // the lane, escaped
  CHECK_THAT(svg, Contains("seconds since the first agent started"));
  CHECK_THAT(svg, Contains(">r2</text>"));
  CHECK(xml_escape("a\"b'\x01") == "a&quot;b&apos; ");
  // U+FFFE and U+FFFF are no XML characters (a host so named in a log made
  // the SVG unreadable); U+FFFD and the other characters stay as they are.
  CHECK(xml_escape("h\xEF\xBF\xBF\xEF\xBF\xBEx\xEF\xBF\xBD\xEF\xBF") ==
        "h\xEF\xBF\xBD\xEF\xBF\xBDx\xEF\xBF\xBD\xEF\xBF");
}

TEST_CASE("report: a negative detect_s or recover_s in a corrupt log is not shown") {
  auto [a, b] = two_nodes();
  a.add(5.2, "incident", {{"round", 0}, {"class", "exit"}, {"failed_at", at(3.9)},
                          {"detected_at", at(4.2)}, {"detect_s", -1}, {"recover_s", -2.5}});
  auto r = build_report({{"h1", a.text}, {"h2", b.text}});
  REQUIRE(r.incidents.size() == 1);
  const auto& i = r.incidents[0];
  CHECK(!i.detect_s);  // null in the JSON, as when no node knew
  CHECK(!i.recover_s);
  CHECK(report_json(r)["incidents"][0]["detect_s"].is_null());
}

TEST_CASE("report: a hang's idle_s longer than its round began no earlier than the round") {
  node_log n = {"vm", 41, 0, 2, ""};
  n.started(0);
  n.round(4, 0, 2);  // joined at 4, running at 4.2
  n.add(20, "hang_detected", {{"round", 0}, {"idle_s", 1e300}});
  n.failed(20.1, 0, 0, nullptr, "SIGKILL");
  n.add(20.2, "agent_exiting", {{"exit_code", 1}});
  auto r = build_report({{"ev.jsonl", n.text}});
  REQUIRE(r.incidents.size() == 1);
  CHECK(r.incidents[0].failed_at == Approx(base + 4));
  CHECK(*r.incidents[0].detect_s == Approx(16));
  CHECK(r.total_s == Approx(20.2));
}

TEST_CASE("report: a clock stepped back after the start is still one node") {
  node_log n = {"vm", 41, 0, 1, ""};
  n.started(100);
  n.round(101, 0, 1);
  // The clock stepped back 100 s: the rest of the log is timed before the start.
  n.exits_ok(3, 0);
  n.add(3, "job_succeeded", {{"round", 0}});
  n.add(3.5, "agent_exiting", {{"exit_code", 0}});
  auto r = build_report({{"ev.jsonl", n.text}});
  REQUIRE(r.nodes.size() == 1);
  CHECK(r.nodes[0].label == "vm");
  CHECK(r.end_logged);
  CHECK(r.outcome.state == "succeeded");
}

TEST_CASE("report: stragglers node 0 named, and a section's hang, beside the incidents") {
  auto [a, b] = two_nodes();
  a.add(3, "straggler", {{"round", 0},
                         {"straggler_host", "h2"},
                         {"straggler_node_rank", 1},
                         {"straggler_ranks", {2, 3}},
                         {"own_work_s", 0.24},
                         {"job_median_s", 0.0516},
                         {"first_step", 21},
                         {"last_step", 40},
                         {"action", "leave"},
                         {"leaves", false},
                         {"line", "node 1 (h2) is a straggler: ..."}});
  a.add(3.5, "straggler", {{"round", 0}, {"straggler_host", "h9"}});  // no evidence: left out
  auto r = build_report({{"ev.jsonl", a.text + b.text}});
  REQUIRE(r.stragglers.size() == 1);
  const auto& s = r.stragglers[0];
  CHECK(s.host == "h2");
  CHECK(s.ranks == std::vector<int>{2, 3});
  CHECK(s.named_at == Approx(base + 3));
  CHECK(s.first_step == 21);
  CHECK(s.last_step == 40);
  auto text = render_report(r);
  CHECK_THAT(text, Contains("stragglers (own work per step against the job's median"));
  CHECK_THAT(text, Contains("h2") && Contains("2,3") && Contains("0.240 s") &&
                       Contains("51.6 ms") && Contains("21-40") && Contains("leave: stayed"));
  auto j = report_json(r);
  CHECK(j["stragglers"][0]["straggler_ranks"] == ojson({2, 3}));
  CHECK(j["stragglers"][0]["named_s"] == 3.0);

  // A section's hang (--section-timeouts): the incident names the section.
  node_log n{"vm", 41, 0, 2, ""};
  n.started(0);
  n.round(1, 0, 2);
  n.add(5, "hang_detected", {{"round", 0}, {"idle_s", 2.0}, {"section", "checkpoint"}});
  n.add(5.5, "agent_exiting", {{"exit_code", 1}});
  auto hung = build_report({{"ev.jsonl", n.text}});
  REQUIRE(hung.incidents.size() == 1);
  CHECK(hung.incidents[0].incident_class == "hang");
  CHECK(hung.incidents[0].section == "checkpoint");
  CHECK_THAT(render_report(hung), Contains("hang (section checkpoint)"));
  CHECK(report_json(hung)["incidents"][0]["section"] == "checkpoint");
}
