// Embedding lookup ops: rows of a table gathered by id, and the scatter-add
// that is their gradient.
//
// Embedding(params[V, D], ids) -> out[ids.shape..., D]
//     out[p] = params[ids[p]] for every position p of ids. params is
//     float32; ids is float32 (the trainer feeds features as floats; ids are
//     small whole numbers, exact in float) or int32, of rank >= 1. An id
//     that is not a whole number in [0, V) is an error at run time naming
//     its position and value. The gradient flows to params only.
// EmbeddingGrad(ids, g[ids.shape..., D], params[V, D]) -> dparams[V, D]
//     dparams[v] = the sum of g[p] over the positions p with ids[p] == v
//     (zeros for rows no id names). params is read for its shape only, so
//     that dparams has the table's shape without an attribute to keep in
//     step with it.
//
// The same gradient as touched rows, for a parameter server (the strategy
// rewrite, master/strategies/parameter_server_common.cc, sends these
// instead of the dense table):
// EmbeddingGradRows(ids, g[ids.shape..., D]) -> (rows int32 [U], values [U, D])
//     rows: the distinct ids in order of first appearance; values[u]: the
//     sum of g[p] over the positions with ids[p] == rows[u], added in
//     position order as EmbeddingGrad adds them. Attr num_rows (V, the
//     table's rows) bounds the ids, so that the op needs no copy of the
//     table beside it.
// ScatterRows(rows int32 [U], values [U, D], like[V, D]) -> dense[V, D]
//     dense[rows[u]] += values[u], zeros elsewhere: with EmbeddingGradRows'
//     outputs, EmbeddingGrad's result bit for bit. A row outside [0, V) is
//     an error naming its position.
#include <climits>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/gradients.h"
#include "graph/op_registry.h"
#include "graph/ops/shape_util.h"

namespace weft {
namespace {

using shape_util::ExpectFloat;
using shape_util::ExpectMinRank;
using shape_util::ExpectRank;
using shape_util::MergeDim;

// ids (input `i`): float32 or int32, rank >= 1.
absl::Status ExpectIds(InferenceContext* c, int i) {
  if (c->input_types[i] != DType::kFloat32 && c->input_types[i] != DType::kInt32) {
    return c->Error(absl::StrCat("ids must be float32 or int32 (whole numbers naming rows of params), got ",
                                 DTypeName(c->input_types[i])));
  }
  return ExpectMinRank(c, i, 1, "ids");
}

// params (input `i`): the float32 table [V, D].
absl::Status ExpectTable(InferenceContext* c, int i) {
  RETURN_IF_ERROR(ExpectFloat(c, i, "params"));
  return ExpectRank(c, i, 2, "params [rows, width]");
}

// ids' shape with the table's width appended.
TensorShape RowsOf(const TensorShape& ids, int64_t width) {
  TensorShape out = ids;
  out.AddDim(width);
  return out;
}

absl::Status EmbeddingShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectTable(c, 0));
  RETURN_IF_ERROR(ExpectIds(c, 1));
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = RowsOf(c->input_shapes[1], c->input_shapes[0].dim(1));
  return absl::OkStatus();
}

absl::Status EmbeddingGradShape(InferenceContext* c) {
  RETURN_IF_ERROR(ExpectIds(c, 0));
  RETURN_IF_ERROR(ExpectFloat(c, 1, "g"));
  RETURN_IF_ERROR(ExpectTable(c, 2));
  const TensorShape& ids = c->input_shapes[0];
  const TensorShape& g = c->input_shapes[1];
  const TensorShape& params = c->input_shapes[2];
  const TensorShape want = RowsOf(ids, params.dim(1));
  if (!MergeShapes(g, want).ok()) {
    return c->Error(absl::StrCat("g ", g.DebugString(), " must be ids' shape ", ids.DebugString(),
                                 " and a row of params ", params.DebugString(), ": ", want.DebugString()));
  }
  auto width = MergeDim(params.dim(1), g.dim(g.rank() - 1));
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = TensorShape{params.dim(0), width.ok() ? *width : -1};
  return absl::OkStatus();
}

absl::Status EmbeddingGradFn(GradContext* c) {
  Node* g = c->builder->AddNode("EmbeddingGrad", {c->inputs[1], c->grad_outputs[0], c->inputs[0]});
  if (g == nullptr) return c->builder->status();
  c->grad_inputs[0] = Output(g, 0);  // none to ids: they are indexes
  return absl::OkStatus();
}

absl::Status EmbeddingGradRowsShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(int64_t rows, GetIntAttr(c->node, "num_rows"));
  if (rows < 0 || rows > INT32_MAX) return c->Error(absl::StrCat("num_rows must be in [0, 2^31), got ", rows));
  RETURN_IF_ERROR(ExpectIds(c, 0));
  RETURN_IF_ERROR(ExpectFloat(c, 1, "g"));
  const TensorShape& ids = c->input_shapes[0];
  const TensorShape& g = c->input_shapes[1];
  if (g.rank() != ids.rank() + 1 || !MergeShapes(TensorShape(g.dims().subspan(0, ids.rank())), ids).ok()) {
    return c->Error(absl::StrCat("g ", g.DebugString(), " must be ids' shape ", ids.DebugString(), " and a row"));
  }
  c->output_types[0] = DType::kInt32;
  c->output_shapes[0] = TensorShape{-1};
  c->output_types[1] = DType::kFloat32;
  c->output_shapes[1] = TensorShape{-1, g.dim(g.rank() - 1)};
  return absl::OkStatus();
}

absl::Status ScatterRowsShape(InferenceContext* c) {
  if (c->input_types[0] != DType::kInt32) {
    return c->Error(absl::StrCat("rows must be int32, got ", DTypeName(c->input_types[0])));
  }
  RETURN_IF_ERROR(ExpectRank(c, 0, 1, "rows"));
  RETURN_IF_ERROR(ExpectFloat(c, 1, "values"));
  RETURN_IF_ERROR(ExpectRank(c, 1, 2, "values [rows, width]"));
  RETURN_IF_ERROR(ExpectTable(c, 2));
  const TensorShape& rows = c->input_shapes[0];
  const TensorShape& values = c->input_shapes[1];
  const TensorShape& like = c->input_shapes[2];
  if (!MergeDim(rows.dim(0), values.dim(0)).ok() || !MergeDim(values.dim(1), like.dim(1)).ok()) {
    return c->Error(absl::StrCat("values ", values.DebugString(), " must have a row per entry of rows ",
                                 rows.DebugString(), " and the width of ", like.DebugString()));
  }
  c->output_types[0] = DType::kFloat32;
  c->output_shapes[0] = like;
  return absl::OkStatus();
}

}  // namespace

WEFT_REGISTER_OP(OpDef{.name = "EmbeddingGradRows", .num_inputs = 2, .num_outputs = 2,
                       .shape_fn = EmbeddingGradRowsShape});
WEFT_REGISTER_OP(OpDef{.name = "ScatterRows", .num_inputs = 3, .num_outputs = 1, .shape_fn = ScatterRowsShape});
WEFT_REGISTER_OP(OpDef{
    .name = "Embedding", .num_inputs = 2, .num_outputs = 1, .shape_fn = EmbeddingShape, .grad_fn = EmbeddingGradFn});
WEFT_REGISTER_OP(OpDef{.name = "EmbeddingGrad", .num_inputs = 3, .num_outputs = 1, .shape_fn = EmbeddingGradShape});

}  // namespace weft
