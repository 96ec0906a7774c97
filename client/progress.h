// Shows training progress on a terminal or in a log.
//
// On a terminal: one line redrawn in place at most ten times a second,
//   [=========>          ] 4520/9370 epoch 5/10 loss 0.3121 68.2k samples/s ETA 0:07
// Elsewhere (a pipe, a CI log): a plain line at every tenth of the run and at
// every epoch's end, so logs stay short.
//
// Thread-safety: not thread-safe.
#ifndef WEFT_CLIENT_PROGRESS_H_
#define WEFT_CLIENT_PROGRESS_H_

#include <chrono>
#include <cstdio>
#include <string>

#include "runtime/trainer.h"

namespace weft {

class ProgressDisplay {
 public:
  // Draws to `out`; `terminal` picks the redrawn bar over plain lines.
  ProgressDisplay(std::FILE* out, bool terminal) : out_(out), terminal_(terminal) {}
  void Update(const TrainProgress& p);
  // Ends the bar's line.
  void Finish();

  // The bar's text for `p` (no carriage return): for tests.
  static std::string BarLine(const TrainProgress& p, int width);

 private:
  std::FILE* out_;
  bool terminal_;
  bool drawn_ = false;
  int64_t next_plain_step_ = 0;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace weft

#endif  // WEFT_CLIENT_PROGRESS_H_
