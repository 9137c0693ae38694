#pragma once
// Writes the job's goodput model (goodput/goodput_model.hpp) to RUN_DIR/goodput-model.json
// atomically: a temporary file renamed over the old one, so a reader (the launcher's
// scheduler) sees the previous model or the new one, never half of one. Internal; rank 0.

#include <filesystem>
#include <string>

namespace dlrun::runtime {

// Never throws: a model that cannot be written is logged once and training goes on.
class ModelFile {
 public:
  explicit ModelFile(std::filesystem::path path) : m_path(std::move(path)) {}
  void write(const std::string& json);
  const std::filesystem::path& path() const { return m_path; }

 private:
  std::filesystem::path m_path;
  bool m_warned = false;
};

}  // namespace dlrun::runtime
