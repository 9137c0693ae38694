#pragma once
// Rank 0's progress display: a bar redrawn in place when stderr is a terminal (also under
// `dlrun local` on a terminal, which sets DLRUN_TTY=1 and shows the redraws); otherwise
// nothing until the epoch ends (then one line on stdout, from the caller).

#include <cstdint>

namespace fashion_mnist {

class Progress {
 public:
  explicit Progress(bool enabled);
  // Redraws at most every 100 ms.
  void update(int64_t epoch, int64_t epochs, int64_t done, int64_t total, double loss);
  // Clears the bar line.
  void finish_epoch();

 private:
  bool m_enabled;
  double m_last_draw = -1;
};

}  // namespace fashion_mnist
