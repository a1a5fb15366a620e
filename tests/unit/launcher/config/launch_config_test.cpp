#include <csignal>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include <chrono>

#include "launcher/config/launch_config.h"
#include "launcher/config/resolve_launch_config.h"

using namespace dtrun;  // usage_error and the number checks (rendezvous/base)
using namespace dtrun::launcher;

namespace {

launch_options standalone_options(std::string script = "train.py") {
  launch_options o;
  o.standalone = true;
  o.script = std::move(script);
  return o;
}

}  // namespace

TEST_CASE("nproc accepts numbers and cpu and counts accelerators for gpu xpu and auto") {
  dtrun::agent::accelerator_inventory none;
  CHECK(parse_nproc("1", none) == 1);
  CHECK(parse_nproc("16", none) == 16);
  int cpus = static_cast<int>(std::thread::hardware_concurrency());
  CHECK(parse_nproc("cpu", none) == cpus);
  CHECK(parse_nproc("auto", none) == cpus);
  CHECK_THROWS_AS(parse_nproc("0", none), usage_error);
  CHECK_THROWS_AS(parse_nproc("-1", none), usage_error);
  CHECK_THROWS_AS(parse_nproc("four", none), usage_error);
  CHECK_THROWS_AS(parse_nproc("", none), usage_error);
  CHECK_THROWS_WITH(parse_nproc("gpu", none),
                    "--nproc-per-node=gpu but no GPU is visible; give a number or 'cpu'");
  CHECK_THROWS_WITH(parse_nproc("xpu", none),
                    "--nproc-per-node=xpu but no Intel GPU is visible; give a number or 'cpu'");

  dtrun::agent::accelerator_inventory intel;
  intel.xpu.resize(2);
  CHECK(parse_nproc("xpu", intel) == 2);
  CHECK(parse_nproc("auto", intel) == 2);
  CHECK_THROWS_AS(parse_nproc("gpu", intel), usage_error);

  dtrun::agent::accelerator_inventory amd = intel;
  amd.rocm.resize(3);
  CHECK(parse_nproc("gpu", amd) == 3);
  CHECK(parse_nproc("auto", amd) == 3);

  dtrun::agent::accelerator_inventory nvidia = amd;
  nvidia.cuda.resize(4);
  CHECK(parse_nproc("gpu", nvidia) == 4);
  CHECK(parse_nproc("auto", nvidia) == 4);
}

TEST_CASE("nnodes accepts N and MIN:MAX") {
  CHECK(parse_nnodes("1").min == 1);
  CHECK(parse_nnodes("3").max == 3);
  node_range r = parse_nnodes("2:4");
  CHECK(r.min == 2);
  CHECK(r.max == 4);
  CHECK_THROWS_AS(parse_nnodes("4:2"), usage_error);
  CHECK_THROWS_AS(parse_nnodes("0"), usage_error);
  CHECK_THROWS_AS(parse_nnodes("a:b"), usage_error);
  CHECK_THROWS_AS(parse_nnodes(":"), usage_error);
}

TEST_CASE("the --nnodes text is parsed once; a refusal is thrown where the range is read") {
  nnodes_flag range("1:4");
  CHECK(range.text() == "1:4");
  CHECK(range.range().min == 1);
  CHECK(range.range().max == 4);
  nnodes_flag refused("0");  // not thrown here: where the range is read
  CHECK(refused.text() == "0");
  CHECK_THROWS_WITH(refused.range(), "--nnodes: '0' is not a whole number from 1 to 100000");
  nnodes_flag derived(3);  // a scheduler's count, set as a number
  CHECK(derived.text() == "3");
  CHECK(derived.range().min == 3);
  CHECK(derived.range().max == 3);
}

TEST_CASE("the --nproc-per-node text is parsed once: a count, or what to count") {
  nproc_flag four("4");
  CHECK(four.is_number());
  CHECK(four.count() == 4);
  CHECK((nproc_flag("gpu").what() == nproc_flag::kind::gpu));
  CHECK(nproc_flag("auto").counts_accelerators());
  CHECK_FALSE(nproc_flag("cpu").counts_accelerators());
  nproc_flag refused("foo");
  CHECK(refused.text() == "foo");
  CHECK_FALSE(refused.is_number());
  CHECK_THROWS_WITH(refused.count(), Catch::StartsWith("--nproc-per-node: 'foo' is not a whole"));
}

TEST_CASE("the four terminating signals are always handled, and others are added") {
  auto defaults = parse_signals("");
  CHECK(defaults == std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  auto more = parse_signals("SIGTERM,SIGUSR1, USR2");
  CHECK(more == std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2});
  CHECK_THROWS_AS(parse_signals("SIGKILL"), usage_error);
  CHECK_THROWS_AS(parse_signals("SIGBOGUS"), usage_error);
}

TEST_CASE("a Python script runs as [python, -u, script, args]") {
  launch_options o = standalone_options();
  o.script_args = {"--lr", "3"};
  launch_config c = resolve_launch_config(o, {});
  CHECK(c.program == "python3");
  CHECK(c.agent.args == std::vector<std::string>{"-u", "train.py", "--lr", "3"});
  CHECK(c.program_is_python);
}

TEST_CASE("the interpreter comes from --python, then DTRUN_PYTHON") {
  launch_options o = standalone_options();
  CHECK(resolve_launch_config(o, {{"DTRUN_PYTHON", "/opt/py"}}).program == "/opt/py");
  o.python.value = "/usr/bin/python3";
  CHECK(resolve_launch_config(o, {{"DTRUN_PYTHON", "/opt/py"}}).program == "/usr/bin/python3");
}

TEST_CASE("PYTHON_EXEC is torchrun's interpreter and comes after DTRUN_PYTHON") {
  launch_options o = standalone_options();
  CHECK(resolve_launch_config(o, {{"PYTHON_EXEC", "/opt/exec"}}).program == "/opt/exec");
  CHECK(resolve_launch_config(o, {{"PYTHON_EXEC", "/opt/exec"}, {"DTRUN_PYTHON", "/opt/py"}})
            .program == "/opt/py");
  CHECK(resolve_launch_config(o, {{"PYTHON_EXEC", ""}}).program == "python3");
  o.python.value = "/usr/bin/python3";
  CHECK(resolve_launch_config(o, {{"PYTHON_EXEC", "/opt/exec"}}).program == "/usr/bin/python3");
  o.no_python = true;
  CHECK(resolve_launch_config(o, {{"PYTHON_EXEC", "/opt/exec"}}).program == "train.py");
}

TEST_CASE("the python of the environment dtrun is installed in comes after PYTHON_EXEC") {
  launch_options o = standalone_options();
  o.installed_python = "/venv/bin/python3";
  launch_config c = resolve_launch_config(o, {});
  CHECK(c.program == "/venv/bin/python3");
  CHECK(c.python_source == "the Python environment dtrun is installed in");
  CHECK(resolve_launch_config(o, {{"PYTHON_EXEC", "/opt/exec"}}).program == "/opt/exec");
  CHECK(resolve_launch_config(o, {{"DTRUN_PYTHON", "/opt/py"}}).program == "/opt/py");
  o.python.value = "/usr/bin/python3";
  CHECK(resolve_launch_config(o, {}).program == "/usr/bin/python3");
}

TEST_CASE("torchrun's built-in plug-in names map to dtrun's event log") {
  launch_options o = standalone_options();
  CHECK(resolve_launch_config(o, {}).agent.report.event_log.empty());
  o.event_log_handler = "console";
  CHECK(resolve_launch_config(o, {}).agent.report.event_log == "-");
  o.event_log = "/tmp/events.jsonl";  // an explicit --event-log wins
  CHECK(resolve_launch_config(o, {}).agent.report.event_log == "/tmp/events.jsonl");
  o.event_log.clear();
  o.event_log_handler = "dynamic_rendezvous";
  CHECK(resolve_launch_config(o, {}).agent.report.event_log.empty());
  o.logs_specs = "default";
  CHECK_NOTHROW(resolve_launch_config(o, {}));
}

TEST_CASE("other plug-in names are usage errors saying what to use") {
  launch_options o = standalone_options();
  o.event_log_handler = "scuba";
  CHECK_THROWS_WITH(resolve_launch_config(o, {}),
                    Catch::StartsWith("--event-log-handler=scuba: event handlers are Python "
                                      "objects") &&
                        Catch::Contains("use --event-log=FILE"));
  o.event_log_handler = "null";
  o.logs_specs = "my_specs";
  CHECK_THROWS_WITH(resolve_launch_config(o, {}),
                    Catch::StartsWith("--logs-specs=my_specs: logs specs are Python entry points "
                                      "(torchrun.logs_specs) that dtrun cannot load") &&
                        Catch::Contains("use --log-dir"));
}

TEST_CASE("module mode runs python -m and no-python runs a program") {
  launch_options m = standalone_options("pkg.main");
  m.module = true;
  CHECK(resolve_launch_config(m, {}).agent.args ==
        std::vector<std::string>{"-u", "-m", "pkg.main"});
  launch_options n = standalone_options("/bin/echo");
  n.no_python = true;
  n.script_args = {"hi"};
  launch_config c = resolve_launch_config(n, {});
  CHECK(c.program == "/bin/echo");
  CHECK(c.agent.args == std::vector<std::string>{"hi"});
  n.module = true;
  CHECK_THROWS_AS(resolve_launch_config(n, {}), usage_error);
}

TEST_CASE("standalone gets a fresh uuid run id and a free loopback port") {
  launch_options o = standalone_options();
  o.rdzv_id.value = "ignored";
  launch_config a = resolve_launch_config(o, {});
  launch_config b = resolve_launch_config(o, {});
  CHECK(a.agent.spec.run_id.size() == 36);
  CHECK(a.agent.spec.run_id != b.agent.spec.run_id);
  CHECK(a.single_node()->store_host == "127.0.0.1");
  CHECK(a.single_node()->store_port == 0);
}

TEST_CASE("nnodes=1 without an endpoint behaves like standalone") {
  launch_options o = standalone_options();
  o.standalone = false;
  o.rdzv_id.value = "myjob";
  launch_config c = resolve_launch_config(o, {});
  CHECK(c.single_node());
  CHECK(c.agent.spec.run_id == "myjob");
  CHECK(c.single_node()->store_port == 0);
  o.master_port.value = 29555;
  o.master_port.source = "command line";
  CHECK(resolve_launch_config(o, {}).single_node()->store_port == 29555);
}

TEST_CASE("the single-node store serves only its user unless told otherwise") {
  launch_options o = standalone_options();
  CHECK(resolve_launch_config(o, {}).single_node()->store_access.same_user_only);
  o.standalone = false;  // nnodes=1 without an endpoint: the same store
  CHECK(resolve_launch_config(o, {}).single_node()->store_access.same_user_only);
  o.store_allow_any_user = true;
  CHECK_FALSE(resolve_launch_config(o, {}).single_node()->store_access.same_user_only);
  o.store_allow_networks = "10.0.0.0/8";
  auto c = resolve_launch_config(o, {});
  REQUIRE(c.warnings.size() == 1);
  CHECK_THAT(c.warnings[0], Catch::Contains("--store-allow-networks has no effect"));
}

TEST_CASE("a multi-node store takes the allow-list and no same-user rule") {
  launch_options o = standalone_options();
  o.standalone = false;
  o.nnodes.value = "2";
  o.rdzv_endpoint.value = "192.0.2.1:1234";
  o.store_allow_networks = "10.0.0.0/8,fd00::/8";
  auto c = resolve_launch_config(o, {});
  REQUIRE(c.multi_node());
  const auto& access = c.multi_node()->rendezvous.store_access;
  CHECK_FALSE(access.same_user_only);
  REQUIRE(access.allowed_networks.size() == 2);
  CHECK(access.allowed_networks[1].text == "fd00::/8");
  CHECK(c.warnings.empty());
  o.store_allow_networks = "10.0.0.0/8;fd00::/8";
  CHECK_THROWS_WITH(resolve_launch_config(o, {}),
                    Catch::StartsWith("--store-allow-networks: '10.0.0.0/8;fd00::/8' is not"));
}

TEST_CASE("an endpoint means c10d rendezvous, and the endpoint's node hosts the store") {
  launch_options o = standalone_options();
  o.standalone = false;
  o.nnodes.value = "2:4";
  o.rdzv_endpoint.value = "127.0.0.1";
  o.rdzv_id.value = "job7";
  o.rdzv_conf = "join_timeout=12, last_call_timeout=3,keep_alive_interval=0.5";
  auto c = resolve_launch_config(o, {});
  REQUIRE(c.multi_node());
  CHECK_FALSE(c.single_node());
  CHECK(c.agent.spec.run_id == "job7");
  const auto& r = c.multi_node()->rendezvous;
  CHECK(c.multi_node()->backend == "c10d");
  CHECK(r.endpoint_port == 29400);  // c10d's default port
  CHECK(r.min_nodes == 2);
  CHECK(r.max_nodes == 4);
  CHECK(r.host_store);  // 127.0.0.1 is this machine
  CHECK(r.join_timeout == std::chrono::seconds(12));
  CHECK(r.last_call_timeout == std::chrono::seconds(3));
  CHECK(r.keep_alive_interval == std::chrono::milliseconds(500));
  CHECK(r.fixed_rank == -1);
  CHECK(r.fresh_worker_store);  // a new store for each round's workers

  o.rdzv_endpoint.value = "192.0.2.1:1234";  // TEST-NET: never this machine
  auto other = resolve_launch_config(o, {});
  CHECK_FALSE(other.multi_node()->rendezvous.host_store);
  CHECK(other.multi_node()->rendezvous.endpoint_port == 1234);
  o.rdzv_conf = "is_host=1";
  CHECK(resolve_launch_config(o, {}).multi_node()->rendezvous.host_store);
}

TEST_CASE("without an endpoint, several nodes use the static backend") {
  launch_options o = standalone_options();
  o.standalone = false;
  o.nnodes.value = "3";
  o.node_rank.value = 2;
  o.master_addr.value = "10.0.0.1";
  o.master_port.value = 29555;
  auto c = resolve_launch_config(o, {});
  REQUIRE(c.multi_node());
  const auto& r = c.multi_node()->rendezvous;
  CHECK(c.multi_node()->backend == "static");
  CHECK(r.fixed_rank == 2);
  CHECK(r.endpoint_host == "10.0.0.1");
  CHECK(r.endpoint_port == 29555);
  CHECK_FALSE(r.fresh_worker_store);  // MASTER_PORT stays --master-port
  CHECK_FALSE(r.host_store);  // node rank 0 hosts
  o.node_rank.value = 0;
  CHECK(resolve_launch_config(o, {}).multi_node()->rendezvous.host_store);
}

TEST_CASE("multi-node mistakes get one-line usage errors") {
  launch_options o = standalone_options();
  o.standalone = false;
  o.nnodes.value = "2";
  o.node_rank.value = 2;
  CHECK_THROWS_WITH(resolve_launch_config(o, {}), Catch::Contains("--node-rank=2 is not in 0..1"));
  o.node_rank.value = 0;
  o.nnodes.value = "1:2";
  CHECK_THROWS_WITH(resolve_launch_config(o, {}), Catch::Contains("needs --rdzv-backend=c10d"));
  o.rdzv_backend.value = "c10d";
  o.rdzv_backend.source = "command line";
  CHECK_THROWS_WITH(resolve_launch_config(o, {}), Catch::Contains("needs --rdzv-endpoint"));
  o.rdzv_endpoint.value = "h:29400";
  o.rdzv_conf = "bogus=1";
  CHECK_THROWS_WITH(resolve_launch_config(o, {}), Catch::Contains("unknown key 'bogus'"));
  o.rdzv_conf = "cas_backoff_max_seconds=0.5";  // torchrun 2.15's; checked, no effect
  CHECK_NOTHROW(resolve_launch_config(o, {}));
  for (const char* bad : {"cas_backoff_max_seconds=-1", "cas_backoff_max_seconds=nan",
                          "cas_backoff_max_seconds=soon"}) {
    o.rdzv_conf = bad;
    CHECK_THROWS_WITH(resolve_launch_config(o, {}),
                      Catch::Contains("--rdzv-conf cas_backoff_max_seconds"));
  }
  o.rdzv_conf = "join_timeout=soon";
  CHECK_THROWS_WITH(resolve_launch_config(o, {}),
                    Catch::Contains("--rdzv-conf join_timeout: 'soon' is not a number of seconds"));
  o.rdzv_conf = "";
  o.rdzv_backend.value = "zookeeper";
  CHECK_THROWS_WITH(resolve_launch_config(o, {}),
                    Catch::Contains("not one of c10d, etcd-v3, static"));
  o.rdzv_backend.value = "etcd";
  o.rdzv_endpoint.value = "";
  CHECK_THROWS_WITH(resolve_launch_config(o, {}), Catch::Contains("etcd cluster's members"));
}

TEST_CASE("every numeric rdzv-conf key refuses bad values with its name and range") {
  launch_options o = standalone_options();
  o.standalone = false;
  o.nnodes.value = "1:2";
  o.rdzv_backend.value = "c10d";
  o.rdzv_backend.source = "command line";
  o.rdzv_endpoint.value = "192.0.2.1:29400";
  const std::string positive = "is not a number of seconds from 0.001 to 315360000 (10 years)";
  const std::vector<std::pair<std::string, std::string>> table = {
      {"keep_alive_interval=0", "--rdzv-conf keep_alive_interval: '0' " + positive},
      {"keep_alive_interval=0.0001", "--rdzv-conf keep_alive_interval: '0.0001' " + positive},
      {"join_timeout=1e20", "--rdzv-conf join_timeout: '1e20' " + positive},
      {"join_timeout=nan", "--rdzv-conf join_timeout: 'nan' " + positive},
      {"timeout=-1", "--rdzv-conf timeout: '-1' " + positive},
      {"last_call_timeout=inf", "--rdzv-conf last_call_timeout: 'inf' " + positive},
      {"close_timeout=0", "--rdzv-conf close_timeout: '0' " + positive},
      {"exit_barrier_timeout=5s", "--rdzv-conf exit_barrier_timeout: '5s' " + positive},
      {"read_timeout=abc", "--rdzv-conf read_timeout: 'abc' " + positive},
      {"heartbeat_timeout=0x10", "--rdzv-conf heartbeat_timeout: '0x10' " + positive},
      {"keep_alive_max_attempt=0",
       "--rdzv-conf keep_alive_max_attempt: '0' is not a whole number from 1 to 1000000"},
      {"keep_alive_max_attempt=3.5",
       "--rdzv-conf keep_alive_max_attempt: '3.5' is not a whole number from 1 to 1000000"},
      {"keep_alive_max_attempt=1e20",
       "--rdzv-conf keep_alive_max_attempt: '1e20' is not a whole number from 1 to 1000000"},
  };
  for (const auto& [conf, message] : table) {
    INFO(conf);
    o.rdzv_conf = conf;
    CHECK_THROWS_WITH(resolve_launch_config(o, {}), message);
  }
  o.rdzv_conf = "keep_alive_interval=0.5,join_timeout=1e3,keep_alive_max_attempt= 7";
  auto r = resolve_launch_config(o, {}).multi_node()->rendezvous;
  CHECK(r.keep_alive_interval == std::chrono::milliseconds(500));
  CHECK(r.join_timeout == std::chrono::seconds(1000));
  CHECK(r.keep_alive_max_attempt == 7);
}

TEST_CASE("counts and the stop timeout are checked when the config is resolved") {
  CHECK_THROWS_WITH(parse_nproc("0", {}), "--nproc-per-node: '0' is not a whole number from 1 to "
                                      "4096, 'auto', 'cpu', 'gpu' or 'xpu'");
  CHECK_THROWS_WITH(parse_nproc("4097", {}), Catch::StartsWith("--nproc-per-node: '4097'"));
  CHECK_THROWS_WITH(parse_nproc("99999999999999999999", {}),
                    Catch::StartsWith("--nproc-per-node: '99999999999999999999'"));
  CHECK(parse_nproc(" 4", {}) == 4);
  CHECK_THROWS_WITH(parse_nnodes("100001"),
                    "--nnodes: '100001' is not a whole number from 1 to 100000");
  CHECK_THROWS_WITH(parse_nnodes("1:1e3"),
                    "--nnodes MAX: '1e3' is not a whole number from 1 to 100000");
  CHECK_THROWS_WITH(parse_nnodes("3:1"), Catch::Contains("MIN > MAX"));
  launch_options o = standalone_options();
  o.stop_timeout = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(resolve_launch_config(o, {}), Catch::StartsWith("--stop-timeout: 'nan'"));
  o.stop_timeout = 1e300;
  CHECK_THROWS_WITH(resolve_launch_config(o, {}), Catch::StartsWith("--stop-timeout:"));
  o.stop_timeout = 2.5;
  CHECK(resolve_launch_config(o, {}).agent.stop_timeout == std::chrono::milliseconds(2500));
  o.max_restarts = -1;
  CHECK_THROWS_WITH(resolve_launch_config(o, {}), Catch::StartsWith("--max-restarts: '-1'"));
}

TEST_CASE("a bad count from a PET_ variable names the variable") {
  launch_options o = standalone_options();
  o.nnodes.value = "0";
  o.nnodes.source = "PET_NNODES";
  CHECK_THROWS_WITH(resolve_launch_config(o, {}),
                    "PET_NNODES (--nnodes): '0' is not a whole number from 1 to 100000");
  o.nnodes.source = "command line";
  CHECK_THROWS_WITH(resolve_launch_config(o, {}),
                    "--nnodes: '0' is not a whole number from 1 to 100000");
}

TEST_CASE("OMP_NUM_THREADS: a warning when it is unset and there are several workers") {
  launch_options o = standalone_options();
  o.nproc_per_node.value = "2";
  CHECK(resolve_launch_config(o, {}).warnings.size() == 1);
  CHECK(resolve_launch_config(o, {{"OMP_NUM_THREADS", "4"}}).warnings.empty());
  o.nproc_per_node.value = "1";
  CHECK(resolve_launch_config(o, {}).warnings.empty());
}

TEST_CASE("the dry-run JSON has the per-rank environment") {
  launch_options o = standalone_options();
  o.nproc_per_node.value = "3";
  o.max_restarts = 2;
  launch_config c = resolve_launch_config(o, {});
  nlohmann::json j = to_json(c, {});
  CHECK(j["nproc_per_node"] == 3);
  CHECK(j["nnodes"]["min"] == 1);
  CHECK(j["rdzv_endpoint"] == "127.0.0.1:0");
  CHECK(j["run_id"] == c.agent.spec.run_id);
  REQUIRE(j["workers"].size() == 3);
  CHECK(j["workers"][2]["env"]["LOCAL_RANK"] == "2");
  CHECK(j["workers"][2]["env"]["LOCAL_WORLD_SIZE"] == "3");
  CHECK(j["workers"][0]["env"]["TORCHELASTIC_MAX_RESTARTS"] == "2");
  // torchrun 2.x's set: the TORCH_ name only, and the signals it handles.
  CHECK(j["workers"][0]["env"]["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
  CHECK_FALSE(j["workers"][0]["env"].contains("NCCL_ASYNC_ERROR_HANDLING"));
  CHECK(j["workers"][0]["env"]["TORCHELASTIC_SIGNALS_TO_HANDLE"] ==
        "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  CHECK(j["argv"][0] == "python3");
}

TEST_CASE("the workers get the signals-to-handle text as given") {
  launch_options o = standalone_options();
  o.signals_to_handle = "SIGUSR1, SIGUSR2";
  launch_config c = resolve_launch_config(o, {});
  CHECK(c.agent.spec.signals_to_handle == "SIGUSR1, SIGUSR2");
  CHECK(dtrun::agent::static_worker_env(c.agent.spec, 0, {})
            .at("TORCHELASTIC_SIGNALS_TO_HANDLE") == "SIGUSR1, SIGUSR2");
}

TEST_CASE("log flags are resolved into the config and shown by the dry run") {
  launch_options o = standalone_options();
  o.nproc_per_node.value = "2";
  o.redirects = "1";
  o.tee = "1:2";
  launch_config c = resolve_launch_config(o, {});
  CHECK(c.agent.logs.routes(1).err == dtrun::agent::stream_route::file_and_console);
  nlohmann::json j = to_json(c, {});
  CHECK(j["logs"]["workers"][1]["stderr"] == "file+console");
  CHECK(j["logs"]["workers"][0]["stdout"] == "file");
  o.tee = "4";
  CHECK_THROWS_AS(resolve_launch_config(o, {}), usage_error);
}

TEST_CASE("torchrun 2.13's TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT is said to be ignored") {
  launch_options o = standalone_options();
  auto c = resolve_launch_config(o, {{"TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT", "60"}});
  REQUIRE(c.warnings.size() == 1);
  CHECK_THAT(c.warnings[0],
             Catch::StartsWith("TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT=60 is ignored") &&
                 Catch::Contains("--hang-timeout"));
  // torch turns the check off for these; so there is nothing to say.
  for (const char* off : {"0", "-5", "soon", ""}) {
    CHECK(resolve_launch_config(o, {{"TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT", off}})
              .warnings.empty());
  }
}
