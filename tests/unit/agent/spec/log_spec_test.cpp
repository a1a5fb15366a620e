#include <catch2/catch.hpp>

#include "agent/spec/log_spec.h"

using namespace dtrun::agent;

namespace {

std_setting all(unsigned streams) { return {streams, {}, false}; }
std_setting per_rank(std::map<int, unsigned> map) { return {std_none, std::move(map), true}; }

}  // namespace

TEST_CASE("by default every stream stays on the console") {
  log_spec spec;
  CHECK(spec.routes(0).out == stream_route::console);
  CHECK(spec.routes(3).err == stream_route::console);
  CHECK_FALSE(spec.writes_files(4));
}

TEST_CASE("redirected streams go to files, the others stay on the console") {
  log_spec spec;
  spec.redirects = all(std_out);
  CHECK(spec.routes(1).out == stream_route::file);
  CHECK(spec.routes(1).err == stream_route::console);
  CHECK(spec.writes_files(2));
}

TEST_CASE("tee'd streams go to the file and the console, as torchrun's") {
  log_spec spec;
  spec.tee = per_rank({{0, std_out}, {1, std_err}});
  CHECK(spec.routes(0).out == stream_route::file_and_console);
  CHECK(spec.routes(0).err == stream_route::console);
  CHECK(spec.routes(1).out == stream_route::console);
  CHECK(spec.routes(1).err == stream_route::file_and_console);
  CHECK(spec.routes(2).out == stream_route::console);
  CHECK(spec.writes_files(1));
  // Tee wins over a plain redirect of the same stream.
  spec.redirects = all(std_all);
  CHECK(spec.routes(0).out == stream_route::file_and_console);
  CHECK(spec.routes(0).err == stream_route::file);
}

TEST_CASE("ranks outside the filter keep their files and lose the console") {
  log_spec spec;
  spec.local_ranks_filter = std::set<int>{0};
  CHECK(spec.routes(0).out == stream_route::prefixed_console);
  CHECK(spec.routes(0).err == stream_route::prefixed_console);
  CHECK(spec.routes(1).out == stream_route::discard);
  CHECK(spec.routes(1).err == stream_route::discard);
  CHECK_FALSE(spec.writes_files(2));
  spec.tee = all(std_out);
  spec.redirects = all(std_err);
  CHECK(spec.routes(0).out == stream_route::file_and_console);
  CHECK(spec.routes(1).out == stream_route::file);
  CHECK(spec.routes(1).err == stream_route::file);
}

TEST_CASE("the default prefix is the role and the local rank") {
  CHECK(line_prefix("", {"default", 5, 1, 2, 0}) == "[default1]:");
  CHECK(line_prefix("", {"trainer", 0, 12, 0, 3}) == "[trainer12]:");
}

TEST_CASE("prefix templates substitute like Python's Template.safe_substitute") {
  prefix_fields f{"trainer", 7, 3, 1, 2};
  CHECK(line_prefix("[rank${rank}]: ", f) == "[rank7]: ");
  CHECK(line_prefix("$role_name-$local_rank/$group_rank@$restart_count|", f) == "trainer-3/1@2|");
  CHECK(line_prefix("$$rank $ ${nope} $nope ${rank", f) == "$rank $ ${nope} $nope ${rank");
  CHECK(line_prefix("$rank_x$rank", f) == "$rank_x7");
}

TEST_CASE("the prefix template names the host as torchrun 2.14's ${hostname}") {
  prefix_fields f{"trainer", 7, 3, 1, 2, "r12i0n8"};
  CHECK(line_prefix("${hostname}:${rank}: ", f) == "r12i0n8:7: ");
  CHECK(line_prefix("$hostname", prefix_fields{}) == "");
  CHECK_FALSE(this_host_name().empty());
}

TEST_CASE("prefix_console (dtrun --hosts) prefixes every console stream, files stay files") {
  log_spec spec;
  spec.prefix_console = true;
  spec.redirects = per_rank({{1, std_err}});
  spec.tee = per_rank({{2, std_out}});
  CHECK(spec.routes(0).out == stream_route::prefixed_console);
  CHECK(spec.routes(0).err == stream_route::prefixed_console);
  CHECK(spec.routes(1).err == stream_route::file);
  CHECK(spec.routes(2).out == stream_route::file_and_console);
  spec.local_ranks_filter = std::set<int>{0};
  CHECK(spec.routes(1).out == stream_route::discard);
}
