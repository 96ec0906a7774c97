// Row-shard ops, inserted by the parameter-server rewrite when a variable is
// split into row shards on several ps tasks (master/strategy.h).
//
// ConcatRows(s_0, ..., s_k-1) -> x     x = the shards stacked along dim 0;
//                                      every shard has x's trailing dims.
// SliceRows(x) -> y                    y = rows [begin, begin + size) of x
//                                      (attrs begin, size).
// MicroBatch(x) -> y                   y = micro-batch `index` of `count`
//                                      (attrs): rows [index B / count,
//                                      (index + 1) B / count) of x's B rows;
//                                      B must divide by count. The lowering's
//                                      gradient accumulation slices the
//                                      features and labels with it.
// No gradients: the rewrite runs after autodiff, and MicroBatch reads only
// what is fed.
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/op_registry.h"

namespace weft {
namespace {

absl::Status ConcatRowsShape(InferenceContext* c) {
  const TensorShape& first = c->input_shapes[0];
  if (first.rank() < 1) return c->Error("shards must have rank >= 1");
  int64_t rows = 0;
  for (size_t i = 0; i < c->input_shapes.size(); ++i) {
    const TensorShape& s = c->input_shapes[i];
    if (c->input_types[i] != c->input_types[0]) return c->Error(absl::StrCat("shard ", i, " has another dtype"));
    if (s.rank() != first.rank()) return c->Error(absl::StrCat("shard ", i, " has rank ", s.rank()));
    for (int d = 1; d < s.rank(); ++d) {
      if (s.dim(d) != first.dim(d)) return c->Error(absl::StrCat("shard ", i, " differs in dim ", d));
    }
    if (rows < 0 || s.dim(0) < 0) {
      rows = -1;
    } else if (!CheckedAdd(rows, s.dim(0), &rows)) {
      return c->Error(absl::StrCat("the shards' rows overflow 64 bits at shard ", i, " (", s.dim(0), " rows)"));
    }
  }
  std::vector<int64_t> dims(first.dims().begin(), first.dims().end());
  dims[0] = rows;
  c->output_types[0] = c->input_types[0];
  c->output_shapes[0] = TensorShape(dims);
  return absl::OkStatus();
}

absl::Status SliceRowsShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(int64_t begin, GetIntAttr(c->node, "begin"));
  ASSIGN_OR_RETURN(int64_t size, GetIntAttr(c->node, "size"));
  const TensorShape& x = c->input_shapes[0];
  if (x.rank() < 1) return c->Error("input must have rank >= 1");
  int64_t end;
  if (begin < 0 || size < 0 || !CheckedAdd(begin, size, &end)) {
    return c->Error(absl::StrCat("attributes begin ", begin, " and size ", size,
                                 " must be >= 0 with begin + size within 64 bits"));
  }
  if (x.dim(0) >= 0 && end > x.dim(0)) {
    return c->Error(absl::StrCat("rows [", begin, ", ", end, ") (attributes begin, size) are outside ", x.DebugString()));
  }
  std::vector<int64_t> dims(x.dims().begin(), x.dims().end());
  dims[0] = size;
  c->output_types[0] = c->input_types[0];
  c->output_shapes[0] = TensorShape(dims);
  return absl::OkStatus();
}

absl::Status MicroBatchShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(int64_t index, GetIntAttr(c->node, "index"));
  ASSIGN_OR_RETURN(int64_t count, GetIntAttr(c->node, "count"));
  if (count < 1 || index < 0 || index >= count) {
    return c->Error(absl::StrCat("micro-batch index ", index, " of count ", count, " needs 0 <= index < count"));
  }
  const TensorShape& x = c->input_shapes[0];
  if (x.rank() < 1) return c->Error("input must have rank >= 1");
  std::vector<int64_t> dims(x.dims().begin(), x.dims().end());
  if (x.dim(0) >= 0) {
    if (x.dim(0) % count != 0) {
      return c->Error(absl::StrCat("a batch of ", x.dim(0), " rows does not split into ", count,
                                   " equal micro-batches"));
    }
    dims[0] = x.dim(0) / count;
  }
  c->output_types[0] = c->input_types[0];
  c->output_shapes[0] = TensorShape(dims);
  return absl::OkStatus();
}

}  // namespace

WEFT_REGISTER_OP(OpDef{.name = "MicroBatch", .num_inputs = 1, .num_outputs = 1, .shape_fn = MicroBatchShape});
WEFT_REGISTER_OP(OpDef{.name = "ConcatRows", .num_inputs = -1, .num_outputs = 1, .shape_fn = ConcatRowsShape});
WEFT_REGISTER_OP(OpDef{.name = "SliceRows", .num_inputs = 1, .num_outputs = 1, .shape_fn = SliceRowsShape});

}  // namespace weft
