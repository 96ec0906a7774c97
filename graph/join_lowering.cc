// The pooling and join layers of a ModelSpec added beside max_pool and add
// (proto/job.proto's AvgPoolLayer and ConcatenateLayer), members of
// ModelLowering. Neither has variables, nor differs between the training
// and evaluation passes.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/attr.h"
#include "graph/model_lowering.h"

namespace weft {

// The window defaults are max_pool's (Keras's): a 2 x 2 window at its own
// stride, VALID padding.
absl::Status ModelLowering::AvgPool(int i, Output* x) {
  const AvgPoolLayer& p = model_.layer(i).avg_pool();
  const int64_t k = p.pool_size() > 0 ? p.pool_size() : 2;
  const std::string padding = p.padding().empty() ? "VALID" : p.padding();
  if (padding != "SAME" && padding != "VALID") {
    return Error(i, absl::StrCat("avg_pool.padding must be SAME or VALID, got '", padding, "'"));
  }
  if (x->shape().rank() != 4) {
    return Error(i, absl::StrCat("avg_pool needs an image input [batch, height, width, channels], got ",
                                 x->shape().DebugString()));
  }
  *x = b_->Op("AvgPool", {*x},
              {Attr("ksize", k), Attr("stride", p.stride() > 0 ? p.stride() : k), Attr("padding", padding)});
  return absl::OkStatus();
}

// Checked here, before the op, so the error names the layer and the input
// at fault: the inputs share a rank and every dimension but the last.
absl::Status ModelLowering::Concatenate(int i, const std::vector<Output>& in, Output* out) {
  const TensorShape& first = in[0].shape();
  for (size_t k = 1; k < in.size(); ++k) {
    const TensorShape& s = in[k].shape();
    bool same = s.rank() == first.rank() && s.rank() >= 1;
    for (int d = 0; same && d + 1 < s.rank(); ++d) same = s.dim(d) == first.dim(d);
    if (!same) {
      return Error(i, absl::StrCat("concatenate's inputs must agree on every dimension but the last: input 0 (",
                                   model_.layer(i).inputs(0).substr(0, 64), ") is ", first.DebugString(),
                                   ", input ", k, " (", model_.layer(i).inputs(k).substr(0, 64), ") is ",
                                   s.DebugString()));
    }
  }
  *out = b_->Op("Concat", in);
  return absl::OkStatus();
}

}  // namespace weft
