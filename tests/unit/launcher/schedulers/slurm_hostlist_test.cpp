#include <catch2/catch.hpp>

#include "launcher/schedulers/slurm_hostlist.h"

using namespace dtrun::launcher;
using host_names = std::vector<std::string>;

TEST_CASE("Slurm host lists expand as scontrol show hostnames does") {
  struct row {
    const char* text;
    host_names expected;
  };
  const row table[] = {
      {"node1", {"node1"}},
      {"login-01.cluster.local", {"login-01.cluster.local"}},
      {"node[1-2]", {"node1", "node2"}},
      {"node[1-3]", {"node1", "node2", "node3"}},
      {"node[01-10]",
       {"node01", "node02", "node03", "node04", "node05", "node06", "node07", "node08", "node09",
        "node10"}},
      {"node[8-11]", {"node8", "node9", "node10", "node11"}},
      {"node[098-101]", {"node098", "node099", "node100", "node101"}},
      {"node[7]", {"node7"}},
      {"node[1,3,5]", {"node1", "node3", "node5"}},
      {"node[1-2,5,7-8]", {"node1", "node2", "node5", "node7", "node8"}},
      {"rack[1-2]-node[001-003]",
       {"rack1-node001", "rack1-node002", "rack1-node003", "rack2-node001", "rack2-node002",
        "rack2-node003"}},
      {"a,b[1-3],c[05,07-08]", {"a", "b1", "b2", "b3", "c05", "c07", "c08"}},
      {"gpu-[1,3-4]x", {"gpu-1x", "gpu-3x", "gpu-4x"}},
      {"nid[00012-00013]", {"nid00012", "nid00013"}},
      {"x[1-2]y[3-4]z", {"x1y3z", "x1y4z", "x2y3z", "x2y4z"}},
      {"n[1-2],m[1-2]", {"n1", "n2", "m1", "m2"}},
      {"c1-[1-2],c2-[1]", {"c1-1", "c1-2", "c2-1"}},
      {"[1-2]", {"1", "2"}},
      {"10.0.0.1,10.0.0.2", {"10.0.0.1", "10.0.0.2"}},
  };
  for (const auto& r : table) {
    INFO(r.text);
    CHECK(expand_hostlist(r.text) == r.expected);
    CHECK(first_host(r.text) == r.expected.front());
  }
}

TEST_CASE("malformed host lists are refused with the text in the message") {
  for (const char* text : {"", "node[1-2", "node1-2]", "node[]", "node[a-b]", "node[3-1]",
                           "node[[1]]", "a,,b", "node[1-2]]", "node[0-99999999]"}) {
    INFO(text);
    CHECK_THROWS_AS(expand_hostlist(text), hostlist_error);
  }
  CHECK_THROWS_WITH(expand_hostlist("node[3-1]"), Catch::Contains("node[3-1]"));
}

TEST_CASE("a host list splits on the commas outside brackets") {
  using parts = std::vector<std::string_view>;
  CHECK(split_hostlist("a,b[1,2]:2,c") == parts{"a", "b[1,2]:2", "c"});
  CHECK(split_hostlist("n[1-3]") == parts{"n[1-3]"});
  CHECK(split_hostlist("a,") == parts{"a", ""});
  for (const char* text : {"n[1", "n]1[", "n[[1]]"}) {
    INFO(text);
    CHECK_THROWS_AS(split_hostlist(text), hostlist_error);
  }
}

TEST_CASE("Slurm task counts per node expand") {
  struct row {
    const char* text;
    std::vector<int> expected;
  };
  const row table[] = {
      {"4", {4}},
      {"1(x2)", {1, 1}},
      {"2(x3),1", {2, 2, 2, 1}},
      {"2(x2)", {2, 2}},
      {"3,2(x2),1(x1)", {3, 2, 2, 1}},
      {"8(x16)", std::vector<int>(16, 8)},
  };
  for (const auto& r : table) {
    INFO(r.text);
    CHECK(expand_tasks_per_node(r.text) == r.expected);
  }
  for (const char* text : {"", "x", "2(3)", "2(x)", "2(x3", "2,,1", "-1", "2(x3)1"}) {
    INFO(text);
    CHECK_THROWS_AS(expand_tasks_per_node(text), hostlist_error);
  }
}
