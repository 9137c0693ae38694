#pragma once
// What an agent of a `dlrun run` job runs, as the launcher sends it in the rendezvous's
// assignment (docs/channels.md): the host's PlanOptions (its rank count, the program, the
// output and failure policy), the job id and the working directory. The agent's command
// line carries only where to meet (--rendezvous, --round, which node it is): nothing of
// the plan is spelt out as flags and parsed again. One JSON object on one line
// (nlohmann::json). Pure functions.

#include <string>

#include "dlrun/launcher/plan.hpp"

namespace dlrun::launcher {

struct AgentPlan {
  PlanOptions options;
  std::string job_id;
  std::string workdir;
};

// One line of JSON, without a newline.
std::string format_agent_plan(const AgentPlan& plan);
// Throws Error (exit code 70, an internal mismatch) for what format_agent_plan did not write.
AgentPlan parse_agent_plan(const std::string& text);

}  // namespace dlrun::launcher
