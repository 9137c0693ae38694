#pragma once
// Stand-in for a LibTorch header that Debian's libtorch-dev does not ship but
// c10d/reducer.hpp includes. reducer.hpp needs only two names from it: the GradCallback type
// (checked with a static_assert) and ContextPtr, a shared_ptr it stores but never
// dereferences in inline code. dlrun never creates or touches a DistAutogradContext (no RPC),
// so declaring just these names is enough. Used only when the real header is missing
// (runtime/CMakeLists.txt); see docs/runtime.md.

#include <functional>
#include <memory>

namespace at {
class Tensor;
}

namespace torch::distributed::autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};
using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace torch::distributed::autograd
