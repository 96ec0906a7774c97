// The learning-rate schedule of an optimizer node (graph/ops/training_ops.cc),
// parsed from its attributes: learning_rate (float), warmup_steps (int >= 0,
// default 0), decay ("" / "none", "cosine" or "step"), decay_steps (int > 0
// when decay is set), decay_alpha (float in [0, 1], default 0) and
// decay_factor (float in (0, 1], default 0.1). The op's shape function and
// every device's kernels read it here, so they accept and refuse alike.
#ifndef WEFT_GRAPH_OPS_TRAINING_ATTRS_H_
#define WEFT_GRAPH_OPS_TRAINING_ATTRS_H_

#include "absl/status/statusor.h"
#include "graph/ops/lr_schedule.h"
#include "proto/graph.pb.h"

namespace weft {

// INVALID_ARGUMENT naming the attribute at fault.
absl::StatusOr<LrSchedule> ParseLrSchedule(const NodeDef& node);

}  // namespace weft

#endif  // WEFT_GRAPH_OPS_TRAINING_ATTRS_H_
