// The recurrent layers of a ModelSpec (proto/job.proto's LstmLayer and
// GruLayer), members of ModelLowering. Each is one fused op over the whole
// sequence (graph/ops/recurrent_ops.cc); its three variables are made by
// the training pass and read by the evaluation pass, which computes the
// same.
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "graph/attr.h"
#include "graph/model_lowering.h"

namespace weft {

// x [batch, steps, features] -> [batch, steps, units] or [batch, units].
// Keras's initialisers: a glorot_uniform kernel and an orthogonal recurrent
// kernel; an LSTM's bias [4 units] is 1 on the forget gate, a GRU's [2, 3
// units] (input side, recurrent side) zeros.
absl::Status ModelLowering::Recurrent(int i, Output* x) {
  const LayerSpec& layer = model_.layer(i);
  const bool lstm = layer.has_lstm();
  const char* kind = lstm ? "lstm" : "gru";
  const int64_t units = lstm ? layer.lstm().units() : layer.gru().units();
  const bool sequences = lstm ? layer.lstm().return_sequences() : layer.gru().return_sequences();
  int64_t width = 0;
  if (units <= 0 || !CheckedMul(units, int64_t{lstm ? 4 : 3}, &width)) {
    return Error(i, absl::StrCat(kind, ".units must be positive, got ", units));
  }
  const TensorShape& in = x->shape();
  if (in.rank() != 3 || in.dim(1) == 0 || in.dim(2) <= 0) {
    return Error(i, absl::StrCat(kind, " needs a [batch, steps >= 1, features] input of known features, got ",
                                 in.DebugString(), "; reshape an image [28, 28] into 28 steps of 28 features"));
  }
  LayerVars& v = vars_[i];
  if (!v.kernel.valid()) {
    v.kernel = b_->Variable("kernel", DType::kFloat32, {in.dim(2), width}, "glorot_uniform", job_.seed() + i);
    v.recurrent_kernel =
        b_->Variable("recurrent_kernel", DType::kFloat32, {units, width}, "orthogonal", job_.seed() + i);
    v.bias = lstm ? b_->Variable("bias", DType::kFloat32, {width}, "unit_forget_bias")
                  : b_->Variable("bias", DType::kFloat32, {2, width}, "zeros");
    Track(v.kernel);
    Track(v.recurrent_kernel);
    Track(v.bias);
  }
  Node* n = b_->AddNode(lstm ? "LSTM" : "GRU", {*x, v.kernel, v.recurrent_kernel, v.bias},
                        {Attr("return_sequences", sequences)});
  if (n == nullptr) return b_->status();
  *x = Output(n, 0);
  return absl::OkStatus();
}

}  // namespace weft
