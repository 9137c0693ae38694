#pragma once
// The training-project skeletons `dlrun init` writes: templates/project/ and
// templates/python/ (--python), built into the
// binary (cli/CMakeLists.txt generates project_templates.cpp), so that it needs no
// installed data files.

#include <string>
#include <vector>

namespace dlrun::cli {

struct TemplateFile {
  const char* name;
  const char* text;
};

const std::vector<TemplateFile>& project_templates();  // templates/project: C++
const std::vector<TemplateFile>& python_templates();   // templates/python: import dlrun

}  // namespace dlrun::cli
