#include "adaptive_state.hpp"

#include "dlrun/text_fields.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace dlrun::runtime {
namespace {

constexpr const char* k_header = "dlrun-adaptive 1";

double to_double(const std::string& key, const std::string& value) {
  double out = 0;  // from_chars: std::stod refused a subnormal (a base rate of 1e-310)
  if (!text::parse(value, out)) throw std::invalid_argument("bad number for " + key + ": " + value);
  return out;
}

}  // namespace

std::string format_adaptive_state(const AdaptiveState& s) {
  std::string out = fmt::format("{}\nglobal_batch {}\nworld_size {}\nstep {}\nprogress {:.17g}\n",
                                k_header, s.global_batch, s.world_size, s.step, s.progress);
  for (double lr : s.base_lr) out += fmt::format("base_lr {:.17g}\n", lr);
  if (s.batch_cap > 0) out += fmt::format("batch_cap {}\n", s.batch_cap);  // only then: older readers know no such key
  if (s.fall_rate >= 0 && s.fall_goodput > 0) {  // likewise
    out += fmt::format("fall_rate {:.17g}\nfall_goodput {:.17g}\n", s.fall_rate, s.fall_goodput);
  }
  out += "[noise]\n" + s.noise;
  if (!s.noise.empty() && s.noise.back() != '\n') out += '\n';
  out += "[profile]\n" + s.profile;
  if (!s.profile.empty() && s.profile.back() != '\n') out += '\n';
  return out;
}

AdaptiveState parse_adaptive_state(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != k_header) {
    throw std::invalid_argument("not an AdaptiveBatch state (first line: '" + line + "')");
  }
  AdaptiveState s;
  std::string section;
  bool have_batch = false;
  while (std::getline(in, line)) {
    if (line.size() >= 2 && line.front() == '[' && line.back() == ']') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    if (section == "noise") {
      s.noise += line + "\n";
      continue;
    }
    if (section == "profile") {
      s.profile += line + "\n";
      continue;
    }
    if (!section.empty()) throw std::invalid_argument("unknown section [" + section + "]");
    const auto space = line.find(' ');
    if (line.empty()) continue;
    if (space == std::string::npos) throw std::invalid_argument("no value in line '" + line + "'");
    const std::string key = line.substr(0, space), value = line.substr(space + 1);
    if (key == "global_batch") {
      s.global_batch = static_cast<int64_t>(to_double(key, value));
      have_batch = s.global_batch > 0;
    } else if (key == "world_size") {
      s.world_size = static_cast<int>(to_double(key, value));
    } else if (key == "step") {
      s.step = static_cast<int64_t>(to_double(key, value));
    } else if (key == "progress") {
      s.progress = to_double(key, value);
    } else if (key == "base_lr") {
      s.base_lr.push_back(to_double(key, value));
    } else if (key == "fall_rate") {
      s.fall_rate = to_double(key, value);
    } else if (key == "fall_goodput") {
      s.fall_goodput = to_double(key, value);
    } else if (key == "batch_cap") {
      s.batch_cap = std::max<int64_t>(0, static_cast<int64_t>(to_double(key, value)));
    } else {
      throw std::invalid_argument("unknown key '" + key + "'");
    }
  }
  if (!have_batch) throw std::invalid_argument("no positive global_batch");
  if (!(s.fall_rate >= 0 && s.fall_goodput > 0 && std::isfinite(s.fall_rate) && std::isfinite(s.fall_goodput))) {
    s.fall_rate = -1;  // one without the other, or not finite: none
    s.fall_goodput = 0;
  }
  return s;
}

}  // namespace dlrun::runtime
