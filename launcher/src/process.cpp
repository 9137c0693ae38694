#include "dlrun/launcher/process.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <vector>

#include "dlrun/error.hpp"
#include "dlrun/launcher/fd_io.hpp"
#include "dlrun/launcher/private_files.hpp"
#include "dlrun/launcher/text.hpp"
#include "dlrun/protocol.hpp"

extern char** environ;

namespace dlrun::launcher {
namespace {

struct Pipe {
  int read = -1;
  int write = -1;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    const int error = errno;
    // Each rank holds a few pipes in dlrun: thousands of ranks reach the open-file limit.
    throw SpawnError(fmt::format("pipe: {}{}", std::strerror(error),
                                 error == EMFILE || error == ENFILE
                                     ? " (each rank takes a few of dlrun's open files: fewer ranks, or a higher "
                                       "'ulimit -n')"
                                     : ""));
  }
  return {fds[0], fds[1]};
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// What the child needs, all built before it exists: it must not allocate.
struct ChildArgs {
  const SpawnRequest* request;
  char* const* argv;
  char* const* envp;
  pid_t parent;
  int null_fd;
  const Pipe* out;
  const Pipe* err;
  const Pipe* status;
  mode_t umask;
};

// Runs in the child between clone and exec, on its own stack but in dlrun's memory (as
// vfork): only async-signal-safe calls, and nothing written but its own stack. Every signal is
// blocked when it starts; dispositions go back to the default before any is let through, so
// that no dlrun handler ever runs here.
int exec_child(void* arg) {
  const ChildArgs& a = *static_cast<const ChildArgs*>(arg);
  auto fail = [&](int e) {
    ssize_t ignored = ::write(a.status->write, &e, sizeof e);
    (void)ignored;
    ::_exit(127);
  };
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction action {};
    if (::sigaction(sig, nullptr, &action) != 0 || action.sa_handler == SIG_DFL) continue;
    if (action.sa_handler != SIG_IGN)
      ::sigaction(sig, &default_action, nullptr);  // one of dlrun's handlers
  }
  // These the ranks always get as the default, even if dlrun was started with them ignored
  // (a background job of a shell ignores SIGINT): dlrun passes them on.
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2, SIGQUIT}) {
    ::sigaction(sig, &default_action, nullptr);
  }
  ::setpgid(0, 0);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errno);
  if (::getppid() != a.parent) ::_exit(128 + SIGKILL);  // dlrun died before prctl took hold
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (::dup2(a.null_fd, STDIN_FILENO) < 0 || ::dup2(a.out->write, STDOUT_FILENO) < 0 ||
      ::dup2(a.err->write, STDERR_FILENO) < 0) {
    fail(errno);
  }
  if (!a.request->working_dir.empty() && ::chdir(a.request->working_dir.c_str()) != 0) fail(errno);
  ::umask(a.umask);  // the user's, not the one that keeps dlrun's own files private
  ::execve(a.request->path.c_str(), a.argv, a.envp);
  fail(errno);
  ::_exit(127);
}

}  // namespace

SpawnedProcess spawn_process(const SpawnRequest& request) {
  // Everything the child needs is built before it exists: it must not allocate.
  std::vector<std::string> env_strings;
  env_strings.reserve(request.env.size());
  for (const auto& [key, value] : request.env) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = request.argv;
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  int null_fd = -1;
  Pipe in;
  if (request.stdin_text) {
    in = make_pipe();
    null_fd = in.read;
  } else if (request.stdin_from >= 0) {
    null_fd = ::fcntl(request.stdin_from, F_DUPFD_CLOEXEC, 3);
    if (null_fd < 0) throw SpawnError(fmt::format("standard input: {}", std::strerror(errno)));
  } else {
    null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0) throw SpawnError(fmt::format("/dev/null: {}", std::strerror(errno)));
  }
  Pipe out, err, status;
  try {
    out = make_pipe();
    err = make_pipe();
    status = make_pipe();
  } catch (...) {
    for (int* fd : {&null_fd, &in.write, &out.read, &out.write, &err.read, &err.write})
      close_fd(*fd);
    throw;
  }
  ChildArgs child{&request, argv.data(), envp.data(), ::getpid(),     null_fd,
                  &out,     &err,        &status,     started_umask()};
  // As posix_spawn does: the child shares dlrun's memory until its exec (no page tables to
  // copy, no copy-on-write faults after: a rank starts in a fraction of fork's time), on a
  // stack of its own, with dlrun stopped meanwhile and every signal blocked across it.
  constexpr size_t k_child_stack = 64 * 1024;
  std::vector<char> stack(k_child_stack);
  sigset_t all, before;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &before);
  pid_t pid =
      ::clone(exec_child, stack.data() + stack.size(), CLONE_VM | CLONE_VFORK | SIGCHLD, &child);
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  for (int* fd : {&null_fd, &out.write, &err.write, &status.write}) close_fd(*fd);
  if (pid < 0) {
    for (int* fd : {&out.read, &err.read, &status.read, &in.write}) close_fd(*fd);
    throw SpawnError(
        fmt::format("cannot start {}: clone: {}", request.path, std::strerror(fork_errno)));
  }
  ::setpgid(pid, pid);  // also in the child: whichever runs first wins the race
  if (request.stdin_text && !request.stdin_text->empty()) {
    // Short (a secret line): fits the pipe's buffer, so this never blocks.
    ssize_t n = ::write(in.write, request.stdin_text->data(), request.stdin_text->size());
    (void)n;
  }
  return {pid, out.read, err.read, status.read, in.write};
}

namespace {

// ENOENT for a file that is there: its #! line names an interpreter that is not (often one
// with a carriage return at its end, from a file saved with Windows line endings).
std::string missing_interpreter_hint(const std::string& program) {
  std::FILE* file = std::fopen(program.c_str(), "rb");
  if (!file) return {};
  char line[256] = {};
  const size_t n = std::fread(line, 1, sizeof line - 1, file);
  std::fclose(file);
  const std::string_view head(line, n);
  if (head.substr(0, 2) != "#!") return {};
  const std::string_view first = head.substr(0, head.find('\n'));
  if (!first.empty() && first.back() == '\r') {
    return " (its #! line ends with a carriage return, as a file saved with Windows line endings "
           "has: convert it, e.g. sed -i 's/\\r$//' " + program + ")";
  }
  size_t begin = 2;
  while (begin < first.size() && (first[begin] == ' ' || first[begin] == '\t')) ++begin;
  const size_t end = first.find_first_of(" \t", begin);
  const std::string interpreter(first.substr(begin, end == std::string_view::npos ? first.size() - begin : end - begin));
  if (interpreter.empty()) return {};
  return " (its #! line names the interpreter " + interpreter + ", which does not exist here)";
}

}  // namespace

void await_exec(SpawnedProcess& process, const std::string& program) {
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(process.exec_status_fd, &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close_fd(process.exec_status_fd);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    // ENOEXEC: a script without a #! line (a shell would have guessed /bin/sh; exec does not).
    const std::string hint =
        child_errno == ENOEXEC
            ? " (neither a binary nor a script whose first line names its interpreter: start it "
              "with a #! line such as #!/bin/sh, or put the interpreter before it)"
        : child_errno == ENOENT ? missing_interpreter_hint(program)
                                : std::string();
    throw SpawnError(
        fmt::format("cannot start {}: {}{}", program, std::strerror(child_errno), hint));
  }
}

std::string resolve_program(const std::string& name, const std::string& path_env) {
  if (name.empty()) throw ConfigError("no program given: put the program to run after the options");
  auto check = [](const std::string& path) -> int {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return errno;
    if (S_ISDIR(st.st_mode)) return EISDIR;
    if (::access(path.c_str(), X_OK) != 0) return EACCES;
    return 0;
  };
  if (name.find('/') != std::string::npos) {
    int e = check(name);
    if (e == 0) return name;
    if (e == ENOENT) throw ConfigError(fmt::format("program '{}' does not exist", name));
    if (e == EACCES) {
      throw ConfigError(
          fmt::format("program '{}' is not executable (try chmod +x {})", name, name));
    }
    throw ConfigError(fmt::format("program '{}' cannot be run: {}", name, std::strerror(e)));
  }
  for (const auto& dir : split(path_env, ':')) {
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (check(candidate) == 0) return candidate;
  }
  throw ConfigError(fmt::format(
      "program '{}' not found in PATH (give a path such as ./{} if it is in this directory)", name,
      name));
}

CommandResult run_and_capture(const std::string& path, const std::vector<std::string>& argv,
                              const Environment& env, double timeout_seconds) {
  SpawnedProcess process = spawn_process({path, argv, env, "", std::nullopt});
  await_exec(process, argv.at(0));
  CommandResult result;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  int* fds[2] = {&process.stdout_fd, &process.stderr_fd};
  std::string* sinks[2] = {&result.out, &result.err};
  while ((process.stdout_fd >= 0 || process.stderr_fd >= 0) &&
         std::chrono::steady_clock::now() < deadline) {
    pollfd polls[2];
    int n = 0;
    for (int i = 0; i < 2; ++i) {
      if (*fds[i] >= 0) polls[n++] = {*fds[i], POLLIN, 0};
    }
    ::poll(polls, static_cast<nfds_t>(n), 100);
    for (int i = 0; i < 2; ++i) {
      if (*fds[i] < 0) continue;
      pollfd one{*fds[i], POLLIN, 0};
      if (::poll(&one, 1, 0) <= 0) continue;
      char chunk[4096];
      ssize_t got = ::read(*fds[i], chunk, sizeof chunk);
      if (got > 0) {
        sinks[i]->append(chunk, static_cast<size_t>(got));
      } else {
        close_fd(*fds[i]);
      }
    }
  }
  for (int i = 0; i < 2; ++i) close_fd(*fds[i]);
  auto status = wait_for_exit(
      process.pid, std::chrono::time_point_cast<std::chrono::steady_clock::duration>(deadline));
  if (!status) {
    ::kill(-process.pid, SIGKILL);
    status = 0;
    ::waitpid(process.pid, &*status, 0);
  }
  result.status = ExitStatus::from_wait_status(*status);
  return result;
}

std::optional<int> wait_for_exit(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  // Its pipes may have closed a moment before it exits: poll until the deadline.
  while (true) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return ExitStatus::exited(exit_code::k_internal).code << 8;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    ::usleep(2000);
  }
}

Environment current_environment() {
  Environment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    env.emplace(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
  }
  return env;
}

sigset_t passed_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, signals::k_resize_request);
  return set;
}

void block_passed_signals() {
  const sigset_t set = passed_signal_set();
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
}

bool status_handles_signal(std::string_view status, int signal) {
  if (signal < 1 || signal > 64) return false;
  for (std::string_view key : {"SigCgt:", "SigIgn:"}) {
    const size_t at = status.find(key);
    if (at == std::string_view::npos) continue;
    size_t begin = status.find_first_not_of(" \t", at + key.size());
    if (begin == std::string_view::npos) continue;
    const size_t end = status.find('\n', begin);
    uint64_t mask = 0;
    const std::string_view hex = status.substr(begin, end == std::string_view::npos ? end : end - begin);
    auto [ptr, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), mask, 16);
    if (ec == std::errc() && ((mask >> (signal - 1)) & 1u)) return true;
  }
  return false;
}

bool process_handles_signal(pid_t pid, int signal) {
  auto status = read_file(fmt::format("/proc/{}/status", pid));
  return status && status_handles_signal(*status, signal);
}

namespace {
// Before main: nothing has installed a handler yet.
const bool g_hangup_ignored = [] {
  struct sigaction action {};
  return ::sigaction(SIGHUP, nullptr, &action) == 0 && !(action.sa_flags & SA_SIGINFO) &&
         action.sa_handler == SIG_IGN;
}();
}  // namespace

bool hangup_ignored() { return g_hangup_ignored; }

std::vector<int> stop_signals() {
  if (g_hangup_ignored) return {SIGINT, SIGTERM, SIGQUIT};
  return {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
}

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : stop_signals()) sigaddset(&set, sig);
  return set;
}

bool stop_signal_pending() {
  sigset_t pending;
  if (::sigpending(&pending) != 0) return false;
  for (int sig : stop_signals()) {
    if (sigismember(&pending, sig)) return true;
  }
  return false;
}

int take_pending_stop_signal() {
  sigset_t pending;
  if (::sigpending(&pending) != 0) return 0;
  for (int sig : stop_signals()) {
    if (!sigismember(&pending, sig)) continue;
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    const timespec zero{0, 0};
    if (::sigtimedwait(&one, nullptr, &zero) == sig) return sig;
  }
  return 0;
}

int usable_cores() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

void raise_fd_limit() {
  rlimit limit;
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace dlrun::launcher
