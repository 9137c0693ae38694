#pragma once
// dlrun's own files (the job store, run directories, rank logs, job.json) hold environments,
// command lines and output: they are private to the user who runs dlrun, whatever the umask
// (directories 0700, files 0600). The store is its user's alone: dlrun runs what it says as that
// user, so a store another user owns or may write (one shared by a group) is refused
// (docs/security.md). The ranks get the umask dlrun was started with, so their own files are as
// the user expects.

#include <sys/types.h>

#include <string>

#include "dlrun/error.hpp"
#include "dlrun/launcher/rank_env.hpp"

namespace dlrun::launcher {

// A DLRUN_HOME that is not this user's own: nothing may run from it, nor be written to it
// (not even a run that goes unrecorded when the store cannot be opened for another reason).
class ForeignHomeError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// Sets this process's umask to 077, remembering the one dlrun
// was started with: DLRUN_UMASK (octal, "022") when `env` has it, as a supervisor started by
// `dlrun submit` is told its submitter's, else the current one.
void keep_files_private(const Environment& env);

// The umask dlrun was started with (the current one before keep_files_private()).
mode_t started_umask();
// The same as DLRUN_UMASK carries it: octal, "022".
std::string started_umask_text();

// `home` exists, is setgid and its group may write into it: a store meant to be shared by a
// group (a umask of 002 makes directories group-writable, never setgid).
bool is_shared_home(const std::string& home);

// Throws ForeignHomeError unless `home` is missing or a directory this user owns that no group
// shares (a link to one this user made): another user who may write the store could make it
// start their command as this user (or as root). Names the owner or the group.
void check_own_home(const std::string& home);

// Throws ConfigError when `dir` (a run or log directory, made or found) is another user's, or a
// link another user made: its owner could have planted links in it to this user's files, which
// the job's logs would then write. `what` names it ("--run-dir", "log directory").
void check_own_directory(const std::string& dir, const std::string& what);

// check_own_home(), then a home an older dlrun left readable by others, with its job store,
// is made 0700 and 0600.
void tighten_home(const std::string& home);

}  // namespace dlrun::launcher
