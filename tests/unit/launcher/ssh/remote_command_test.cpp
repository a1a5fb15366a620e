#include <catch2/catch.hpp>

#include <string>

#include "launcher/cli/cli.h"
#include "launcher/ssh/remote_command.h"
#include "launcher/ssh/ssh_plan.h"
#include "tests/unit/launcher/usage_error_of.h"

using namespace dtrun;  // usage_error and the number checks (rendezvous/base)
using namespace dtrun::launcher;
using dtrun::launcher::testing::usage_error_of;
using words = std::vector<std::string>;

namespace {

}  // namespace

TEST_CASE("shell_quote makes one word of anything for a POSIX shell") {
  CHECK(shell_quote("") == "''");
  CHECK(shell_quote("plain") == "'plain'");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_quote("$HOME `x` \"y\" a b;c|d&e\n") == "'$HOME `x` \"y\" a b;c|d&e\n'");
}

TEST_CASE("shell_join quotes only the words that need it") {
  CHECK(shell_join({"ssh", "-o", "BatchMode=yes", "n1", "a b", "it's"}) ==
        "ssh -o BatchMode=yes n1 'a b' 'it'\\''s'");
  CHECK(shell_join({""}) == "''");
}

TEST_CASE("shell_join writes control characters as $'...' escapes, one line per command") {
  // What --dry-run prints of an exported value with a newline or an
  // escape sequence: no raw newline, no ESC, no UTF-8 C1 control.
  CHECK(shell_join({"env", "A=x\ny"}) == "env $'A=x\\ny'");
  CHECK(shell_join({"\x1b[31mred\t'q'\\"}) == "$'\\x1b[31mred\\t\\'q\\'\\\\'");
  CHECK(shell_join({"a\xc2\x9b" "b", "\x7f"}) == "$'a\\xc2\\x9bb' $'\\x7f'");
  // Printable UTF-8 stays as it is (single-quoted).
  CHECK(shell_join({"caf\xc3\xa9 x"}) == "'caf\xc3\xa9 x'");
}

TEST_CASE("the ssh flag is split into words as a shell would") {
  CHECK(split_ssh_command("ssh") == words{"ssh"});
  CHECK(split_ssh_command("  ssh  -p 2222 ") == words{"ssh", "-p", "2222"});
  CHECK(split_ssh_command("ssh -i '/k/my key' -o \"UserKnownHostsFile=/a b\"") ==
        words{"ssh", "-i", "/k/my key", "-o", "UserKnownHostsFile=/a b"});
  CHECK(split_ssh_command("ssh -o a\\ b \"x\\\"y\"") == words{"ssh", "-o", "a b", "x\"y"});
  CHECK(split_ssh_command("ssh ''") == words{"ssh", ""});
  CHECK(usage_error_of([] { split_ssh_command("ssh 'x"); }) == "--ssh: unterminated ' quote in 'ssh 'x'");
  CHECK(usage_error_of([] { split_ssh_command("  "); }) ==
        "--ssh: empty; give the ssh command and its options, e.g. --ssh 'ssh -p 2222'");
}

TEST_CASE("the remote environment: default prefixes plus --export") {
  std::map<std::string, std::string> env = {
      {"PET_NPROC_PER_NODE", "2"}, {"TORCH_SHOW_CPP_STACKTRACES", "1"},
      {"TORCHELASTIC_X", "y"},     {"NCCL_DEBUG", "INFO"},
      {"PYTHONPATH", "/a:/b"},     {"CUDA_VISIBLE_DEVICES", "0,1"},
      {"OMP_NUM_THREADS", "4"},    {"GLOO_SOCKET_IFNAME", "eth0"},
      {"HOME", "/root"},           {"PATH", "/bin"},
      {"MY_VAR", "it's"},          {"UCX_TLS", "rc"},
      {"MV2_X", "1"},              {"MLFLOW_RUN", "r"}};
  auto chosen = select_exports(env, parse_export_list("MY_VAR,NOT_SET,SET_HERE=a=b"));
  std::vector<std::pair<std::string, std::string>> expected = {
      {"CUDA_VISIBLE_DEVICES", "0,1"}, {"GLOO_SOCKET_IFNAME", "eth0"}, {"MLFLOW_RUN", "r"},
      {"MV2_X", "1"},                  {"MY_VAR", "it's"},             {"NCCL_DEBUG", "INFO"},
      {"OMP_NUM_THREADS", "4"},        {"PET_NPROC_PER_NODE", "2"},    {"PYTHONPATH", "/a:/b"},
      {"SET_HERE", "a=b"},             {"TORCHELASTIC_X", "y"},
      {"TORCH_SHOW_CPP_STACKTRACES", "1"}, {"UCX_TLS", "rc"}};
  CHECK(chosen == expected);
  CHECK(parse_export_list("A,,B,") == words{"A", "B"});
  CHECK(usage_error_of([] { parse_export_list("A,1B"); }) ==
        "--export: '1B' is not a variable name (letters, digits, '_'; VAR or VAR=value)");
  CHECK(usage_error_of([] { parse_export_list("A-B=1"); }).rfind("--export: 'A-B'", 0) == 0);
}

TEST_CASE("the remote shell command cds, sets the variables and execs, quoted where needed") {
  CHECK(remote_shell_command("/w d", {{"A", "x y"}, {"B", "it's"}}, {"/opt/dtrun", "a;b", "$X"}) ==
        "cd -- '/w d' && exec env -- 'A=x y' 'B=it'\\''s' /opt/dtrun 'a;b' '$X'");
  CHECK(remote_shell_command("/w", {}, {"/d"}) == "cd -- /w && exec /d");
  // What a POSIX shell would expand, split or glob is quoted; an empty word
  // stays a word; never $'...' (the login shell may be dash).
  CHECK(remote_shell_command("/w", {}, {"", "*", "~", "a\nb", "x=1"}) ==
        "cd -- /w && exec '' '*' '~' 'a\nb' x=1");
}

TEST_CASE("ssh's argv: the user's words, BatchMode, the target, the command") {
  CHECK(ssh_argv({"ssh", "-p", "2"}, "me@n1", "cmd") ==
        words{"ssh", "-p", "2", "-o", "BatchMode=yes", "-o", "ConnectTimeout=30", "--", "me@n1",
              "cmd"});
}

TEST_CASE("the plan: same dtrun and folder everywhere, the first host hosts the store") {
  launch_options o;
  o.remote_args = {"--nproc-per-node=2", "--max-restarts", "1"};
  o.rdzv_conf = "join_timeout=9";
  o.script = "train.py";
  o.script_args = {"--lr", "0.1 x"};
  o.hosts.value = "n1,n2:4";
  auto s = resolve_ssh_settings(o, {{"NCCL_DEBUG", "INFO"}}, "/opt/dtrun", "/work", "rid");
  CHECK(s.run_id == "rid");
  CHECK(s.remote_dtrun == "/opt/dtrun");
  auto plan = plan_ssh_launch(o, s);
  REQUIRE(plan.size() == 2);
  CHECK(plan[0].port == port_role::report);
  CHECK(plan[1].port == port_role::read);
  CHECK(plan[0].ssh_argv ==
        words{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=30", "--", "n1",
              "cd -- /work && exec env -- NCCL_DEBUG=INFO /opt/dtrun --nproc-per-node=2 "
              "--max-restarts 1 --nnodes=2 --rdzv-backend=c10d --rdzv-id=rid "
              "--rdzv-endpoint=n1:0 --rdzv-conf=join_timeout=9,is_host=1 "
              "--rdzv-port-via-stdio=report --stop-on-stdin-eof --prefix-console -- "
              "train.py --lr '0.1 x'"});
  CHECK(plan[1].ssh_argv.back() ==
        "cd -- /work && exec env -- NCCL_DEBUG=INFO /opt/dtrun --nproc-per-node=2 "
        "--max-restarts 1 --nnodes=2 --rdzv-backend=c10d --rdzv-id=rid "
        "--rdzv-endpoint=n1:0 --rdzv-conf=join_timeout=9,is_host=0 "
        "--rdzv-port-via-stdio=read --nproc-per-node=4 --stop-on-stdin-eof "
        "--prefix-console -- train.py --lr '0.1 x'");
}

TEST_CASE("the plan: a user's endpoint, run id, --ssh and --remote-dtrun are used as given") {
  launch_options o;
  o.script = "t.py";
  o.hosts.value = "me@n1,n2";
  o.rdzv_endpoint.value = "n9:1234";
  o.rdzv_id.value = "job7";
  o.ssh = "ssh -p 2222";
  o.remote_dtrun = "/usr/bin/dtrun";
  auto s = resolve_ssh_settings(o, {}, "/opt/dtrun", "/w", "rid");
  auto plan = plan_ssh_launch(o, s);
  REQUIRE(plan.size() == 2);
  CHECK(plan[0].port == port_role::none);
  CHECK(plan[0].ssh_argv ==
        words{"ssh", "-p", "2222", "-o", "BatchMode=yes", "-o", "ConnectTimeout=30", "--",
              "me@n1",
              "cd -- /w && exec /usr/bin/dtrun --nnodes=2 --rdzv-backend=c10d "
              "--rdzv-id=job7 --rdzv-endpoint=n9:1234 --stop-on-stdin-eof "
              "--prefix-console -- t.py"});
}

TEST_CASE("flags that contradict a launch over ssh are one-line errors") {
  auto err = [](auto edit) {
    launch_options o;
    o.script = "t.py";
    o.hosts.value = "a,b";
    edit(o);
    return usage_error_of([&] { resolve_ssh_settings(o, {}, "/d", "/w", "r"); });
  };
  CHECK(err([](launch_options& o) { o.hostfile.value = "f"; }) ==
        "--hosts and --hostfile: give one of them");
  CHECK(err([](launch_options& o) { o.standalone = true; }) ==
        "--standalone runs on this machine only; drop it to launch on --hosts");
  CHECK(err([](launch_options& o) {
          o.nnodes.value = "3";
          o.nnodes.source = "command line";
        }) == "--nnodes=3 does not match the 2 host(s) listed; drop --nnodes (one node per host)");
  CHECK(err([](launch_options& o) {
          o.nnodes.value = "2";
          o.nnodes.source = "command line";
        }) == "(no error)");
  CHECK(err([](launch_options& o) {
          o.rdzv_backend.value = "static";
          o.rdzv_backend.source = "command line";
        }) == "--rdzv-backend=static: a launch over ssh meets through c10d; drop --rdzv-backend");
  CHECK(err([](launch_options& o) { o.rdzv_conf = "is_host=1"; }) ==
        "--rdzv-conf is_host: with --hosts the first host hosts the store; drop is_host (or give "
        "--rdzv-endpoint too)");
}
