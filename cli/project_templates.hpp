#pragma once
// The training-project skeleton `dlrun init` writes: templates/project/, built into the
// binary (cli/CMakeLists.txt generates project_templates.cpp), so that it needs no
// installed data files.

#include <string>
#include <vector>

namespace dlrun::cli {

struct TemplateFile {
  const char* name;
  const char* text;
};

const std::vector<TemplateFile>& project_templates();

}  // namespace dlrun::cli
