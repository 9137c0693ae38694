#pragma once
// SerialWorker: one thread that runs the jobs given to it one after another, in the order they
// were submitted. The shared-memory gradient allreduce runs on it, so backward goes on
// computing the next buckets' gradients meanwhile (as Gloo's own threads let it), and the
// ranks still reduce their buckets in the same order. Internal; pure C++.
// Thread-safety: submit() from any thread; the destructor finishes the queued jobs first.

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace dlrun::runtime {

class SerialWorker {
 public:
  SerialWorker();
  ~SerialWorker();
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  // The job must not throw (report failures through what it captured).
  void submit(std::function<void()> job);

 private:
  void run();

  std::mutex m_mutex;
  std::condition_variable m_wake;
  std::deque<std::function<void()>> m_jobs;
  bool m_stopping = false;
  std::thread m_thread;  // last: starts after the members it uses exist
};

}  // namespace dlrun::runtime
