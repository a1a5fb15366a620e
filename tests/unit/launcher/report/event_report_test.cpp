// dtrun report's model and text from synthetic event logs written the way
// the agent writes them (docs/agent.md, "Event log"): rounds, incidents,
// their classes and the time each lost.
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "launcher/report/event_report.h"
#include "launcher/report/report_svg.h"
#include "launcher/report/report_text.h"
#include "tests/unit/launcher/report/report_test_log.h"

using namespace dtrun::launcher;
using namespace dtrun::launcher::report_test;
using Catch::Matchers::Contains;

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
