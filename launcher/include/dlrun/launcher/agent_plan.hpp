#pragma once
// What an agent of a `dlrun run` job runs, as the launcher sends it in the rendezvous's
// assignment (docs/channels.md): the host's PlanOptions (its rank count, the program, the
// output and failure policy), the job id and the working directory. The agent's command
// line carries only where to meet (--rendezvous, --round, which node it is): nothing of
// the plan is spelt out as flags and parsed again. The job's own variables travel in it too. One JSON object on one line
// (nlohmann::json). Pure functions.

#include <string>

#include "dlrun/launcher/plan.hpp"

namespace dlrun::launcher {

struct AgentPlan {
  PlanOptions options;
  std::string job_id;
  std::string workdir;
  // Variables every rank of the job gets on every host, over what the agent's own
  // environment holds (a submitted job's [env], DLRUN_CHECKPOINT_DIR, export_env): ssh does
  // not carry the launcher's environment to another host.
  Environment env;
};

// One line of JSON, without a newline.
std::string format_agent_plan(const AgentPlan& plan);
// Throws Error (exit code 70, an internal mismatch) for what format_agent_plan did not write.
AgentPlan parse_agent_plan(const std::string& text);

}  // namespace dlrun::launcher
