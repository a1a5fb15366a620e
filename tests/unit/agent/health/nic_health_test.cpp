// The NIC built-in against a fake sysfs tree (a temporary folder laid out
// as /sys/class/infiniband and /sys/class/net are): ports down, counters
// rising, an interface down or missing, and a healthy node; which
// interfaces NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME name.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/health/nic_health.h"
#include "tests/unit/agent/test_files.h"

namespace nic_health_test {

using namespace dtrun::agent;
namespace fs = std::filesystem;

// A sysfs tree of IB ports and network interfaces, written as the kernel
// shows them.
struct fake_sysfs {
  testing::scoped_temp_dir dir{"dtrun-sysfs"};
  std::string root() const { return dir.path.string(); }

  void write(const fs::path& file, const std::string& text) const {
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text << "\n";
  }
  void port(const std::string& device, const std::string& port, const std::string& state,
            std::uint64_t link_downed, const std::string& link_layer = "InfiniBand") const {
    fs::path p = dir.path / "class" / "infiniband" / device / "ports" / port;
    write(p / "state", state);
    write(p / "link_layer", link_layer);
    write(p / "counters" / "link_downed", std::to_string(link_downed));
  }
  void link(const std::string& name, const std::string& operstate, std::uint64_t changes) const {
    fs::path p = dir.path / "class" / "net" / name;
    write(p / "operstate", operstate);
    write(p / "carrier", operstate == "up" ? "1" : "0");
    write(p / "carrier_changes", std::to_string(changes));
  }
};

std::vector<std::string> unhealthy_reasons(const std::vector<health_finding>& found) {
  std::vector<std::string> reasons;
  for (const auto& f : found) {
    CHECK(f.check == "nic");
    if (!f.healthy) reasons.push_back(f.reason);
  }
  return reasons;
}

TEST_CASE("healthy ports and interfaces give one healthy nic finding", "[health][nic]") {
  fake_sysfs sys;
  sys.port("mlx5_0", "1", "4: ACTIVE", 2);
  sys.port("mlx5_1", "1", "4: ACTIVE", 0, "Ethernet");
  sys.link("eth0", "up", 3);
  nic_health watch;
  auto snapshot = read_nic_snapshot(sys.root(), "", {"eth0"});
  REQUIRE(snapshot.ports.size() == 2);
  REQUIRE(snapshot.links.size() == 1);
  auto found = watch.judge(snapshot, false);
  REQUIRE(found.size() == 1);
  CHECK(found[0].healthy);
  CHECK(found[0].check == "nic");
  // Counters that stay where they were (they count since boot) are fine.
  found = watch.judge(read_nic_snapshot(sys.root(), "", {"eth0"}), false);
  CHECK(unhealthy_reasons(found).empty());
}

TEST_CASE("an InfiniBand or RoCE port not ACTIVE is named, once", "[health][nic]") {
  fake_sysfs sys;
  sys.port("mlx5_0", "1", "4: ACTIVE", 0);
  sys.port("mlx5_1", "1", "1: DOWN", 0);
  sys.port("mlx5_2", "1", "2: INIT", 0, "Ethernet");
  nic_health watch;
  auto found = watch.judge(read_nic_snapshot(sys.root(), "", {}), true);
  auto reasons = unhealthy_reasons(found);
  REQUIRE(reasons.size() == 2);
  CHECK(reasons[0] ==
        "InfiniBand port mlx5_1/1 is not ACTIVE (state \"1: DOWN\"); check with: ibstat mlx5_1 1");
  CHECK(reasons[1] ==
        "RoCE port mlx5_2/1 is not ACTIVE (state \"2: INIT\"); check with: ibstat mlx5_2 1");
  for (const auto& f : found) {
    CHECK(f.gating);
    CHECK_FALSE(f.repeated);
  }

  // Still down at the next check: in the verdict, marked as said already.
  found = watch.judge(read_nic_snapshot(sys.root(), "", {}), true);
  REQUIRE(found.size() == 2);
  CHECK(found[0].repeated);
  CHECK(found[1].repeated);

  // Back up, then down again: news again.
  sys.port("mlx5_1", "1", "4: ACTIVE", 0);
  CHECK(unhealthy_reasons(watch.judge(read_nic_snapshot(sys.root(), "", {}), true)).size() == 1);
  sys.port("mlx5_1", "1", "1: DOWN", 1);
  found = watch.judge(read_nic_snapshot(sys.root(), "", {}), true);
  REQUIRE(found.size() == 3);  // mlx5_1 down (news), its link_downed rose, mlx5_2 still
  CHECK_FALSE(found[0].repeated);
}

TEST_CASE("NCCL_IB_HCA limits the ports judged to those NCCL uses", "[health][nic]") {
  fake_sysfs sys;
  sys.port("mlx5_0", "1", "4: ACTIVE", 0);
  sys.port("mlx5_0", "2", "1: DOWN", 0);  // an unused second port
  sys.port("mlx5_1", "1", "1: DOWN", 0);
  nic_health watch;
  CHECK(read_nic_snapshot(sys.root(), "mlx5_0:1", {}).ports.size() == 1);
  CHECK(unhealthy_reasons(watch.judge(read_nic_snapshot(sys.root(), "mlx5_0:1", {}), false))
            .empty());
  CHECK(read_nic_snapshot(sys.root(), "^mlx5_1", {}).ports.size() == 2);
  CHECK(read_nic_snapshot(sys.root(), "=mlx5_1", {}).ports.size() == 1);
  CHECK(read_nic_snapshot(sys.root(), "mlx5", {}).ports.size() == 3);
}

TEST_CASE("a link_downed or carrier_changes count that rose is named with both values",
          "[health][nic]") {
  fake_sysfs sys;
  sys.port("mlx5_0", "1", "4: ACTIVE", 7);
  sys.link("ens1f0", "up", 4);
  nic_health watch;
  // The first check sets the baseline: a count since boot says nothing.
  CHECK(unhealthy_reasons(watch.judge(read_nic_snapshot(sys.root(), "", {"ens1f0"}), false))
            .empty());
  sys.port("mlx5_0", "1", "4: ACTIVE", 9);
  sys.link("ens1f0", "up", 6);
  auto reasons =
      unhealthy_reasons(watch.judge(read_nic_snapshot(sys.root(), "", {"ens1f0"}), false));
  CHECK(reasons ==
        std::vector<std::string>{
            "InfiniBand port mlx5_0/1: link_downed rose from 7 to 9 since the last check (the "
            "link went down and came back: a cable or switch port flapping); check with: ibstat "
            "mlx5_0 1",
            "network interface ens1f0: carrier_changes rose from 4 to 6 since the last check "
            "(its link went down and came back); check with: ip -s link show ens1f0"});
  // Judged against the check before, not the first one.
  CHECK(unhealthy_reasons(watch.judge(read_nic_snapshot(sys.root(), "", {"ens1f0"}), false))
            .empty());
}

TEST_CASE("the workers' interface down or missing is named", "[health][nic]") {
  fake_sysfs sys;
  sys.link("eth0", "down", 1);
  sys.link("lo", "unknown", 0);
  {
    std::ofstream(sys.dir.path / "class" / "net" / "lo" / "carrier") << "1\n";
  }
  nic_health watch;
  auto snapshot = read_nic_snapshot(sys.root(), "", {"eth0", "lo", "ib9"});
  auto reasons = unhealthy_reasons(watch.judge(snapshot, true));
  CHECK(reasons == std::vector<std::string>{
                       "network interface eth0 (the workers' socket interface) is down "
                       "(operstate \"down\"); check with: ip -s link show eth0",
                       "network interface ib9 (the workers' socket interface) does not exist; "
                       "check with: ip link"});
}

TEST_CASE("the socket interfaces: NCCL's and gloo's variables, else the routed one",
          "[health][nic]") {
  fake_sysfs sys;
  sys.link("eth0", "up", 0);
  sys.link("eth1", "up", 0);
  sys.link("ib0", "up", 0);
  using list = std::vector<std::string>;
  CHECK(socket_interfaces(sys.root(), {}, "eth1") == list{"eth1"});
  CHECK(socket_interfaces(sys.root(), {}, "").empty());
  // NCCL: prefixes; `=` exact; `^` excludes (then the routed one).
  CHECK(socket_interfaces(sys.root(), {{"NCCL_SOCKET_IFNAME", "eth"}}, "ib0") ==
        list{"eth0", "eth1"});
  CHECK(socket_interfaces(sys.root(), {{"NCCL_SOCKET_IFNAME", "=eth1"}}, "ib0") == list{"eth1"});
  CHECK(socket_interfaces(sys.root(), {{"NCCL_SOCKET_IFNAME", "^docker,lo"}}, "ib0") ==
        list{"ib0"});
  // gloo: exact names; both variables: both sets.
  CHECK(socket_interfaces(sys.root(), {{"GLOO_SOCKET_IFNAME", "eth"}}, "ib0") == list{"eth"});
  CHECK(socket_interfaces(sys.root(),
                          {{"NCCL_SOCKET_IFNAME", "ib"}, {"GLOO_SOCKET_IFNAME", "eth0"}}, "") ==
        list{"ib0", "eth0"});
}

TEST_CASE("NCCL's interface lists: prefixes, exact names, exclusions, ports", "[health][nic]") {
  CHECK(nccl_list_selects("", "mlx5_0", "1"));
  CHECK(nccl_list_selects("mlx5", "mlx5_0", "1"));
  CHECK_FALSE(nccl_list_selects("=mlx5", "mlx5_0", "1"));
  CHECK(nccl_list_selects("mlx5_0:1,mlx5_1:1", "mlx5_1", "1"));
  CHECK_FALSE(nccl_list_selects("mlx5_0:1", "mlx5_0", "2"));
  CHECK_FALSE(nccl_list_selects("^mlx5_0", "mlx5_0", "1"));
  CHECK(nccl_list_selects("^mlx5_0", "mlx5_1", "1"));
}

TEST_CASE("the interface that routes to an address is found by the kernel", "[health][nic]") {
  CHECK(route_interface("127.0.0.1") == "lo");
  CHECK(route_interface("not an address").empty());
}

}  // namespace nic_health_test
