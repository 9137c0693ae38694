#pragma once
// Command-line pieces the examples share: number checks whose messages stay short (CLI11's
// PositiveNumber and NonNegativeNumber print DBL_MAX's 300 digits), and the options of the
// GPU-like step cost they can sleep (step_cost.hpp).

#include <CLI/CLI.hpp>

#include "step_cost.hpp"

namespace examples {

// "'abc' is not a number", "-1 is not positive".
extern const CLI::Validator k_positive;
// "'abc' is not a number", "-1 is not at least 0".
extern const CLI::Validator k_non_negative;
// "'abc' is not a number", "1 is not strictly between 0 and 1".
extern const CLI::Validator k_fraction;
// "'abc' is not a number", "1 is not at least 0 and below 1".
extern const CLI::Validator k_unit_interval;
// "'abc' is not a number", "0.5 is not at least 1".
extern const CLI::Validator k_at_least_one;

// "unknown scaling rule 'x'" for a name dlrun::parse_scaling_rule does not know.
extern const CLI::Validator k_scaling_rule;

// --step-ms, --sample-ms and --sync-ms-per-rank into `cost` (its values are the defaults shown).
void add_step_cost_options(CLI::App& app, StepCost& cost);

}  // namespace examples
