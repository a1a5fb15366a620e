// `dtrun report`'s output: the text a person reads and the same as JSON
// (dtrun.report/1, for scripts and tests). Both from a job_report
// (event_report.h); nothing here reads a file.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "launcher/report/event_report.h"

namespace dtrun::launcher {

// The timeline: the job's outcome and goodput, a table of rounds, one of
// incidents and the lost time by cause. Times are seconds since the first
// agent started.
std::string render_report(const job_report& report);

// Everything render_report shows, times both as ISO 8601 and as seconds
// since the first agent started (the keys ending in _s).
nlohmann::ordered_json report_json(const job_report& report);

// The warnings that go to stderr (skipped lines, runs not shown), one line
// each, without the "dtrun report: " prefix.
std::vector<std::string> report_warnings(const job_report& report);

}  // namespace dtrun::launcher
