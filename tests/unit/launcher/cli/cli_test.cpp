#include <catch2/catch.hpp>

#include "launcher/cli/cli.h"
#include "launcher/cli/usage_hints.h"
#include "tests/unit/launcher/env_guard.h"

using namespace dtrun;  // usage_error and the number checks (rendezvous/base)
using namespace dtrun::launcher;

namespace {

launch_options parse(std::vector<std::string> args) { return parse_command_line(args).options; }

}  // namespace

TEST_CASE("both spellings of multi-word flags are accepted") {
  CHECK(parse({"--nproc-per-node=4", "x.py"}).nproc_per_node.value.text() == "4");
  CHECK(parse({"--nproc_per_node=4", "x.py"}).nproc_per_node.value.text() == "4");
  CHECK(parse({"--nproc_per_node", "3", "x.py"}).nproc_per_node.value.text() == "3");
  CHECK(parse({"--max_restarts", "2", "x.py"}).max_restarts == 2);
  CHECK(parse({"--max-restarts=2", "x.py"}).max_restarts == 2);
  CHECK(parse({"--rdzv_backend=c10d", "x.py"}).rdzv_backend.value == "c10d");
  CHECK(parse({"--no_python", "prog"}).no_python);
  CHECK(parse({"--no-python", "prog"}).no_python);
  CHECK(parse({"--master_port=1234", "x.py"}).master_port.value == 1234);
}

TEST_CASE("torchrun's flags are all accepted") {
  launch_options o = parse({"--standalone", "--nnodes=1:1", "--nproc-per-node=auto",
                            "--max-restarts=1", "--monitor-interval=5", "--role=trainer",
                            "--run-path", "--local-addr=10.0.0.1", "--rdzv-backend=c10d",
                            "--rdzv-endpoint=h:1", "--rdzv-id=job", "--rdzv-conf=a=1,b=2",
                            "--node-rank=0", "--master-addr=h", "--master-port=2",
                            "--start-method=fork", "--stop-timeout=7",
                            "--signals-to-handle=SIGUSR1", "--log-dir=/tmp/l", "x.py"});
  CHECK(o.standalone);
  CHECK(o.nnodes.value.text() == "1:1");
  CHECK(o.role == "trainer");
  CHECK(o.run_path);
  CHECK(o.local_addr == "10.0.0.1");
  CHECK(o.rdzv_conf == "a=1,b=2");
  CHECK(o.stop_timeout == 7.0);
  CHECK(o.monitor_interval == 5.0);
  CHECK(o.signals_to_handle == "SIGUSR1");
  CHECK(o.master_port.given());
  CHECK(o.script == "x.py");
}

TEST_CASE("torchrun 2.14's --log-line-prefix-template is taken, both spellings") {
  CHECK(parse({"--log-line-prefix-template=${hostname}:${rank}: ", "x.py"})
            .log_line_prefix_template == "${hostname}:${rank}: ");
  CHECK(parse({"--log_line_prefix_template", "[$rank]", "x.py"}).log_line_prefix_template ==
        "[$rank]");
}

TEST_CASE("torchrun 2.14's --print-completion is refused in one line, script or not") {
  for (const char* flag : {"--print-completion", "--print_completion"}) {
    CHECK_THROWS_WITH(parse({flag, "bash", "x.py"}), print_completion_refusal);
    CHECK_THROWS_WITH(parse({flag, "zsh"}), print_completion_refusal);
  }
  // Not one of torchrun's shells: the choice is refused first, as argparse.
  CHECK_THROWS_WITH(parse({"--print-completion", "fish", "x.py"}),
                    Catch::Contains("--print-completion") && Catch::Contains("fish"));
}

TEST_CASE("shutdown-timeout is an alias of stop-timeout") {
  CHECK(parse({"--shutdown-timeout=3", "x.py"}).stop_timeout == 3.0);
  CHECK(parse({"--shutdown_timeout", "4", "x.py"}).stop_timeout == 4.0);
  CHECK(parse({"x.py"}).stop_timeout == 30.0);
}

TEST_CASE("everything from the script on belongs to the script") {
  launch_options o = parse({"--standalone", "train.py", "--lr", "3", "--nproc-per-node=x"});
  CHECK(o.script == "train.py");
  CHECK(o.script_args == std::vector<std::string>{"--lr", "3", "--nproc-per-node=x"});
  CHECK(o.nproc_per_node.value.text() == "1");
}

TEST_CASE("a flag's value is not mistaken for the script") {
  launch_options o = parse({"--nproc-per-node", "2", "--role", "r", "-m", "pkg.mod", "a"});
  CHECK(o.nproc_per_node.value.text() == "2");
  CHECK(o.role == "r");
  CHECK(o.module);
  CHECK(o.script == "pkg.mod");
  CHECK(o.script_args == std::vector<std::string>{"a"});
}

TEST_CASE("an empty value after the equals sign does not take the next flag") {
  // argparse reads "--role=" as role ""; the next token stays a flag.
  launch_options o = parse({"--role=", "--nproc-per-node=2", "--dry-run", "x.py"});
  CHECK(o.role.empty());
  CHECK(o.nproc_per_node.value.text() == "2");
  CHECK(o.dry_run);
  CHECK(o.script == "x.py");
  CHECK(parse({"--log-dir=", "--standalone", "x.py"}).standalone);
  CHECK_THROWS_WITH(parse({"--max-restarts=", "--standalone", "x.py"}),
                    Catch::Contains("--max-restarts: '' is not a whole number"));
}

TEST_CASE("a flag missing its value does not take the next flag as it") {
  // argparse: "expected one argument"; dtrun took --dry-run as the role
  // and ran x.py for real.
  CHECK_THROWS_WITH(parse({"--role", "--dry-run", "x.py"}), Catch::Contains("--role: needs a value"));
  CHECK_THROWS_WITH(parse({"--nproc-per-node", "--version", "x.py"}),
                    Catch::Contains("--nproc-per-node: needs a value"));
  CHECK_THROWS_WITH(parse({"-r", "-t", "3", "x.py"}), Catch::Contains("needs a value"));
  // A negative number is a value, as in argparse (then refused by range).
  CHECK_THROWS_WITH(parse({"--max-restarts", "-1", "x.py"}),
                    Catch::Contains("--max-restarts: '-1' is not a whole number"));
  CHECK(parse({"--role", "-", "x.py"}).role == "-");
}

TEST_CASE("a double dash separates dtrun's flags from the program") {
  launch_options o = parse({"--standalone", "--", "--weird-name", "-x", "--", "y"});
  CHECK(o.script == "--weird-name");
  CHECK(o.script_args == std::vector<std::string>{"-x", "--", "y"});
}

TEST_CASE("PET_ variables are defaults and the command line wins") {
  env_guard nproc("PET_NPROC_PER_NODE", "3");
  env_guard restarts("PET_MAX_RESTARTS", "5");
  env_guard standalone("PET_STANDALONE", "1");
  launch_options from_env = parse({"x.py"});
  CHECK(from_env.nproc_per_node.value.text() == "3");
  CHECK(from_env.max_restarts == 5);
  CHECK(from_env.standalone);
  launch_options overridden = parse({"--nproc-per-node=2", "--max_restarts=0", "x.py"});
  CHECK(overridden.nproc_per_node.value.text() == "2");
  CHECK(overridden.max_restarts == 0);
}

TEST_CASE("boolean PET_ variables take 0 and 1") {
  env_guard standalone("PET_STANDALONE", "0");
  env_guard no_python("PET_NO_PYTHON", "1");
  launch_options o = parse({"prog"});
  CHECK_FALSE(o.standalone);
  CHECK(o.no_python);
}

TEST_CASE("PET_MASTER_PORT counts as given") {
  env_guard port("PET_MASTER_PORT", "4000");
  launch_options o = parse({"x.py"});
  CHECK(o.master_port.value == 4000);
  CHECK(o.master_port.given());
  CHECK(o.master_port.source == "PET_MASTER_PORT");
}

TEST_CASE("the master port is not given by default") {
  env_guard port("PET_MASTER_PORT", std::nullopt);
  CHECK_FALSE(parse({"x.py"}).master_port.given());
}

TEST_CASE("PET_SHUTDOWN_TIMEOUT feeds the stop timeout") {
  env_guard stop("PET_STOP_TIMEOUT", std::nullopt);
  env_guard shutdown("PET_SHUTDOWN_TIMEOUT", "9");
  CHECK(parse({"x.py"}).stop_timeout == 9.0);
  CHECK(parse({"--stop-timeout=2", "x.py"}).stop_timeout == 2.0);
}

TEST_CASE("DTRUN_PYTHON picks the interpreter unless --python does") {
  env_guard python("DTRUN_PYTHON", "/opt/py");
  CHECK(parse({"x.py"}).python.value == "/opt/py");
  CHECK(parse({"--python=/usr/bin/python3", "x.py"}).python.value == "/usr/bin/python3");
}

TEST_CASE("usage errors are one line") {
  auto error_of = [](std::vector<std::string> args) {
    try {
      parse_command_line(args);
    } catch (const usage_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string unknown = error_of({"--bogus", "x.py"});
  CHECK(unknown.find("unrecognized arguments: --bogus") != std::string::npos);
  CHECK(unknown.find('\n') == std::string::npos);
  CHECK(error_of({"--standalone"}).find("no training script") != std::string::npos);
  CHECK(error_of({"--max-restarts=abc", "x.py"}).find("max-restarts") != std::string::npos);
  CHECK(error_of({"--start-method=thread", "x.py"}) != "");
}

TEST_CASE("every numeric flag refuses bad values with its name and range") {
  struct bad_value {
    std::string arg;
    std::string message;
  };
  const std::string seconds = "is not a number of seconds from 0 to 315360000 (10 years)";
  const std::vector<bad_value> table = {
      {"--max-restarts=-1", "--max-restarts: '-1' is not a whole number from 0 to 1000000"},
      {"--max-restarts=99999999999999999999",
       "--max-restarts: '99999999999999999999' is not a whole number from 0 to 1000000"},
      {"--max-restarts=1e3", "--max-restarts: '1e3' is not a whole number from 0 to 1000000"},
      {"--max-restarts=0x10", "--max-restarts: '0x10' is not a whole number from 0 to 1000000"},
      {"--max-restarts=1000001", "--max-restarts: '1000001' is not a whole number"},
      {"--max_restarts=2.5", "--max-restarts: '2.5' is not a whole number"},
      {"--stop-timeout=nan", "--stop-timeout: 'nan' " + seconds},
      {"--stop-timeout=inf", "--stop-timeout: 'inf' " + seconds},
      {"--stop-timeout=1e300", "--stop-timeout: '1e300' " + seconds},
      {"--stop-timeout=-1", "--stop-timeout: '-1' " + seconds},
      {"--stop-timeout=5s", "--stop-timeout: '5s' " + seconds},
      {"--shutdown-timeout=nan", "--shutdown-timeout: 'nan' " + seconds},
      {"--monitor-interval=-0.1", "--monitor-interval: '-0.1' " + seconds},
      {"--monitor-interval=inf", "--monitor-interval: 'inf' " + seconds},
      {"--master-port=65536", "--master-port: '65536' is not a whole number from 0 to 65535"},
      {"--master-port=-1", "--master-port: '-1' is not a whole number from 0 to 65535"},
      {"--master-port=0x50", "--master-port: '0x50' is not a whole number from 0 to 65535"},
      {"--node-rank=-1", "--node-rank: '-1' is not a whole number from 0 to 99999"},
      {"--node-rank=4294967296", "--node-rank: '4294967296' is not a whole number"},
      {"--max-restarts=", "--max-restarts: '' is not a whole number from 0 to 1000000"},
  };
  for (const auto& [arg, message] : table) {
    INFO(arg);
    try {
      parse_command_line({arg, "x.py"});
      FAIL("accepted");
    } catch (const usage_error& e) {
      std::string what = e.what();
      CHECK(what.rfind(message, 0) == 0);
      CHECK(what.find('\n') == std::string::npos);
    }
  }
}

TEST_CASE("numeric flags take plain and torchrun-style values") {
  CHECK(parse({"--max-restarts= 3", "x.py"}).max_restarts == 3);
  CHECK(parse({"--max-restarts=+3", "x.py"}).max_restarts == 3);
  CHECK(parse({"--stop-timeout=1e1", "x.py"}).stop_timeout == 10.0);
  CHECK(parse({"--stop-timeout=0", "x.py"}).stop_timeout == 0.0);
  CHECK(parse({"--stop-timeout=0.25", "x.py"}).stop_timeout == 0.25);
  CHECK(parse({"--master-port=0", "x.py"}).master_port.value == 0);
  CHECK(parse({"--master-port=65535", "x.py"}).master_port.value == 65535);
}

TEST_CASE("a bad number from a PET_ variable names the variable") {
  env_guard restarts("PET_MAX_RESTARTS", "-3");
  CHECK_THROWS_WITH(parse({"x.py"}),
                    "PET_MAX_RESTARTS (--max-restarts): '-3' is not a whole number from 0 to "
                    "1000000");
  // The command line wins, and its value is the one named.
  CHECK_THROWS_WITH(parse({"--max-restarts=-2", "x.py"}),
                    Catch::StartsWith("--max-restarts: '-2'"));
  CHECK(parse({"--max-restarts=2", "x.py"}).max_restarts == 2);
}

TEST_CASE("PET_SHUTDOWN_TIMEOUT is checked like the flag") {
  env_guard stop("PET_STOP_TIMEOUT", std::nullopt);
  for (const char* bad : {"nan", "1e300", "-5", "soon"}) {
    env_guard shutdown("PET_SHUTDOWN_TIMEOUT", bad);
    CHECK_THROWS_WITH(parse({"x.py"}),
                      "PET_SHUTDOWN_TIMEOUT: '" + std::string(bad) +
                          "' is not a number of seconds from 0 to 315360000 (10 years)");
  }
}

TEST_CASE("help is reported, with flags grouped") {
  parse_result r = parse_command_line({"--help"});
  CHECK(r.help);
  CHECK(r.help_text.find("Rendezvous:") != std::string::npos);
  CHECK(r.help_text.find("--nproc-per-node") != std::string::npos);
  // After the script, --help belongs to the script.
  parse_result s = parse_command_line({"x.py", "--help"});
  CHECK_FALSE(s.help);
  CHECK(s.options.script_args == std::vector<std::string>{"--help"});
}

TEST_CASE("torchrun 2 flags are accepted in both spellings and from PET_ variables") {
  launch_options o = parse({"--virtual-local-rank", "--duplicate-stdout-filters=loss,step",
                            "--duplicate_stderr_filters", "Error", "--event-log-handler=console",
                            "--logs_specs=default", "x.py"});
  CHECK(o.virtual_local_rank);
  CHECK(o.duplicate_stdout_filters == "loss,step");
  CHECK(o.duplicate_stderr_filters == "Error");
  CHECK(o.event_log_handler == "console");
  CHECK(o.logs_specs == "default");
  CHECK(parse({"--virtual_local_rank", "x.py"}).virtual_local_rank);
  CHECK(parse({"x.py"}).event_log_handler == "null");
  {
    env_guard v("PET_VIRTUAL_LOCAL_RANK", "1");
    env_guard d("PET_DUPLICATE_STDOUT_FILTERS", "a,,b");
    env_guard h("PET_EVENT_LOG_HANDLER", "console");
    launch_options e = parse({"x.py"});
    CHECK(e.virtual_local_rank);
    CHECK(e.duplicate_stdout_filters == "a,,b");
    CHECK(e.event_log_handler == "console");
  }
  // As torchrun, --logs-specs has no PET_ variable.
  env_guard specs("PET_LOGS_SPECS", "custom");
  CHECK(parse({"x.py"}).logs_specs.empty());
}

TEST_CASE("TORCH_ELASTIC_SHUTDOWN_TIMEOUT is the stop timeout's last default") {
  env_guard stop("PET_STOP_TIMEOUT", std::nullopt);
  env_guard shutdown("PET_SHUTDOWN_TIMEOUT", std::nullopt);
  env_guard torch_env("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "120");
  CHECK(parse({"x.py"}).stop_timeout == 120.0);
  CHECK(parse({"--shutdown-timeout=5", "x.py"}).stop_timeout == 5.0);
  CHECK(parse({"--stop_timeout=6", "x.py"}).stop_timeout == 6.0);
  {
    env_guard pet("PET_SHUTDOWN_TIMEOUT", "7");
    CHECK(parse({"x.py"}).stop_timeout == 7.0);
  }
  {
    env_guard pet("PET_STOP_TIMEOUT", "8");
    CHECK(parse({"x.py"}).stop_timeout == 8.0);
  }
  env_guard bad("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "-1");
  CHECK_THROWS_WITH(parse({"x.py"}),
                    "TORCH_ELASTIC_SHUTDOWN_TIMEOUT: '-1' is not a number of seconds from 0 to "
                    "315360000 (10 years)");
}

TEST_CASE("help lists torchrun 2 flags") {
  std::string help = parse_command_line({"--help"}).help_text;
  for (const char* flag : {"--virtual-local-rank", "--duplicate-stdout-filters",
                           "--duplicate-stderr-filters", "--event-log-handler", "--logs-specs",
                           "--shutdown-timeout", "--local-addr", "--master-port"}) {
    CAPTURE(flag);
    CHECK(help.find(flag) != std::string::npos);
  }
}

TEST_CASE("the ssh launch's own flags are not passed on to the remote dtrun") {
  launch_options o = parse({"--hosts", "a,b:2", "--ssh=ssh -p 2", "--nproc-per-node", "2",
                            "--export", "X,Y=1", "--remote-dtrun=/d", "--dry-run", "--tee=3",
                            "--hostfile", "f", "t.py", "--hosts", "x"});
  CHECK(o.hosts.value == "a,b:2");
  CHECK(o.ssh == "ssh -p 2");
  CHECK(o.export_vars == "X,Y=1");
  CHECK(o.remote_dtrun == "/d");
  CHECK(o.hostfile.value == "f");
  CHECK(o.remote_args == std::vector<std::string>{"--nproc-per-node", "2", "--tee=3"});
  // The script's own arguments are the script's, "--hosts" included.
  CHECK(o.script_args == std::vector<std::string>{"--hosts", "x"});
  CHECK(o.hosts.given());
  CHECK(parse({"--hosts=", "t.py"}).hosts.given());
}

TEST_CASE("edit distance counts a swap of neighbours as one edit") {
  CHECK(dtrun::launcher::edit_distance("status", "status") == 0);
  CHECK(dtrun::launcher::edit_distance("statuss", "status") == 1);
  CHECK(dtrun::launcher::edit_distance("stauts", "status") == 1);
  CHECK(dtrun::launcher::edit_distance("", "help") == 4);
}

TEST_CASE("a typo of a flag or subcommand finds what it meant, a far word nothing") {
  using dtrun::launcher::nearest_word;
  const std::vector<std::string> flags = {"--nnodes", "--nproc-per-node", "--nproc_per_node",
                                          "--max-restarts", "--standalone"};
  CHECK(nearest_word("--nproc-per-nodes", flags) == "--nproc-per-node");
  CHECK(nearest_word("--nprocs", flags) == "--nproc-per-node");
  CHECK(nearest_word("--max_restart", flags) == "--max-restarts");
  CHECK_FALSE(nearest_word("--bogus", flags));
  CHECK_FALSE(nearest_word("--nnodes", flags));  // not a typo: the flag itself
  CHECK(nearest_word("statuss", dtrun::launcher::subcommands()) == "status");
  CHECK_FALSE(nearest_word("train", dtrun::launcher::subcommands()));
  CHECK_FALSE(nearest_word("x", dtrun::launcher::subcommands()));
}

TEST_CASE("python named where the script goes is recognised") {
  using dtrun::launcher::names_a_python_interpreter;
  CHECK(names_a_python_interpreter("python"));
  CHECK(names_a_python_interpreter("python3.11"));
  CHECK(names_a_python_interpreter("/opt/venv/bin/python3"));
  CHECK_FALSE(names_a_python_interpreter("python_train.py"));
  CHECK_FALSE(names_a_python_interpreter("train.py"));
}

TEST_CASE("torchrun flags after the script are found, generic script flags are not") {
  using dtrun::launcher::launcher_flags_among;
  CHECK(launcher_flags_among({"--standalone", "--lr=3", "--nproc_per_node=2", "--standalone"}) ==
        std::vector<std::string>{"--standalone", "--nproc_per_node"});
  CHECK(launcher_flags_among({"--verbose", "--log-dir", "x", "-v", "--role=a"}).empty());
}

TEST_CASE("a flag's separate value is never taken for the script, and is named when it was") {
  CHECK_THROWS_WITH(parse({"--standalone", "--nproc-per-node", "train.py"}),
                    "--nproc-per-node took the script 'train.py' as its value, so no script is "
                    "left; give --nproc-per-node its value first (--nproc-per-node=VALUE "
                    "train.py)");
}
