#include "dlrun/launcher/allocation_trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <ctime>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

#include "dlrun/launcher/job_report.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/launcher/time_stamp.hpp"

namespace dlrun::launcher {

namespace {

// ---- The walk over the events ---------------------------------------------------------------

// Which row each GPU id is drawn in: "0" … gpus−1 in theirs, any other id after them.
class RowIndex {
 public:
  RowIndex(const std::vector<AllocationEvent>& events, int gpus) {
    int highest = -1;
    for (const auto& e : events) {
      for (const auto& id : e.gpu_ids) {
        if (auto index = parse_int(id)) highest = std::max(highest, *index);
      }
    }
    gpus_ = gpus > 0 ? gpus : highest + 1;
    for (int g = 0; g < gpus_; ++g) labels_.push_back(std::to_string(g));
    for (const auto& e : events) {
      for (const auto& id : e.gpu_ids) {
        if (!numbered(id) && !others_.count(id)) {
          others_[id] = labels_.size();
          labels_.push_back(id);
        }
      }
    }
  }
  size_t row(const std::string& id) const {
    auto index = parse_int(id);
    return index && *index < gpus_ ? static_cast<size_t>(*index) : others_.at(id);
  }
  std::vector<std::string> labels() const { return labels_; }

 private:
  bool numbered(const std::string& id) const {
    auto index = parse_int(id);
    return index && *index < gpus_;
  }
  int gpus_ = 0;
  std::vector<std::string> labels_;
  std::map<std::string, size_t> others_;
};

struct OpenSpan {
  double from = 0;
  size_t got = 0;
};

// One job while the events are walked.
struct JobWalk {
  size_t appearance = 0;
  std::string name;
  std::map<size_t, OpenSpan> held;                // row → since when
  std::vector<std::pair<double, double>> active;  // when it held ranks
  std::optional<double> active_since;
  std::optional<double> first_in_window;  // its first event within the window
  int peak = 0;
};

struct Window {
  double begin = 0, end = 0;
  double close = 0;  // when what is held after the last event is given back
};

Window window_of(const std::vector<AllocationEvent>& events, const TraceOptions& options) {
  double first = options.now, last = options.now;
  if (!events.empty()) {
    auto [lo, hi] = std::minmax_element(events.begin(), events.end(),
                                        [](const auto& a, const auto& b) { return a.at < b.at; });
    first = lo->at;
    last = hi->at;
  }
  Window w;
  w.begin = options.begin > 0 ? options.begin : first;
  w.end = std::max(w.begin, options.end > 0 ? options.end : std::max(options.now, last));
  w.close = options.now > 0 ? std::max(options.now, last) : std::max(w.end, last);
  return w;
}

// [from, to] within the window, or nothing when none of it is.
std::optional<std::pair<double, double>> clip(double from, double to, const TraceSummary& s) {
  from = std::max(from, s.begin);
  to = std::min(to, s.end);
  if (to <= from) return std::nullopt;
  return std::make_pair(from, to);
}

double union_length(std::vector<std::pair<double, double>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0, reached = -INFINITY;
  for (auto [from, to] : intervals) {
    from = std::max(from, reached);
    if (to > from) total += to - from;
    reached = std::max(reached, to);
  }
  return total;
}

// ---- Text shared by both renderings ---------------------------------------------------------

// The first `limit` characters (code points) of clean UTF-8, "…" where it cuts.
std::string shortened(const std::string& text, size_t limit) {
  size_t characters = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xc0) == 0x80) continue;
    if (++characters > limit) return text.substr(0, i) + "…";
  }
  return text;
}


// Seconds to a tenth: "754s", "12.5s".
std::string seconds_text(double seconds) {
  const double tenths = std::round(seconds * 10);
  if (std::fmod(tenths, 10) == 0) return fmt::format("{:.0f}s", tenths / 10);
  return fmt::format("{:.1f}s", tenths / 10);
}

// A tick of the time axis: "0", "30s", "5m", "1h30m", "2d".
std::string tick_text(double seconds) {
  if (std::fmod(std::round(seconds * 10), 10) != 0) return seconds_text(seconds);
  long s = std::lround(seconds);
  if (s == 0) return "0";
  std::string out;
  const std::array<std::pair<long, const char*>, 4> units = {
      {{86400, "d"}, {3600, "h"}, {60, "m"}, {1, "s"}}};
  for (auto [size, unit] : units) {
    if (s >= size) out += fmt::format("{}{}", s / size, unit);
    s %= size;
  }
  return out;
}

std::string percent(double fraction) {
  return fmt::format("{:.1f}%", fraction * 100);
}

std::string gpu_seconds_text(double gpu_seconds) {
  return fmt::format("{:.0f}", gpu_seconds);
}

// ---- Text ------------------------------------------------------------------------------------

// The character each column of one row shows: the job that held the GPU longest in it, or
// '.' when it was idle longer than any job held it.
std::string row_cells(const TraceSummary& s, size_t row, int width) {
  const double window = s.end - s.begin;
  std::string cells(width, '.');
  if (window <= 0) return cells;
  const double column = window / width;
  std::vector<std::map<size_t, double>> held(width);  // per column: job → seconds
  for (const auto& span : s.spans) {
    if (span.row != row) continue;
    const int first = std::clamp(static_cast<int>((span.from - s.begin) / column), 0, width - 1);
    const int last =
        std::clamp(static_cast<int>(std::ceil((span.to - s.begin) / column)) - 1, first, width - 1);
    for (int c = first; c <= last; ++c) {
      const double from = s.begin + c * column, to = from + column;
      const double overlap = std::min(to, span.to) - std::max(from, span.from);
      if (overlap > 0) held[c][span.job] += overlap;
    }
  }
  for (int c = 0; c < width; ++c) {
    double busy = 0, longest = 0;
    for (auto [job, seconds] : held[c]) {
      busy += seconds;
      if (seconds > longest) {
        longest = seconds;
        cells[c] = trace_symbol(job);
      }
    }
    if (longest < column - busy) cells[c] = '.';
  }
  return cells;
}

// "       0s            754s": under the first and the last column.
std::string axis_line(size_t indent, int width, double window) {
  const std::string left = seconds_text(0), right = seconds_text(window);
  const size_t gap =
      std::max<long>(1, static_cast<long>(width) - static_cast<long>(left.size() + right.size()));
  return std::string(indent, ' ') + left + std::string(gap, ' ') + right + "\n";
}

std::string jobs_table(const TraceSummary& s) {
  std::vector<std::vector<std::string>> rows = {
      {"", "job", "name", "GPUs", "GPU-seconds", "from", "to"}};
  for (size_t i = 0; i < s.jobs.size(); ++i) {
    const auto& job = s.jobs[i];
    std::vector<std::string> row = {std::string(1, trace_symbol(i)),
                                    std::to_string(job.job),
                                    clean_text(job.name),
                                    std::to_string(job.peak_gpus),
                                    gpu_seconds_text(job.gpu_seconds),
                                    seconds_text(job.first - s.begin),
                                    seconds_text(job.last - s.begin)};
    if (job.running) row.emplace_back("running");
    rows.push_back(std::move(row));
  }
  return render_table(rows);
}

// ---- SVG -------------------------------------------------------------------------------------

constexpr std::array<const char*, 10> k_palette = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                                   "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                                                   "#9c755f", "#bab0ac"};

struct SvgLayout {
  static constexpr double width = 900, left = 80, right = 20, top = 40;
  static constexpr double legend_column = 440, legend_line = 18;
  static constexpr int legend_columns = 2;
  double row_height = 28;
  double plot_bottom = top;
  double legend_top = 0;
  double height = 0;
  double plot_width() const { return width - left - right; }
};

SvgLayout layout_of(const TraceSummary& s) {
  SvgLayout l;
  l.row_height =
      s.rows.empty() ? 20 : std::clamp(400.0 / static_cast<double>(s.rows.size()), 8.0, 28.0);
  l.plot_bottom = l.top + l.row_height * static_cast<double>(std::max<size_t>(1, s.rows.size()));
  l.legend_top = l.plot_bottom + 42;
  const size_t legend_rows =
      (s.jobs.size() + SvgLayout::legend_columns - 1) / SvgLayout::legend_columns;
  l.height = l.legend_top + static_cast<double>(legend_rows) * SvgLayout::legend_line + 10;
  return l;
}

std::string svg_start(double width, double height, const std::string& title) {
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 "
      "0 {0:.0f} {1:.0f}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{2}</text>\n",
      width, height, xml_text(title));
}

std::string svg_title(const TraceSummary& s) {
  return fmt::format("GPUs over time, {}, utilisation {}", counted(s.jobs.size(), "job"),
                     percent(s.utilisation));
}

// Round seconds between ticks, at most about ten of them over the window.
double tick_step(double window) {
  static constexpr std::array<double, 21> k_steps = {0.1,  0.2,  0.5,  1,     2,     5,     10,
                                                     15,   30,   60,   120,   300,   600,   900,
                                                     1800, 3600, 7200, 10800, 21600, 43200, 86400};
  for (double step : k_steps) {
    if (window / step <= 10) return step;
  }
  double step = k_steps.back();
  for (int k = 0; window / step > 10; ++k)
    step *= k % 3 == 1 ? 2.5 : 2;  // 1, 2, 5, 10, 20, 50 … days
  return step;
}

std::string gpu_list(const AllocationEvent& e) {
  std::string out;
  for (const auto& id : e.gpu_ids) out += (out.empty() ? "" : ",") + id;
  return out.empty() ? "none" : out;
}

std::string event_text(const AllocationEvent& e) {
  const std::string cause = e.cause.empty() ? "?" : e.cause;
  if (e.ranks <= 0) return cause + ", released everything";
  return fmt::format("{}, {} (GPUs {})", cause, counted(e.ranks, "rank"), gpu_list(e));
}

// Lines of text for a tooltip, each escaped on its own (clean_text() takes the newlines).
std::string tooltip(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) out += (out.empty() ? "" : "\n") + xml_text(line);
  return out;
}

std::string span_tooltip(const TraceSummary& s, const TraceSpan& span,
                         const std::vector<AllocationEvent>& events) {
  const auto& job = s.jobs[span.job];
  return tooltip(
      {fmt::format("job {} {}, GPU {}", job.job, job.name, s.rows[span.row]),
       fmt::format("{} to {} ({})", seconds_text(span.from - s.begin),
                   seconds_text(span.to - s.begin), seconds_text(span.to - span.from)),
       "got it: " + event_text(events[span.got]),
       span.released ? "gave it back: " + event_text(events[*span.released]) : "still held"});
}

std::string svg_rows(const TraceSummary& s, const SvgLayout& l) {
  std::string out;
  for (size_t r = 0; r < s.rows.size(); ++r) {
    const double y = SvgLayout::top + static_cast<double>(r) * l.row_height;
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>\n",
        SvgLayout::left, y, l.plot_width(), l.row_height, r % 2 ? "#f4f4f4" : "#ebebeb");
    out += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" dominant-baseline=\"middle\">GPU "
        "{}</text>\n",
        SvgLayout::left - 6, y + l.row_height / 2, xml_text(s.rows[r]));
  }
  if (s.rows.empty()) {
    out += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" dominant-baseline=\"middle\">no GPU held in the "
        "window</text>\n",
        SvgLayout::left, SvgLayout::top + l.row_height / 2);
  }
  return out;
}

std::string svg_spans(const TraceSummary& s, const SvgLayout& l,
                      const std::vector<AllocationEvent>& events) {
  const double window = s.end - s.begin;
  std::string out;
  if (window <= 0) return out;
  const double scale = l.plot_width() / window;
  for (const auto& span : s.spans) {
    const double x = SvgLayout::left + (span.from - s.begin) * scale;
    const double w = std::max(0.5, (span.to - span.from) * scale);
    const double y = SvgLayout::top + static_cast<double>(span.row) * l.row_height;
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\" "
        "stroke=\"white\" "
        "stroke-width=\"0.5\"><title>{}</title></rect>\n",
        x, y, w, l.row_height, k_palette[span.job % k_palette.size()],
        span_tooltip(s, span, events));
    const std::string id = std::to_string(s.jobs[span.job].job);
    if (w >= 7.0 * static_cast<double>(id.size()) + 6 && l.row_height >= 12) {
      out += fmt::format(
          "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" fill=\"#222\" "
          "dominant-baseline=\"middle\" "
          "pointer-events=\"none\">{}</text>\n",
          x + 3, y + l.row_height / 2, id);
    }
  }
  return out;
}

std::string svg_axis(const TraceSummary& s, const SvgLayout& l) {
  const double window = s.end - s.begin;
  const double y = l.plot_bottom;
  std::string out = fmt::format(
      "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#333\"/>\n",
      SvgLayout::left, y, SvgLayout::left + l.plot_width(), y);
  if (window <= 0) return out;
  const double step = tick_step(window);
  for (long k = 0; k * step <= window * (1 + 1e-9); ++k) {
    const double x = SvgLayout::left + static_cast<double>(k) * step / window * l.plot_width();
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#333\"/>\n", x,
        y, y + 5);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", x,
                       y + 18, tick_text(static_cast<double>(k) * step));
  }
  out += fmt::format(
      "<text x=\"{:.1f}\" y=\"24\" text-anchor=\"end\" fill=\"#555\">from {}</text>\n",
      SvgLayout::left + l.plot_width(), utc_iso8601(static_cast<std::time_t>(std::floor(s.begin))));
  return out;
}

std::string svg_legend(const TraceSummary& s, const SvgLayout& l) {
  std::string out;
  for (size_t i = 0; i < s.jobs.size(); ++i) {
    const auto& job = s.jobs[i];
    const double x =
        10 + static_cast<double>(i % SvgLayout::legend_columns) * SvgLayout::legend_column;
    const double y =
        l.legend_top + static_cast<double>(i / SvgLayout::legend_columns) * SvgLayout::legend_line;
    out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/>\n",
                       x, y - 10, k_palette[i % k_palette.size()]);
    const std::string when =
        fmt::format("{} to {}{}", seconds_text(job.first - s.begin),
                    seconds_text(job.last - s.begin), job.running ? ", running" : "");
    out += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\"><title>{}</title>job {}: {} ({} GPU-s)</text>\n", x + 16,
        y, tooltip({fmt::format("job {} {}", job.job, job.name), when}), job.job,
        xml_text(shortened(clean_text(job.name), 28)), gpu_seconds_text(job.gpu_seconds));
  }
  return out;
}

}  // namespace

// ---- Public ----------------------------------------------------------------------------------

char trace_symbol(size_t job_index) {
  static constexpr std::string_view k_symbols =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  return job_index < k_symbols.size() ? k_symbols[job_index] : '#';
}

TraceSummary summarise_trace(const std::vector<AllocationEvent>& events,
                             const TraceOptions& options) {
  TraceSummary s;
  const Window window = window_of(events, options);
  s.begin = window.begin;
  s.end = window.end;
  const RowIndex rows(events, options.gpus);
  s.rows = rows.labels();

  std::vector<size_t> order(events.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return events[a].at < events[b].at; });

  struct RawSpan {
    int64_t job;
    TraceSpan span;
  };
  std::map<int64_t, JobWalk> walks;
  std::vector<RawSpan> raw;
  for (size_t i : order) {
    const auto& e = events[i];
    auto [it, added] = walks.try_emplace(e.job);
    JobWalk& w = it->second;
    if (added) w.appearance = walks.size() - 1;
    if (!e.name.empty()) w.name = e.name;
    std::set<size_t> next;
    if (e.ranks > 0) {
      for (const auto& id : e.gpu_ids) next.insert(rows.row(id));
    }
    for (auto h = w.held.begin(); h != w.held.end();) {
      if (next.count(h->first)) {
        ++h;
        continue;
      }
      raw.push_back({e.job, {h->first, 0, h->second.from, e.at, h->second.got, i}});
      h = w.held.erase(h);
    }
    for (size_t r : next) w.held.try_emplace(r, OpenSpan{e.at, i});
    w.peak = std::max(w.peak, static_cast<int>(next.size()));
    if (e.ranks > 0 && !w.active_since) w.active_since = e.at;
    if (e.ranks <= 0 && w.active_since) {
      w.active.emplace_back(*w.active_since, e.at);
      w.active_since.reset();
    }
    if (!w.first_in_window && e.at >= s.begin && e.at <= s.end) w.first_in_window = e.at;
  }

  // What is still held is held until `now`; then only the window counts.
  std::vector<std::pair<int64_t, const JobWalk*>> shown;
  for (auto& [id, w] : walks) {
    for (auto [row, open] : w.held)
      raw.push_back({id, {row, 0, open.from, window.close, open.got, std::nullopt}});
    if (w.active_since) w.active.emplace_back(*w.active_since, window.close);
    bool in_window = w.first_in_window.has_value();
    for (auto [from, to] : w.active) in_window = in_window || clip(from, to, s);
    if (!in_window) continue;
    // A picture of GPUs: a job on CPU slots only is counted, not drawn.
    if (w.peak == 0) {
      ++s.cpu_only_jobs;
      continue;
    }
    shown.emplace_back(id, &w);
  }
  std::sort(shown.begin(), shown.end(), [](const auto& a, const auto& b) {
    return a.second->appearance < b.second->appearance;
  });
  std::map<int64_t, size_t> index;
  for (const auto& [id, w] : shown) {
    TraceJob job;
    job.job = id;
    job.name = w->name;
    job.peak_gpus = w->peak;
    job.running = w->active_since.has_value();
    std::optional<std::pair<double, double>> extent;
    for (auto [from, to] : w->active) {
      if (auto c = clip(from, to, s)) {
        extent = extent ? std::make_pair(std::min(extent->first, c->first),
                                         std::max(extent->second, c->second))
                        : *c;
      }
    }
    if (!extent) extent = std::make_pair(*w->first_in_window, *w->first_in_window);
    job.first = extent->first;
    job.last = extent->second;
    index[id] = s.jobs.size();
    s.jobs.push_back(std::move(job));
  }

  std::vector<std::vector<std::pair<double, double>>> busy(s.rows.size());
  for (auto& [id, span] : raw) {
    auto c = clip(span.from, span.to, s);
    if (!c || !index.count(id)) continue;
    span.job = index.at(id);
    std::tie(span.from, span.to) = *c;
    s.jobs[span.job].gpu_seconds += span.to - span.from;
    busy[span.row].push_back(*c);
    s.spans.push_back(span);
  }
  std::sort(s.spans.begin(), s.spans.end(), [](const TraceSpan& a, const TraceSpan& b) {
    return std::tie(a.row, a.from, a.job) < std::tie(b.row, b.from, b.job);
  });
  for (const auto& intervals : busy) s.busy_gpu_seconds += union_length(intervals);
  const double capacity = static_cast<double>(s.rows.size()) * (s.end - s.begin);
  s.utilisation = capacity > 0 ? s.busy_gpu_seconds / capacity : 0;
  if (!s.jobs.empty()) {
    double first = s.jobs.front().first, last = s.jobs.front().last;
    for (const auto& job : s.jobs) {
      first = std::min(first, job.first);
      last = std::max(last, job.last);
    }
    s.makespan = last - first;
  }
  return s;
}

std::string render_trace_text(const std::vector<AllocationEvent>& events,
                              const TraceOptions& options) {
  if (events.empty()) return "No allocations recorded.\n";
  const TraceSummary s = summarise_trace(events, options);
  const int width = std::max(1, options.width);
  std::string out = fmt::format(
      "{}, {}, {} from {}: utilisation {} ({} of {} GPU-seconds busy)\n",
      counted(s.rows.size(), "GPU"), counted(s.jobs.size(), "job"), seconds_text(s.end - s.begin),
      utc_iso8601(static_cast<std::time_t>(std::floor(s.begin))), percent(s.utilisation),
      gpu_seconds_text(s.busy_gpu_seconds),
      gpu_seconds_text(static_cast<double>(s.rows.size()) * (s.end - s.begin)));
  size_t label_width = 0;
  for (const auto& row : s.rows) label_width = std::max(label_width, clean_text(row).size() + 4);
  for (size_t r = 0; r < s.rows.size(); ++r) {
    out += fmt::format("{:<{}} |{}|\n", "GPU " + clean_text(s.rows[r]), label_width,
                       row_cells(s, r, width));
  }
  if (s.rows.empty()) out += "(no GPU held in the window)\n";
  if (s.cpu_only_jobs > 0) {
    out += fmt::format("({} on CPU slots only in the window, not drawn: dlrun status --all lists {})\n",
                       counted(s.cpu_only_jobs, "job"), s.cpu_only_jobs == 1 ? "it" : "them");
  }
  out += axis_line(label_width + 2, width, s.end - s.begin);
  if (!s.jobs.empty()) out += jobs_table(s);
  return out;
}

std::string render_trace_svg(const std::vector<AllocationEvent>& events,
                             const TraceOptions& options) {
  if (events.empty()) {
    return svg_start(SvgLayout::width, 70, "GPUs over time, 0 jobs") +
           "<text x=\"10\" y=\"52\">no allocations recorded</text>\n</svg>\n";
  }
  const TraceSummary s = summarise_trace(events, options);
  const SvgLayout l = layout_of(s);
  return svg_start(SvgLayout::width, l.height, svg_title(s)) + svg_rows(s, l) +
         svg_spans(s, l, events) + svg_axis(s, l) + svg_legend(s, l) + "</svg>\n";
}

}  // namespace dlrun::launcher
