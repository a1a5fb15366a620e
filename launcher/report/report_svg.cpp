#include "launcher/report/report_svg.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace dtrun::launcher {

namespace {

// A colour-blind-safe palette (Tableau 10), one colour per round in turn.
constexpr std::array<const char*, 8> round_colours = {"#4e79a7", "#59a14f", "#edc948", "#76b7b2",
                                                      "#b07aa1", "#9c755f", "#f28e2b", "#bab0ac"};
constexpr const char* incident_colour = "#e15759";
constexpr const char* recovery_colour = "#bbbbbb";

constexpr double width = 1000;
constexpr double left = 170;  // lane names
constexpr double right = 40;
constexpr double plot_width = width - left - right;
constexpr double lanes_top = 84;  // below the title and two rows of incident labels
constexpr double lane_height = 24;
constexpr double lane_gap = 8;

// An axis step of 1, 2 or 5 times a power of ten: about eight ticks.
double tick_step(double total) {
  double raw = total / 8;
  double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw) return m * magnitude;
  }
  return 10 * magnitude;
}

// Three significant digits or so: 1.59, 12.3, 4521.
std::string short_seconds(double s) {
  if (s < 10) return fmt::format("{:.2f}", s);
  return s < 100 ? fmt::format("{:.1f}", s) : fmt::format("{:.0f}", s);
}

}  // namespace

std::string xml_escape(std::string_view text) {
  std::string out;
  for (std::size_t k = 0; k < text.size(); ++k) {
    char c = text[k];
    // Nor U+FFFE and U+FFFF (UTF-8 EF BF BE/BF): U+FFFD instead.
    if (c == '\xEF' && text.substr(k + 1, 1) == "\xBF" && k + 2 < text.size() &&
        (text[k + 2] == '\xBE' || text[k + 2] == '\xBF')) {
      out += "\xEF\xBF\xBD";
      k += 2;
      continue;
    }
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 allows no C0 control but tab, newline and return.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

namespace {

// Where things go on the page of one report: a lane per node, time across.
class layout {
 public:
  explicit layout(const job_report& r) : r_(r), total_(r.total_s > 0 ? r.total_s : 1) {
    for (const auto& n : r.nodes) lanes_.push_back(n.label);
    if (lanes_.empty()) lanes_.push_back("job");
    for (std::size_t k = lanes_.size(); k-- > 0;) lane_index_[lanes_[k]] = k;  // a label's first
    lanes_bottom_ =
        lanes_top + static_cast<double>(lanes_.size()) * (lane_height + lane_gap) - lane_gap;
  }
  double total() const { return total_; }
  const std::vector<std::string>& lanes() const { return lanes_; }
  double x(double t) const {
    double s = std::clamp(t - r_.started_at, 0.0, total_);
    return left + s / total_ * plot_width;
  }
  double lane_y(const std::string& label) const {
    auto it = lane_index_.find(label);
    auto index = static_cast<double>(it == lane_index_.end() ? 0 : it->second);
    return lanes_top + index * (lane_height + lane_gap);
  }
  double lanes_bottom() const { return lanes_bottom_; }
  double axis_y() const { return lanes_bottom_ + 10; }
  double legend_y() const { return axis_y() + 62; }
  double height() const { return legend_y() + 24; }

 private:
  const job_report& r_;
  double total_;
  std::vector<std::string> lanes_;
  std::map<std::string, std::size_t> lane_index_;
  double lanes_bottom_ = 0;
};

void draw_header(std::string& svg, const job_report& r, const layout& l) {
  std::string title =
      fmt::format("dtrun run {}: goodput {:.1f}% ({} s productive of {} s), {}",
                  r.run_id.empty() ? "?" : r.run_id, r.goodput * 100, short_seconds(r.productive_s),
                  short_seconds(r.total_s), r.outcome.state);
  svg += fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" "
      "viewBox=\"0 0 {0:.0f} {1:.0f}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<title>{2}</title>\n"
      "<rect x=\"0\" y=\"0\" width=\"{0:.0f}\" height=\"{1:.0f}\" fill=\"white\"/>\n"
      "<text x=\"{3:.0f}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{2}</text>\n",
      width, l.height(), xml_escape(title), left / 10);
}

// Lanes: a name and a faint background.
void draw_lanes(std::string& svg, const layout& l) {
  for (const auto& lane : l.lanes()) {
    double y = l.lane_y(lane);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", left - 8,
                       y + lane_height / 2 + 4, xml_escape(lane));
    svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
                       "fill=\"#f4f4f4\"/>\n", left, y, plot_width, lane_height);
  }
}

// Recovery bands under the bars: the failure until every node ran again
// (or the end of the job).
void draw_recoveries(std::string& svg, const job_report& r, const layout& l) {
  for (const auto& i : r.incidents) {
    double from = l.x(i.failed_at);
    double to = l.x(i.resumed_at.value_or(r.ended_at));
    svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
                       "fill=\"{}\" fill-opacity=\"0.6\"><title>round {} {}: {:.3f} s until "
                       "{}</title></rect>\n",
                       from, lanes_top, std::max(1.0, to - from), l.lanes_bottom() - lanes_top,
                       recovery_colour, i.round, xml_escape(i.incident_class),
                       i.recover_s.value_or(r.ended_at - i.failed_at),
                       i.resumed_at ? "every node's workers ran again" : "the job ended");
  }
}

// Rounds: one bar per node while its workers all ran.
void draw_rounds(std::string& svg, const job_report& r, const layout& l) {
  for (const auto& round : r.rounds) {
    auto index = static_cast<std::size_t>(round.round) % round_colours.size();
    const char* colour = round_colours[index];
    for (const auto& span : round.spans) {
      if (!span.running_at) continue;
      double from = l.x(*span.running_at);
      double bar = std::max(1.0, l.x(span.ended_at) - from);
      double y = l.lane_y(r.nodes.empty() ? "job" : span.node);
      svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
                         "fill=\"{}\"><title>round {}: {:.3f} s to {:.3f} s, {}</title></rect>\n",
                         from, y + 2, bar, lane_height - 4, colour, round.round,
                         *span.running_at - r.started_at, span.ended_at - r.started_at,
                         xml_escape(round.ended_by));
      if (bar > 30) {
        svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"white\">r{}</text>\n", from + 4,
                           y + lane_height / 2 + 4, round.round);
      }
    }
  }
}

// Incidents: a mark across the lanes, the class above (two rows, so
// neighbours do not overprint each other).
void draw_incidents(std::string& svg, const job_report& r, const layout& l) {
  for (std::size_t k = 0; k < r.incidents.size(); ++k) {
    const auto& i = r.incidents[k];
    double at = l.x(i.failed_at);
    double label_y = k % 2 == 0 ? 62 : 76;
    const char* anchor = at > left + plot_width * 0.8 ? "end" : "start";
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" "
                       "stroke=\"{3}\" stroke-width=\"2\"/>\n",
                       at, label_y + 2, l.lanes_bottom(), incident_colour);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\" fill=\"{}\">{} "
                       "(round {})</text>\n",
                       anchor == std::string_view("end") ? at - 3 : at + 3, label_y, anchor,
                       incident_colour, xml_escape(i.incident_class), i.round);
  }
}

// The axis: seconds since the first agent started.
void draw_axis(std::string& svg, const layout& l) {
  double axis_y = l.axis_y(), total = l.total();
  svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" "
                     "stroke=\"black\"/>\n", left, axis_y, left + plot_width, axis_y);
  double step = tick_step(total);
  for (int k = 0; k * step <= total * (1 + 1e-9); ++k) {
    double s = k * step;
    double tx = left + s / total * plot_width;
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" "
                       "stroke=\"black\"/>\n", tx, axis_y, axis_y + 5);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:g}</text>\n", tx,
                       axis_y + 18, s);
  }
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">seconds since the "
                     "first agent started</text>\n", left + plot_width / 2, axis_y + 36);
}

void draw_legend(std::string& svg, const layout& l) {
  double ly = l.legend_y();
  svg += fmt::format("<rect x=\"{0:.1f}\" y=\"{1:.1f}\" width=\"10\" height=\"12\" fill=\"{2}\"/>"
                     "<rect x=\"{3:.1f}\" y=\"{1:.1f}\" width=\"10\" height=\"12\" fill=\"{4}\"/>\n"
                     "<text x=\"{5:.1f}\" y=\"{6:.1f}\">round: every worker running "
                     "(a colour per round)</text>\n",
                     left, ly - 10, round_colours[0], left + 10, round_colours[1], left + 26, ly);
  svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" "
                     "stroke=\"{3}\" stroke-width=\"2\"/>\n"
                     "<text x=\"{4:.1f}\" y=\"{5:.1f}\">incident (its class)</text>\n",
                     left + 360, ly - 11, ly + 2, incident_colour, left + 368, ly);
  svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"20\" height=\"12\" fill=\"{}\" "
                     "fill-opacity=\"0.6\"/>\n"
                     "<text x=\"{:.1f}\" y=\"{:.1f}\">until every node's workers ran "
                     "again</text>\n",
                     left + 520, ly - 10, recovery_colour, left + 546, ly);
}

}  // namespace

std::string render_svg(const job_report& r) {
  layout l(r);
  std::string svg;
  draw_header(svg, r, l);
  draw_lanes(svg, l);
  draw_recoveries(svg, r, l);
  draw_rounds(svg, r, l);
  draw_incidents(svg, r, l);
  draw_axis(svg, l);
  draw_legend(svg, l);
  svg += "</svg>\n";
  return svg;
}

}  // namespace dtrun::launcher
