#include "model_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "dlrun/log.hpp"

namespace dlrun::runtime {

void ModelFile::write(const std::string& json) {
  const std::string temp = m_path.string() + ".tmp";
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  size_t done = 0;
  while (ok && done < json.size()) {
    ssize_t n = ::write(fd, json.data() + done, json.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  const int error = errno;
  if (fd >= 0) ::close(fd);
  ok = ok && std::rename(temp.c_str(), m_path.c_str()) == 0;
  if (!ok && !m_warned) {
    log::warn("cannot write the goodput model {}: {}", m_path.string(), std::strerror(error ? error : errno));
    m_warned = true;
  }
}

}  // namespace dlrun::runtime
