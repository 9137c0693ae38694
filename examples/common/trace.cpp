#include "trace.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

namespace examples {
namespace {

int open_append(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(fmt::format("cannot open {} for appending", path));
  return fd;
}

void write_line(int fd, const std::string& line) {
  if (fd >= 0 && ::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    throw std::runtime_error("cannot write the trace");
  }
}

}  // namespace

Trace::Trace(const std::string& dir, int rank) {
  if (dir.empty()) return;
  std::filesystem::create_directories(dir);
  m_samples_fd = open_append(fmt::format("{}/samples-rank{}.txt", dir, rank));
  if (rank == 0) {
    m_loss_fd = open_append(dir + "/loss.txt");
    m_starts_fd = open_append(dir + "/starts.txt");
  }
  int pid_fd = ::open(fmt::format("{}/pid-rank{}", dir, rank).c_str(),
                      O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (pid_fd >= 0) {
    write_line(pid_fd, fmt::format("{}\n", ::getpid()));
    ::close(pid_fd);
  }
}

Trace::~Trace() {
  if (m_samples_fd >= 0) ::close(m_samples_fd);
  if (m_loss_fd >= 0) ::close(m_loss_fd);
  if (m_starts_fd >= 0) ::close(m_starts_fd);
}

void Trace::samples(int64_t step, int64_t epoch, const std::vector<int64_t>& indices) {
  if (m_samples_fd < 0) return;
  write_line(m_samples_fd, fmt::format("{} {} {}\n", step, epoch, fmt::join(indices, " ")));
}

void Trace::loss(int64_t step, double average, double value) {
  write_line(m_loss_fd, fmt::format("{} {:.6f} {:.6f}\n", step, average, value));
}

void Trace::start(int world_size, int64_t step) {
  write_line(m_starts_fd, fmt::format("{} {}\n", world_size, step));
}

}  // namespace examples
