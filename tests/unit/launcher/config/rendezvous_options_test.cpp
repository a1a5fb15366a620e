// The job's run id and restart budget are kept once, in the agent's
// options; the rendezvous (and etcd's client) is made with them joined to
// the plan's settings (launch_config.h, rendezvous_options), so the keys
// and count the rendezvous uses and what the workers are told agree.
#include <catch2/catch.hpp>

#include "launcher/config/launch_config.h"
#include "launcher/config/resolve_launch_config.h"

namespace rendezvous_options_test {

using namespace dtrun::launcher;

launch_options multi_node_options(const std::string& backend, const std::string& endpoint) {
  launch_options o;
  o.script = "train.py";
  o.nnodes.value = "2:4";
  o.rdzv_backend.value = backend;
  o.rdzv_backend.source = "command line";  // given, not c10d's default for an endpoint
  o.rdzv_endpoint.value = endpoint;
  o.rdzv_id.value = "job7";
  o.max_restarts = 3;
  return o;
}

TEST_CASE("the rendezvous runs the agent's run id and restart budget") {
  auto c = resolve_launch_config(multi_node_options("c10d", "192.0.2.1:29400"), {});
  REQUIRE(c.multi_node());
  CHECK(c.agent.spec.run_id == "job7");
  CHECK(c.agent.spec.max_restarts == 3);
  auto r = rendezvous_options(c);
  CHECK(r.run_id == "job7");
  CHECK(r.max_restarts == 3);
  CHECK(r.endpoint_port == 29400);  // the plan's own settings come along
  CHECK_FALSE(etcd_options(c));     // c10d has no etcd client

  // One source: what the agent's options say is what the rendezvous gets.
  c.agent.spec.run_id = "job8";
  c.agent.spec.max_restarts = 5;
  CHECK(rendezvous_options(c).run_id == "job8");
  CHECK(rendezvous_options(c).max_restarts == 5);
}

TEST_CASE("etcd's client keys the job by the agent's run id") {
  auto c = resolve_launch_config(multi_node_options("etcd-v3", "192.0.2.1:2379"), {});
  auto e = etcd_options(c);
  REQUIRE(e);
  CHECK(e->run_id == "job7");
  CHECK(e->members.front().port == 2379);
  c.agent.spec.run_id = "job8";
  CHECK(etcd_options(c)->run_id == "job8");
}

TEST_CASE("a single-node run has no etcd client") {
  launch_options o;
  o.script = "train.py";
  o.standalone = true;
  CHECK_FALSE(etcd_options(resolve_launch_config(o, {})));
}

}  // namespace rendezvous_options_test
