// A fused LSTM layer over a whole sequence (Hochreiter and Schmidhuber, with
// a forget gate; Keras's LSTM with its default activations).
//
// LSTM(x[B, T, F], kernel[F, 4H], recurrent_kernel[H, 4H], bias[4H])
//         -> (y, h[B, T, H], c[B, T, H], gates[B, T, 4H])
//     From h_-1 = c_-1 = 0, for each step t: z = x_t kernel + h_t-1
//     recurrent_kernel + bias, split into four H-wide blocks in Keras's
//     order i, f, g, o; i, f, o = sigmoid, g = tanh; c_t = f c_t-1 + i g;
//     h_t = o tanh(c_t). y is h (attr return_sequences, default true) or its
//     last step h_T-1 [B, H]. h, c and the activated gates are kept for the
//     backward pass; gradients flow from y only. T must be at least 1.
// LSTMGrad(dy, x, kernel, recurrent_kernel, bias, h, c, gates)
//         -> (dx, dkernel, drecurrent_kernel, dbias)
//     Backpropagation through time from dy (y's shape, attr
//     return_sequences as the forward op's); bias is read for its shape.
//
// GRU(x[B, T, F], kernel[F, 3H], recurrent_kernel[H, 3H], bias[2, 3H])
//         -> (y, h[B, T, H], gates[B, T, 3H], hn[B, T, H])
//     Keras's GRU (reset_after, its default): blocks z, r, n in that order;
//     bias row 0 is the input's, row 1 the recurrent part's. From h_-1 = 0:
//     u = h_t-1 recurrent_kernel + bias[1], z = sigmoid(x_t kernel_z +
//     bias[0]_z + u_z), r likewise, n = tanh(x_t kernel_n + bias[0]_n + r
//     u_n), h_t = z h_t-1 + (1 - z) n. gates keeps z, r, n and hn keeps u_n
//     for the backward pass; y as LSTM's.
// GRUGrad(dy, x, kernel, recurrent_kernel, bias, h, gates, hn)
//         -> (dx, dkernel, drecurrent_kernel, dbias)
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops/shape_util.h"

namespace weft {
namespace {

using shape_util::ExpectFloat;
using shape_util::ExpectRank;
using shape_util::MergeDim;

// The checked dimensions of a recurrent layer's operands: x (input
// x_input), kernel, recurrent_kernel and bias (the three after it), with
// `blocks` gate blocks (LSTM 4, GRU 3); an LSTM's bias is [4H], a GRU's
// [2, 3H]. Unknown dims are -1.
struct LstmDims {
  int64_t batch = -1, steps = -1, features = -1, units = -1;
};

absl::StatusOr<LstmDims> CheckRecurrent(InferenceContext* c, int x_input, int64_t blocks) {
  const bool gru = blocks == 3;
  RETURN_IF_ERROR(ExpectFloat(c, x_input, "x"));
  RETURN_IF_ERROR(ExpectRank(c, x_input, 3, "x (batch, steps, features)"));
  RETURN_IF_ERROR(GetBoolAttrOr(c->node, "return_sequences", true).status());
  const TensorShape& x = c->input_shapes[x_input];
  LstmDims d{x.dim(0), x.dim(1), x.dim(2), -1};
  if (d.steps == 0) return c->Error(absl::StrCat("x ", x.DebugString(), " has no time steps"));
  const char* roles[] = {"kernel", "recurrent_kernel", "bias"};
  for (int k = 0; k < 3; ++k) {
    RETURN_IF_ERROR(ExpectFloat(c, x_input + 1 + k, roles[k]));
    RETURN_IF_ERROR(ExpectRank(c, x_input + 1 + k, k == 2 && !gru ? 1 : 2, roles[k]));
  }
  const TensorShape& w = c->input_shapes[x_input + 1];
  const TensorShape& u = c->input_shapes[x_input + 2];
  const TensorShape& b = c->input_shapes[x_input + 3];
  d.units = u.dim(0);
  auto per_block = [&](int64_t width) -> absl::StatusOr<int64_t> {
    if (width >= 0 && width % blocks != 0) return absl::InvalidArgumentError("not a multiple of the blocks");
    return width < 0 ? int64_t{-1} : width / blocks;
  };
  auto merge = [&](int64_t* into, absl::StatusOr<int64_t> v) -> bool {
    if (!v.ok()) return false;
    auto m = MergeDim(*into, *v);
    if (!m.ok()) return false;
    *into = *m;
    return true;
  };
  const bool bias_rows = !gru || b.dim(0) < 0 || b.dim(0) == 2;
  if (!merge(&d.features, w.dim(0)) || !merge(&d.units, per_block(w.dim(1))) ||
      !merge(&d.units, per_block(u.dim(1))) || !merge(&d.units, per_block(b.dim(b.rank() - 1))) || !bias_rows) {
    const std::string n = absl::StrCat(blocks, " units");
    return c->Error(absl::StrCat("kernel ", w.DebugString(), ", recurrent_kernel ", u.DebugString(), " and bias ",
                                 b.DebugString(), " must be [features, ", n, "], [units, ", n, "] and ",
                                 gru ? "[2, " : "[", n, "] for x ", x.DebugString()));
  }
  if (d.units == 0) return c->Error("a recurrent layer needs at least one unit");
  int64_t width;
  if (d.units > 0 && !CheckedMul(d.units, blocks, &width)) return c->Error("the gates' width overflows");
  return d;
}

TensorShape YShape(InferenceContext* c, const LstmDims& d) {
  const bool seq = GetBoolAttrOr(c->node, "return_sequences", true).value_or(true);
  return seq ? TensorShape{d.batch, d.steps, d.units} : TensorShape{d.batch, d.units};
}

// An op's layout: its gate blocks, and its saved outputs 1 to 3 (the
// gradient op's inputs 5 to 7), one of them the gates [B, T, blocks H], the
// others [B, T, H].
struct RecurrentOp {
  const char* name;
  int64_t blocks;
  const char* saved[3];
  int gates_at;  // in saved
};
constexpr RecurrentOp kLstm{"LSTM", 4, {"h", "c", "gates"}, 2};
constexpr RecurrentOp kGru{"GRU", 3, {"h", "gates", "hn"}, 1};

std::vector<TensorShape> SavedShapes(const LstmDims& d, const RecurrentOp& op) {
  std::vector<TensorShape> shapes;
  for (int k = 0; k < 3; ++k) {
    shapes.push_back(TensorShape{d.batch, d.steps, k != op.gates_at ? d.units : d.units < 0 ? -1 : op.blocks * d.units});
  }
  return shapes;
}

absl::Status RecurrentShape(InferenceContext* c, const RecurrentOp& op) {
  ASSIGN_OR_RETURN(LstmDims d, CheckRecurrent(c, 0, op.blocks));
  const std::vector<TensorShape> saved = SavedShapes(d, op);
  c->output_types.assign(4, DType::kFloat32);
  c->output_shapes = {YShape(c, d), saved[0], saved[1], saved[2]};
  return absl::OkStatus();
}

absl::Status RecurrentGradShape(InferenceContext* c, const RecurrentOp& op) {
  ASSIGN_OR_RETURN(LstmDims d, CheckRecurrent(c, 1, op.blocks));
  RETURN_IF_ERROR(ExpectFloat(c, 0, "dy"));
  if (!MergeShapes(c->input_shapes[0], YShape(c, d)).ok()) {
    return c->Error(absl::StrCat("dy ", c->input_shapes[0].DebugString(), " must have y's shape ",
                                 YShape(c, d).DebugString()));
  }
  const std::vector<TensorShape> saved = SavedShapes(d, op);
  for (int k = 0; k < 3; ++k) {
    RETURN_IF_ERROR(ExpectFloat(c, 5 + k, op.saved[k]));
    if (!MergeShapes(c->input_shapes[5 + k], saved[k]).ok()) {
      return c->Error(absl::StrCat(op.saved[k], " ", c->input_shapes[5 + k].DebugString(), " must be ",
                                   saved[k].DebugString()));
    }
  }
  c->output_types.assign(4, DType::kFloat32);
  c->output_shapes = {c->input_shapes[1], c->input_shapes[2], c->input_shapes[3], c->input_shapes[4]};
  return absl::OkStatus();
}

absl::Status RecurrentGradFn(GradContext* c, const RecurrentOp& op) {
  for (int i = 1; i < 4; ++i) {
    if (c->grad_outputs[i].valid()) {
      return absl::UnimplementedError(
          absl::StrCat("no gradient flows through ", op.name, "'s saved states (outputs 1 to 3); use output 0"));
    }
  }
  ASSIGN_OR_RETURN(bool seq, GetBoolAttrOr(c->node->def(), "return_sequences", true));
  Node* g = c->builder->AddNode(absl::StrCat(op.name, "Grad"),
                                {c->grad_outputs[0], c->inputs[0], c->inputs[1], c->inputs[2], c->inputs[3],
                                 c->outputs[1], c->outputs[2], c->outputs[3]},
                                {Attr("return_sequences", seq)});
  if (g == nullptr) return c->builder->status();
  c->grad_inputs = {Output(g, 0), Output(g, 1), Output(g, 2), Output(g, 3)};
  return absl::OkStatus();
}

}  // namespace

WEFT_REGISTER_OP(OpDef{.name = "LSTM",
                       .num_inputs = 4,
                       .num_outputs = 4,
                       .shape_fn = [](InferenceContext* c) { return RecurrentShape(c, kLstm); },
                       .grad_fn = [](GradContext* c) { return RecurrentGradFn(c, kLstm); }});
WEFT_REGISTER_OP(OpDef{.name = "LSTMGrad",
                       .num_inputs = 8,
                       .num_outputs = 4,
                       .shape_fn = [](InferenceContext* c) { return RecurrentGradShape(c, kLstm); }});
WEFT_REGISTER_OP(OpDef{.name = "GRU",
                       .num_inputs = 4,
                       .num_outputs = 4,
                       .shape_fn = [](InferenceContext* c) { return RecurrentShape(c, kGru); },
                       .grad_fn = [](GradContext* c) { return RecurrentGradFn(c, kGru); }});
WEFT_REGISTER_OP(OpDef{.name = "GRUGrad",
                       .num_inputs = 8,
                       .num_outputs = 4,
                       .shape_fn = [](InferenceContext* c) { return RecurrentGradShape(c, kGru); }});

}  // namespace weft
