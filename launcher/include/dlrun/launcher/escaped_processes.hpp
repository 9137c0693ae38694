#pragma once
// Processes that left their rank's process group (setsid, a double fork, a daemon) are found
// by a mark in their environment, which they inherit: every member dlrun starts carries
// DLRUN_SUPERVISOR_ID=<token>, a token of that dlrun process. Found through /proc;
// a process that cleared its environment or changed its user is not found (docs/security.md).

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "dlrun/launcher/process_identity.hpp"

namespace dlrun::launcher {

// "<pid>-<start time>" of the dlrun process that starts the members: unique on this machine,
// and known to whoever knows the supervisor (`dlrun cancel` reads it from the job store).
std::string supervisor_token(const ProcessIdentity& supervisor);

// True when a NUL-separated environment block holds DLRUN_SUPERVISOR_ID=token.
bool environment_has_token(std::string_view environ_block, std::string_view token);

// Processes (other than this one) whose environment holds the token.
std::vector<pid_t> processes_with_token(std::string_view token);

// This process's children (all its threads'), from /proc/self/task/*/children. A child
// subreaper (prctl PR_SET_CHILD_SUBREAPER) adopts what its members' exits orphan, so after
// an attempt a child it did not start is a process that left its member's group.
std::vector<pid_t> own_children();

// SIGKILLs every process with the token, again until none is left (they may fork while it
// runs; at most `rounds` passes). Returns how many were killed.
int kill_processes_with_token(std::string_view token, int rounds = 20);

}  // namespace dlrun::launcher
