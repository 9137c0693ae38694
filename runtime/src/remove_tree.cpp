#include "remove_tree.hpp"

#include <ftw.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace dlrun::runtime {
namespace {

thread_local int t_first_error = 0;

int remove_entry(const char* path, const struct stat*, int type, struct FTW*) {
  const int rc = type == FTW_DP ? ::rmdir(path) : ::unlink(path);
  if (rc != 0 && errno != ENOENT && t_first_error == 0) t_first_error = errno;
  return 0;  // go on: remove what can be removed
}

}  // namespace

void remove_tree(const std::filesystem::path& path, std::error_code& ec) noexcept {
  ec.clear();
  t_first_error = 0;
  // FTW_DEPTH: children before their directory; FTW_PHYS: links are removed, not followed.
  if (::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT) {
    ec.assign(errno, std::generic_category());
    return;
  }
  if (t_first_error != 0) ec.assign(t_first_error, std::generic_category());
}

void remove_tree(const std::filesystem::path& path) {
  std::error_code ec;
  remove_tree(path, ec);
  if (ec) throw std::system_error(ec, "cannot remove " + path.string());
}

}  // namespace dlrun::runtime
