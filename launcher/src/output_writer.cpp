#include "dlrun/launcher/output_writer.hpp"

#include <sys/stat.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <system_error>
#include <thread>

#include "dlrun/launcher/fd_io.hpp"

namespace dlrun::launcher {
namespace {

constexpr size_t k_max_batch = 1 << 20;  // bytes of one write(2), of items queued together

}  // namespace

struct OutputWriter::State {
  std::mutex mutex;
  std::condition_variable work;  // something queued, or stopping
  std::condition_variable idle;  // the queue is empty and no write is in progress
  struct Item {
    int fd;
    std::string text;
  };
  std::deque<Item> queue;
  size_t bytes = 0;  // queued and in progress
  bool writing = false;
  int writing_fd = -1;
  bool stopping = false;
  bool started = false;
  bool abandoned = false;
  bool direct = false;  // no thread could be started: write() writes itself
  std::set<int> failed;
  // A file (output.log) that a full disk interrupts goes on once there is room, with a line that
  // says what was lost (fd_io.hpp); a pipe or terminal whose write fails is given up. Touched
  // by the one thread that writes.
  std::map<int, LogGap> gaps;
  std::map<int, bool> regular;  // per fd, looked at once

  bool put(int fd, std::string_view text) {
    auto [it, fresh] = regular.try_emplace(fd, false);
    if (fresh) {
      struct stat st {};
      it->second = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    }
    if (it->second) return write_log_text(fd, text, gaps[fd]);
    return write_all(fd, text);
  }

  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      work.wait(lock, [this] { return !queue.empty() || stopping; });
      if (queue.empty()) return;  // stopping
      const int fd = queue.front().fd;
      std::string text = std::move(queue.front().text);
      queue.pop_front();
      while (!queue.empty() && queue.front().fd == fd && text.size() + queue.front().text.size() <= k_max_batch) {
        text += queue.front().text;
        queue.pop_front();
      }
      writing = true;
      writing_fd = fd;
      lock.unlock();
      const bool ok = put(fd, text);
      lock.lock();
      writing = false;
      bytes -= text.size();
      if (!ok) {
        failed.insert(fd);
        // What else waits for it will not reach anyone either.
        for (auto it = queue.begin(); it != queue.end();) {
          if (it->fd != fd) {
            ++it;
            continue;
          }
          bytes -= it->text.size();
          it = queue.erase(it);
        }
      }
      if (queue.empty()) idle.notify_all();
    }
  }
};

OutputWriter::OutputWriter() : m_state(std::make_shared<State>()) {}

OutputWriter::~OutputWriter() {
  std::unique_lock lock(m_state->mutex);
  if (!m_state->started || m_state->abandoned) return;
  m_state->idle.wait(lock, [this] { return m_state->queue.empty() && !m_state->writing; });
  // What a full disk kept out of a file, said at its end when nothing came after it.
  for (auto& [fd, gap] : m_state->gaps) write_log_text(fd, "", gap);
  m_state->stopping = true;
  m_state->work.notify_all();
  // The thread ends on its own now; detached, it needs nothing of this object (the state is shared).
}

bool OutputWriter::write(int fd, std::string_view text) {
  std::lock_guard lock(m_state->mutex);
  if (m_state->abandoned || m_state->failed.count(fd)) return false;
  if (text.empty()) return true;
  if (!m_state->started && !m_state->direct) {
    try {
      std::thread([state = m_state] { state->run(); }).detach();
      m_state->started = true;
    } catch (const std::system_error&) {
      m_state->direct = true;  // no thread to spare (a pids limit): write here, as without one
    }
  }
  if (m_state->direct) {
    if (m_state->put(fd, text)) return true;
    m_state->failed.insert(fd);
    return false;
  }
  m_state->queue.push_back({fd, std::string(text)});
  m_state->bytes += text.size();
  m_state->work.notify_one();
  return true;
}

size_t OutputWriter::pending_bytes() const {
  std::lock_guard lock(m_state->mutex);
  return m_state->bytes;
}

bool OutputWriter::flush(std::chrono::milliseconds timeout) {
  std::unique_lock lock(m_state->mutex);
  return m_state->idle.wait_for(lock, timeout, [this] { return m_state->queue.empty() && !m_state->writing; });
}

OutputWriter::Abandoned OutputWriter::abandon() {
  std::lock_guard lock(m_state->mutex);
  Abandoned out;
  if (m_state->writing) {
    out.stuck.insert(m_state->writing_fd);
  } else if (!m_state->queue.empty()) {
    out.stuck.insert(m_state->queue.front().fd);  // its reader did not keep up either
  }
  auto same_file = [](int a, int b) {
    struct stat first {}, second {};
    return ::fstat(a, &first) == 0 && ::fstat(b, &second) == 0 && first.st_dev == second.st_dev &&
           first.st_ino == second.st_ino;
  };
  for (auto& item : m_state->queue) {
    m_state->bytes -= item.text.size();
    bool stuck = out.stuck.count(item.fd) > 0;
    for (int fd : out.stuck) stuck = stuck || same_file(fd, item.fd);
    if (stuck) {
      out.stuck.insert(item.fd);
    } else {
      out.rest.emplace_back(item.fd, std::move(item.text));
    }
  }
  m_state->queue.clear();
  m_state->abandoned = true;
  m_state->stopping = true;
  m_state->work.notify_all();
  // A write in progress may never return: the destructor must not wait for it.
  m_state->writing = false;
  m_state->idle.notify_all();
  return out;
}

}  // namespace dlrun::launcher
