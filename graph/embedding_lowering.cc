// The embedding layers of a ModelSpec (proto/job.proto's EmbeddingLayer and
// PositionEmbeddingLayer), members of ModelLowering: token embeddings
// looked up by id, and a learned table added at every position. Both keep
// one trainable variable, `embeddings`, created by the training pass and
// read by the evaluation pass; neither differs between the two.
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/attr.h"
#include "graph/model_lowering.h"

namespace weft {

// ids [batch, ...] (whole numbers, as floats) -> [batch, ..., output_dim].
// The table is initialised glorot_uniform: the Variable op has no
// fixed-range uniform (Keras's default, U(-0.05, 0.05)), and glorot's
// sqrt(6 / (input_dim + output_dim)) is of the same order for a character
// vocabulary. The Embedding op refuses, at run time, an id outside
// [0, input_dim), naming its position and value.
absl::Status ModelLowering::Embedding(int i, Output* x) {
  const EmbeddingLayer& e = model_.layer(i).embedding();
  if (e.input_dim() <= 0) {
    return Error(i, absl::StrCat("embedding.input_dim (the vocabulary size) must be positive, got ", e.input_dim()));
  }
  if (e.output_dim() <= 0) {
    return Error(i, absl::StrCat("embedding.output_dim (the embedding width) must be positive, got ",
                                 e.output_dim()));
  }
  const TensorShape& in = x->shape();
  if (in.rank() < 2) {
    return Error(i, absl::StrCat("embedding needs ids [batch, sequence], got ", in.DebugString()));
  }
  LayerVars& v = vars_[i];
  if (!v.embeddings.valid()) {
    v.embeddings = b_->Variable("embeddings", DType::kFloat32, {e.input_dim(), e.output_dim()}, "glorot_uniform",
                                job_.seed() + i);
    Track(v.embeddings);
  }
  *x = b_->Op("Embedding", {v.embeddings, *x});
  return absl::OkStatus();
}

// x [batch, seq, D] + a learned [seq, D], the same for every example. As a
// BiasAdd over x viewed as [batch, seq * D], so the sum and its gradient
// (the table's: the sum over the batch) are ops weft already has.
absl::Status ModelLowering::PositionEmbedding(int i, Output* x) {
  const TensorShape& in = x->shape();
  if (in.rank() != 3 || in.dim(1) <= 0 || in.dim(2) <= 0) {
    return Error(i, absl::StrCat("position_embedding needs a known [batch, sequence, features] input, got ",
                                 in.DebugString(), "; put it after an embedding layer"));
  }
  const int64_t seq = in.dim(1), width = in.dim(2);
  int64_t flat = 0;
  if (__builtin_mul_overflow(seq, width, &flat)) {
    return Error(i, absl::StrCat("position_embedding's table ", in.DebugString(), " is too large"));
  }
  LayerVars& v = vars_[i];
  if (!v.embeddings.valid()) {
    v.embeddings = b_->Variable("embeddings", DType::kFloat32, {seq, width}, "glorot_uniform", job_.seed() + i);
    Track(v.embeddings);
  }
  Output rows = b_->Op("Reshape", {*x}, {Attr("shape", std::vector<int64_t>{-1, flat})});
  Output table = b_->Op("Reshape", {v.embeddings}, {Attr("shape", std::vector<int64_t>{flat})});
  Output sum = b_->Op("BiasAdd", {rows, table});
  *x = b_->Op("Reshape", {sum}, {Attr("shape", std::vector<int64_t>{-1, seq, width})});
  return absl::OkStatus();
}

}  // namespace weft
