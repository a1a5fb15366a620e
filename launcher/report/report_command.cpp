#include "launcher/report/report_command.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "launcher/report/event_report.h"
#include "launcher/report/report_svg.h"
#include "launcher/report/report_text.h"
#include "rendezvous/base/printable.h"

namespace dtrun::launcher {

namespace {

constexpr int exit_bad_input = 2;

int fail(int code, const std::string& message) {
  fmt::print(stderr, "dtrun report: {}\n", message);
  return code;
}

// An event log holds a job's lifecycle, not its steps: a file larger than
// this is something else (/dev/zero, a disk image), and reading it whole
// would take the memory instead of saying so.
constexpr std::size_t max_input_bytes = std::size_t{1} << 30;

// The whole stream, or nullopt once it is longer than max_input_bytes.
std::optional<std::string> read_bounded(std::istream& in) {
  std::string text;
  std::string chunk(1 << 20, '\0');
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    auto got = static_cast<std::size_t>(in.gcount());
    if (text.size() + got > max_input_bytes) return std::nullopt;
    text.append(chunk, 0, got);
  }
  return text;
}

std::optional<std::string> too_big(const std::string& path) {
  fail(exit_bad_input, fmt::format("'{}' is more than {} GiB: not an event log; give the file "
                                   "written by --event-log",
                                   printable(path), max_input_bytes >> 30));
  return std::nullopt;
}

// The whole file ("-": stdin); nullopt after saying why it cannot be read.
std::optional<std::string> read_input(const std::string& path) {
  if (path == "-") {
    auto text = read_bounded(std::cin);
    return text ? text : too_big(path);
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    fail(exit_bad_input, fmt::format("'{}' is a directory; give the file written by --event-log",
                                     printable(path)));
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fail(exit_bad_input, fmt::format("cannot read '{}': {}; give the file written by --event-log",
                                     printable(path), std::strerror(errno)));
    return std::nullopt;
  }
  auto text = read_bounded(in);
  if (!text) return too_big(path);
  if (in.bad()) {
    fail(exit_bad_input,
         fmt::format("cannot read '{}': {}", printable(path), std::strerror(errno)));
    return std::nullopt;
  }
  return text;
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace

int run_report_command(int argc, char** argv) {
  CLI::App app("Show a job's timeline and goodput from the event logs its agents wrote "
               "(--event-log): rounds, incidents, restarts, how it ended.",
               "dtrun report");
  std::vector<std::string> files;
  bool json = false;
  std::string plot;
  std::string run_id;
  app.add_option("files", files, "Event logs (one shared file, or one per node; - for stdin)")
      ->type_name("FILE");
  app.add_flag("--json", json, "Print the report as one JSON document (dtrun.report/1)");
  app.add_option("--plot", plot, "Also draw the timeline into this SVG file")
      ->type_name("FILE.svg");
  app.add_option("--run-id,--run_id", run_id,
                 "The run to report when the log holds several (default: the last started)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    int code = app.exit(e, out, err);
    std::fputs(out.str().c_str(), stdout);
    std::fputs(err.str().c_str(), stderr);
    return code == 0 ? 0 : exit_bad_input;
  }
  if (files.empty()) {
    return fail(exit_bad_input, "name the event log: dtrun report EVENTS.jsonl (the file written "
                                "by --event-log; one per node, or one they share)");
  }
  std::vector<report_input> inputs;
  for (const auto& path : files) {
    auto text = read_input(path);
    if (!text) return exit_bad_input;
    inputs.push_back({path, std::move(*text)});
  }
  job_report report;
  try {
    report = build_report(inputs, run_id);
  } catch (const report_error& e) {
    return fail(exit_bad_input, e.what());
  }
  for (const auto& line : report_warnings(report)) fmt::print(stderr, "dtrun report: {}\n", line);
  if (json) {
    fmt::print("{}\n", report_json(report).dump(2, ' ', false,
                                                nlohmann::json::error_handler_t::replace));
  } else {
    fmt::print("{}", render_report(report));
  }
  if (!plot.empty() && !write_file(plot, render_svg(report))) {
    return fail(1, fmt::format("cannot write the plot to '{}': {}", printable(plot),
                               std::strerror(errno)));
  }
  return 0;
}

}  // namespace dtrun::launcher
