// dtrun report on logs that are not one clean run: two runs in one file,
// a cut head, two agents on one host, corrupt figures, a stepped clock;
// the SVG; stragglers and a section's hang beside the incidents.
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
#include "tests/unit/launcher/report/report_test_log.h"

using namespace dtrun::launcher;
using namespace dtrun::launcher::report_test;
using Catch::Matchers::Contains;

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
