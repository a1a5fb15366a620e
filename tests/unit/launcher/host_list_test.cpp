#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "launcher/cli.h"
#include "launcher/host_list.h"

using namespace dtrun::launcher;

namespace {

struct flat {
  std::string target;
  int slots;  // 0: none given
  bool operator==(const flat&) const = default;
};

std::vector<flat> flatten(const std::vector<host_entry>& hosts) {
  std::vector<flat> out;
  for (const auto& h : hosts) out.push_back({h.target, h.slots.value_or(0)});
  return out;
}

std::string error_of(auto&& call) {
  try {
    call();
  } catch (const usage_error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("the hosts flag takes host:slots entries and Slurm ranges") {
  CHECK(flatten(parse_hosts_flag("a")) == std::vector<flat>{{"a", 0}});
  CHECK(flatten(parse_hosts_flag("a,b:4")) == std::vector<flat>{{"a", 0}, {"b", 4}});
  CHECK(flatten(parse_hosts_flag(" a , b:2 ")) == std::vector<flat>{{"a", 0}, {"b", 2}});
  CHECK(flatten(parse_hosts_flag("node[01-03]:2,x")) ==
        std::vector<flat>{{"node01", 2}, {"node02", 2}, {"node03", 2}, {"x", 0}});
  CHECK(flatten(parse_hosts_flag("n[1,3]")) == std::vector<flat>{{"n1", 0}, {"n3", 0}});
  CHECK(flatten(parse_hosts_flag("root@10.77.0.1:1")) == std::vector<flat>{{"root@10.77.0.1", 1}});
  CHECK(flatten(parse_hosts_flag("me@n[1-2]")) == std::vector<flat>{{"me@n1", 0}, {"me@n2", 0}});
}

TEST_CASE("a host's address is the target without user@") {
  CHECK(host_entry{"me@node1", {}}.address() == "node1");
  CHECK(host_entry{"node1", {}}.address() == "node1");
}

TEST_CASE("bad --hosts values are one line naming --hosts") {
  CHECK(error_of([] { parse_hosts_flag(""); }) ==
        "--hosts: the list is empty; give host[:slots],host[:slots],...");
  CHECK(error_of([] { parse_hosts_flag("a,,b"); }) ==
        "--hosts: 'a,,b' has an empty entry; give host[:slots],...");
  CHECK(error_of([] { parse_hosts_flag("a:0"); }) ==
        "--hosts 'a:0': slots: '0' is not a whole number from 1 to 4096");
  CHECK(error_of([] { parse_hosts_flag("a:x"); }) ==
        "--hosts 'a:x': slots: 'x' is not a whole number from 1 to 4096");
  CHECK(error_of([] { parse_hosts_flag("a,a:2"); }) ==
        "--hosts: host 'a' is listed twice; list each host once and give it slots for more "
        "workers");
  CHECK(error_of([] { parse_hosts_flag("-oProxyCommand=x"); }).find("is not a host name") !=
        std::string::npos);
  CHECK(error_of([] { parse_hosts_flag("a;reboot"); }).find("'a;reboot' is not a host name") !=
        std::string::npos);
  CHECK(error_of([] { parse_hosts_flag("n[1-"); }).rfind("--hosts: Slurm host list", 0) == 0);
  // A comma inside an unclosed bracket: refused, not split into "n[1" and "2".
  CHECK(error_of([] { parse_hosts_flag("n[1,2"); }) ==
        "--hosts: Slurm host list 'n[1,2': unbalanced brackets");
  for (const char* text : {"", "a,,b", "a:0", "n[1-", "a,a"}) {
    INFO(text);
    CHECK(error_of([&] { parse_hosts_flag(text); }).find('\n') == std::string::npos);
  }
}

TEST_CASE("hostfiles: host slots=N per line, comments, blank lines, ranges") {
  std::string text =
      "# the cluster\n"
      "node1 slots=8\n"
      "\n"
      "  node2   slots=4   # a comment after\n"
      "node[3-4]\n"
      "node5 slots=2 max_slots=2\r\n";
  CHECK(flatten(parse_hostfile(text, "hf")) ==
        std::vector<flat>{{"node1", 8}, {"node2", 4}, {"node3", 0}, {"node4", 0}, {"node5", 2}});
}

TEST_CASE("bad hostfiles name the file and the line") {
  CHECK(error_of([] { parse_hostfile("a slots=1\nb slots=x\n", "hf"); }) ==
        "hostfile hf line 2: slots: 'x' is not a whole number from 1 to 4096");
  CHECK(error_of([] { parse_hostfile("a gpus=1\n", "hf"); }) ==
        "hostfile hf line 1: unknown key 'gpus'; only slots=N is understood");
  CHECK(error_of([] { parse_hostfile("a 4\n", "hf"); }) ==
        "hostfile hf line 1: '4' is not key=value; write 'host slots=N'");
  CHECK(error_of([] { parse_hostfile("# nothing\n\n", "hf"); }) ==
        "hostfile hf lists no hosts; write one 'host slots=N' per line");
  CHECK(error_of([] { parse_hostfile("a\nb\na\n", "hf"); }) ==
        "hostfile hf line 3: host 'a' is listed twice; list each host once and give it slots "
        "for more workers");
}

TEST_CASE("read_hostfile reads the file and says when it cannot") {
  auto path = std::filesystem::temp_directory_path() / "dtrun_host_list_test_hostfile";
  {
    std::ofstream f(path);
    f << "h1 slots=2\nh2\n";
  }
  CHECK(flatten(read_hostfile(path.string())) == std::vector<flat>{{"h1", 2}, {"h2", 0}});
  std::filesystem::remove(path);
  CHECK(error_of([&] { read_hostfile(path.string()); }) ==
        "--hostfile: cannot read '" + path.string() + "': No such file or directory");
}
