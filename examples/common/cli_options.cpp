#include "cli_options.hpp"

#include <cstdlib>
#include <string>

#include "dlrun/scaling_rule.hpp"

namespace examples {
namespace {

CLI::Validator number_check(const std::string& name, bool (*ok)(double),
                            const std::string& wanted) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return "'" + text + "' is not a number";
        return ok(value) ? "" : text + " is not " + wanted;
      },
      name);
}

}  // namespace

const CLI::Validator k_positive = number_check(
    "POSITIVE", [](double v) { return v > 0; }, "positive");
const CLI::Validator k_non_negative = number_check(
    "NON-NEGATIVE", [](double v) { return v >= 0; }, "at least 0");
const CLI::Validator k_fraction = number_check(
    "FRACTION", [](double v) { return v > 0 && v < 1; }, "strictly between 0 and 1");
const CLI::Validator k_unit_interval = number_check(
    "IN [0, 1)", [](double v) { return v >= 0 && v < 1; }, "at least 0 and below 1");
const CLI::Validator k_at_least_one = number_check(
    "AT LEAST 1", [](double v) { return v >= 1; }, "at least 1");

const CLI::Validator k_scaling_rule(
    [](std::string& text) -> std::string {
      return dlrun::parse_scaling_rule(text) ? "" : "unknown scaling rule '" + text + "'";
    },
    "RULE");

void add_step_cost_options(CLI::App& app, StepCost& cost) {
  app.add_option("--step-ms", cost.step_ms,
                 "Milliseconds slept per optimizer step on each rank: a GPU-like fixed cost "
                 "(kernel launches, the optimizer) that a larger batch amortises")
      ->check(k_non_negative)
      ->capture_default_str();
  app.add_option("--sample-ms", cost.sample_ms,
                 "Milliseconds slept per sample of the rank's local batch (summed over its "
                 "micro-batches)")
      ->check(k_non_negative)
      ->capture_default_str();
  app.add_option("--sync-ms-per-rank", cost.sync_ms_per_rank,
                 "Milliseconds slept per optimizer step x (world size - 1): how badly gradient "
                 "sync scales")
      ->check(k_non_negative)
      ->capture_default_str();
}

}  // namespace examples
