#pragma once
// --trace-dir: what the integration tests check. Each rank appends, per step, the dataset
// indices it trained on (`samples-rank<R>.txt`: "<step> <epoch> <index>..."); rank 0 appends
// the running and the step's loss
// (`loss.txt`: "<step> <running average> <loss>") and a line per start of the group
// (`starts.txt`: "<world size> <step it resumed from>"); each rank writes its pid (`pid-rank<R>`).
// Every line is one write(2) on an O_APPEND file, so a stop never leaves half a line.

#include <cstdint>
#include <string>
#include <vector>

namespace examples {

class Trace {
 public:
  Trace(const std::string& dir, int rank);  // dir empty: no tracing
  ~Trace();
  void samples(int64_t step, int64_t epoch, const std::vector<int64_t>& indices);
  void loss(int64_t step, double average, double value);
  void start(int world_size, int64_t step);

 private:
  int m_samples_fd = -1;
  int m_loss_fd = -1;
  int m_starts_fd = -1;
};

}  // namespace examples
