#include <catch2/catch.hpp>

#include "launcher/config/log_options.h"

using namespace dtrun;  // usage_error and the number checks (rendezvous/base)
using namespace dtrun::launcher;
using dtrun::agent::std_setting;
using dtrun::agent::stream_route;

TEST_CASE("redirects and tee take 0 to 3 for every rank") {
  for (unsigned v = 0; v <= 3; ++v) {
    std_setting s = parse_std_setting("--tee", std::to_string(v));
    CHECK_FALSE(s.is_map);
    CHECK(s.for_rank(0) == v);
    CHECK(s.for_rank(17) == v);
  }
}

TEST_CASE("per-rank maps name ranks of any number of digits") {
  std_setting s = parse_std_setting("--redirects", "0:1,1:2,12:3");
  CHECK(s.is_map);
  CHECK(s.for_rank(0) == 1);
  CHECK(s.for_rank(1) == 2);
  CHECK(s.for_rank(12) == 3);
  CHECK(s.for_rank(2) == 0);  // not named: none
  CHECK(parse_std_setting("--tee", " 0:3 , 1:0 ").for_rank(0) == 3);
}

TEST_CASE("bad redirect and tee values are usage errors naming the flag") {
  for (const char* bad : {"4", "", "x", "-1", "11", "0:4", "0:1,x", "0:1,", ":1", "a:1", "0:1:2",
                          "0:", "1234567:1"}) {
    INFO(bad);
    try {
      parse_std_setting("--tee", bad);
      FAIL("accepted");
    } catch (const usage_error& e) {
      CHECK(std::string(e.what()).rfind("--tee=", 0) == 0);
    }
  }
  CHECK_THROWS_WITH(parse_std_setting("--redirects", "0:1,0:2"),
                    "--redirects=0:1,0:2 names local rank 0 twice");
  CHECK_THROWS_WITH(parse_std_setting("--redirects", "4"),
                    Catch::Contains("is not 0, 1, 2 or 3"));
}

TEST_CASE("the local ranks filter is a list of ranks, empty meaning all") {
  CHECK_FALSE(parse_local_ranks_filter(""));
  CHECK(parse_local_ranks_filter("0") == std::optional<std::set<int>>({0}));
  CHECK(parse_local_ranks_filter("3, 1,10") == std::optional<std::set<int>>({1, 3, 10}));
  for (const char* bad : {"x", "0,", "-1", "0,,1", "1.5"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_local_ranks_filter(bad), usage_error);
  }
}

TEST_CASE("ranks beyond the node's workers are warned about, not refused") {
  launch_options o;
  o.tee = "0:1,5:3";
  o.local_ranks_filter = "0,9";
  std::vector<std::string> warnings;
  auto spec = resolve_log_spec(o, 2, {}, warnings);
  REQUIRE(warnings.size() == 2);
  CHECK(warnings[0] ==
        "--tee names local rank 5, but this node runs 2 worker(s) (local ranks 0..1); ignored");
  CHECK(warnings[1].rfind("--local-ranks-filter names local rank 9", 0) == 0);
  CHECK(spec.routes(0).out == stream_route::file_and_console);
}

TEST_CASE("the prefix template comes from the environment") {
  launch_options o;
  std::vector<std::string> warnings;
  CHECK(resolve_log_spec(o, 1, {}, warnings).line_prefix_template.empty());
  auto spec =
      resolve_log_spec(o, 1, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[rank${rank}]: "}},
                       warnings);
  CHECK(spec.line_prefix_template == "[rank${rank}]: ");
  CHECK(warnings.empty());
}

TEST_CASE("the log-line-prefix-template flag wins over the variable unless it is empty") {
  launch_options o;
  std::vector<std::string> warnings;
  env_map env{{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[env${rank}]"}};
  o.log_line_prefix_template = "${hostname}:${rank}: ";
  CHECK(resolve_log_spec(o, 1, env, warnings).line_prefix_template == "${hostname}:${rank}: ");
  o.log_line_prefix_template = "";  // torchrun: `args.template or os.getenv(...)`
  CHECK(resolve_log_spec(o, 1, env, warnings).line_prefix_template == "[env${rank}]");
}

TEST_CASE("the dry run shows each rank's routes") {
  launch_options o;
  o.redirects = "0:2";
  o.tee = "1:1";
  o.local_ranks_filter = "1";
  std::vector<std::string> warnings;
  auto j = to_json(resolve_log_spec(o, 3, {}, warnings), 3);
  CHECK(j["redirects"]["0"] == 2);
  CHECK(j["tee"]["1"] == 1);
  CHECK(j["local_ranks_filter"] == nlohmann::json::array({1}));
  CHECK(j["line_prefix_template"] == "[${role_name}${local_rank}]:");
  CHECK(j["workers"][0]["stdout"] == "discard");
  CHECK(j["workers"][0]["stderr"] == "file");
  CHECK(j["workers"][1]["stdout"] == "file+console");
  CHECK(j["workers"][1]["stderr"] == "console+prefix");
  CHECK(j["workers"][2]["stdout"] == "discard");
}

TEST_CASE("duplicate filters are parsed and shown by the dry run") {
  launch_options o;
  o.tee = "3";
  o.duplicate_stdout_filters = "loss,,acc,step";
  o.duplicate_stderr_filters = "Traceback";
  std::vector<std::string> warnings;
  auto spec = resolve_log_spec(o, 2, {}, warnings);
  CHECK(spec.duplicate_stdout_filters == std::vector<std::string>{"loss,acc", "step"});
  CHECK(spec.duplicate_stderr_filters == std::vector<std::string>{"Traceback"});
  CHECK(warnings.empty());
  auto j = to_json(spec, 2);
  CHECK(j["duplicate_stdout_filters"] == nlohmann::json::array({"loss,acc", "step"}));
}

TEST_CASE("duplicate filters without a tee'd shown stream are warned about") {
  launch_options o;
  o.duplicate_stdout_filters = "loss";
  o.duplicate_stderr_filters = "err";
  o.tee = "0:1,1:2";
  o.local_ranks_filter = "1";  // rank 0's tee'd stdout is not shown: no copy
  std::vector<std::string> warnings;
  resolve_log_spec(o, 2, {}, warnings);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] ==
        "--duplicate-stdout-filters copies lines of tee'd streams only, and no local rank shown "
        "on the console tees its stdout; add --tee=1 (or 3)");
}
