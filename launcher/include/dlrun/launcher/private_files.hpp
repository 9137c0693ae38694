#pragma once
// dlrun's own files (the job store, run directories, rank logs, job.json) hold environments,
// command lines and output: they are private to the user who runs dlrun, whatever the umask
// (directories 0700, files 0600). A DLRUN_HOME that is setgid and group-writable was shared on purpose
// (docs/security.md): its group then shares them too (0770/0660). The ranks get the umask
// dlrun was started with, so their own files are as the user expects.

#include <sys/types.h>

#include <string>

#include "dlrun/launcher/rank_env.hpp"

namespace dlrun::launcher {

// Sets this process's umask to 077 (007 for a shared DLRUN_HOME), remembering the one dlrun
// was started with: DLRUN_UMASK (octal, "022") when `env` has it, as a supervisor started by
// `dlrun submit` is told its submitter's, else the current one.
void keep_files_private(const Environment& env);

// The umask dlrun was started with (the current one before keep_files_private()).
mode_t started_umask();
// The same as DLRUN_UMASK carries it: octal, "022".
std::string started_umask_text();

// `home` exists, is setgid and its group may write into it: a store shared on purpose
// (a umask of 002 makes directories group-writable, never setgid).
bool is_shared_home(const std::string& home);

// A home an older dlrun left readable by others, with its job store: made 0700 and 0600 when
// this user owns them and the home is not shared. Does nothing otherwise.
void tighten_home(const std::string& home);

}  // namespace dlrun::launcher
