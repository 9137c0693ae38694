#pragma once
// Whether training seems to have run away: AdaptiveBatch raises the learning rate with the
// batch (its scaling rule), and past the largest rate a model tolerates the loss grows instead
// of falling, without any error. The watch sees the mean training loss of each decision
// interval and raises one alarm, the first time that mean is not finite or exceeds `factor`
// times the lowest mean seen (a positive one), so that the user hears of it while the run
// goes on. Only a warning: a loss can rise that far for other reasons (one near zero, a new
// data phase). Pure logic, no I/O. Thread-safety: none needed (one training thread owns it).

#include <cstdint>
#include <optional>

namespace dlrun::runtime {

class DivergenceWatch {
 public:
  // `factor` > 1: how far above its lowest the loss must be to raise the alarm.
  explicit DivergenceWatch(double factor = 10.0);

  struct Alarm {
    double loss;            // the interval's mean loss (may be infinite or NaN)
    double lowest;          // the lowest mean seen before (0 when none was positive)
    int64_t lowest_batch;   // the global batch it was seen at (0 when none)
  };

  // One interval's mean loss at global batch `batch`: the alarm, once per watch.
  std::optional<Alarm> observe(double mean_loss, int64_t batch);
  // Forget the lowest (after a restore: the loss starts anew); an alarm already raised stays.
  void forget() {
    m_lowest = 0;
    m_lowest_batch = 0;
  }

 private:
  double m_factor;
  double m_lowest = 0;  // 0: no positive finite mean seen yet
  int64_t m_lowest_batch = 0;
  bool m_raised = false;
};

}  // namespace dlrun::runtime
