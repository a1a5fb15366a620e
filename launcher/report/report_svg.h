// `dtrun report --plot FILE.svg`: the job's timeline as a standalone SVG
// written as text (no plotting tool at run time). One lane per node: each
// round's running time a coloured bar, each incident a red mark labelled
// with its class above a grey band for the time until the workers ran
// again; an axis in seconds since the first agent started, a legend, and
// the goodput in the title.
#pragma once

#include <string>

#include "launcher/report/event_report.h"

namespace dtrun::launcher {

std::string render_svg(const job_report& report);

// Text made safe inside an XML element or attribute.
std::string xml_escape(std::string_view text);

}  // namespace dtrun::launcher
