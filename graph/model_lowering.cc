#include "graph/model_lowering.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/training_pass.h"

namespace weft {
namespace {

Output Activate(GraphBuilder* b, Output x, Activation a) {
  switch (a) {
    case RELU: return b->Op("Relu", {x});
    case SIGMOID: return b->Op("Sigmoid", {x});
    case TANH: return b->Op("Tanh", {x});
    case SOFTMAX: return b->Op("Softmax", {x});
    default: return x;
  }
}

// The model's last layer leaves a softmax to the loss.
Output ActivateUnlessLastSoftmax(GraphBuilder* b, Output x, Activation a, bool last) {
  return last && a == SOFTMAX ? x : Activate(b, x, a);
}

const char* KindName(const LayerSpec& l) {
  switch (l.kind_case()) {
    case LayerSpec::kDense: return "dense";
    case LayerSpec::kConv2D: return "conv2d";
    case LayerSpec::kMaxPool: return "max_pool";
    case LayerSpec::kFlatten: return "flatten";
    case LayerSpec::kDropout: return "dropout";
    case LayerSpec::kActivation: return "activation";
    case LayerSpec::kReshape: return "reshape";
    case LayerSpec::kBatchNorm: return "batch_norm";
    case LayerSpec::kAdd: return "add";
    case LayerSpec::kGlobalAvgPool: return "global_avg_pool";
    case LayerSpec::kLayerNorm: return "layer_norm";
    case LayerSpec::kMultiHeadAttention: return "multi_head_attention";
    case LayerSpec::kEmbedding: return "embedding";
    case LayerSpec::kPositionEmbedding: return "position_embedding";
    case LayerSpec::kAvgPool: return "avg_pool";
    case LayerSpec::kConcatenate: return "concatenate";
    case LayerSpec::kLstm: return "lstm";
    case LayerSpec::kGru: return "gru";
    default: return "layer";
  }
}

constexpr char kInput[] = "input";

}  // namespace

std::string ModelLowering::LayerName(int i) const {
  const LayerSpec& layer = model_.layer(i);
  return layer.name().empty() ? absl::StrCat("layer", i, "_", KindName(layer)) : layer.name();
}

absl::Status ModelLowering::Error(int i, absl::string_view msg) const {
  const LayerSpec& layer = model_.layer(i);
  return absl::InvalidArgumentError(absl::StrCat("model layer ", i, layer.name().empty() ? "" : " '", layer.name(),
                                                 layer.name().empty() ? "" : "'", ": ", msg));
}

absl::Status ModelLowering::CheckTopology() {
  absl::flat_hash_map<std::string, int> index;
  inputs_.assign(model_.layer_size(), {});
  for (int i = 0; i < model_.layer_size(); ++i) {
    const LayerSpec& layer = model_.layer(i);
    for (const std::string& in : layer.inputs()) {
      if (in == kInput) {
        inputs_[i].push_back(-1);
        continue;
      }
      auto it = index.find(in);
      if (it == index.end()) {
        return Error(i, absl::StrCat("input '", in.substr(0, 64), "' names no earlier layer (nor \"input\")"));
      }
      inputs_[i].push_back(it->second);
    }
    if (layer.inputs().empty()) inputs_[i].push_back(i - 1);  // -1 for the first: the model's input
    const bool joins = layer.kind_case() == LayerSpec::kAdd || layer.kind_case() == LayerSpec::kConcatenate;
    if (joins && inputs_[i].size() < 2) return Error(i, absl::StrCat(KindName(layer), " needs two or more inputs"));
    if (!joins && inputs_[i].size() != 1) {
      return Error(i, absl::StrCat(KindName(layer), " reads one input, got ", inputs_[i].size()));
    }
    if (!index.emplace(LayerName(i), i).second || LayerName(i) == kInput) {
      return Error(i, absl::StrCat("the name '", LayerName(i), "' is taken"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Output> ModelLowering::Forward(Output x, bool training) {
  if (inputs_.size() != static_cast<size_t>(model_.layer_size())) RETURN_IF_ERROR(CheckTopology());
  vars_.resize(model_.layer_size());
  const int last = model_.layer_size() - 1;
  std::vector<Output> outs(model_.layer_size());
  for (int i = 0; i <= last; ++i) {
    std::vector<Output> in;
    for (int j : inputs_[i]) in.push_back(j < 0 ? x : outs[j]);
    NameScope ns(b_, training ? LayerName(i) : absl::StrCat("eval/", LayerName(i)));
    RETURN_IF_ERROR(LowerLayer(i, i == last, training, in, &outs[i]));
    if (!b_->status().ok()) return Annotate(b_->status(), absl::StrCat("model layer ", i));
  }
  return outs[last];
}

absl::Status ModelLowering::LowerLayer(int i, bool last, bool training, const std::vector<Output>& in,
                                       Output* out) {
  const LayerSpec& layer = model_.layer(i);
  *out = in[0];
  switch (layer.kind_case()) {
    case LayerSpec::kDense: return Dense(i, last, out);
    case LayerSpec::kConv2D: return Conv2D(i, last, out);
    case LayerSpec::kMaxPool: return MaxPool(i, out);
    case LayerSpec::kReshape: return Reshape(i, out);
    case LayerSpec::kBatchNorm: return BatchNorm(i, last, training, out);
    case LayerSpec::kLayerNorm: return LayerNorm(i, last, out);
    case LayerSpec::kMultiHeadAttention: return MultiHeadAttention(i, out);
    case LayerSpec::kEmbedding: return Embedding(i, out);
    case LayerSpec::kPositionEmbedding: return PositionEmbedding(i, out);
    case LayerSpec::kAdd: return Add(i, last, in, out);
    case LayerSpec::kAvgPool: return AvgPool(i, out);
    case LayerSpec::kConcatenate: return Concatenate(i, in, out);
    case LayerSpec::kLstm: return Recurrent(i, out);
    case LayerSpec::kGru: return Recurrent(i, out);
    case LayerSpec::kFlatten: {
      const TensorShape& s = out->shape();
      int64_t n = 1;
      for (int d = 1; d < s.rank(); ++d) n *= s.dim(d);
      if (n <= 0) return Error(i, absl::StrCat("cannot flatten input ", s.DebugString()));
      *out = b_->Op("Reshape", {*out}, {Attr("shape", std::vector<int64_t>{-1, n})});
      return absl::OkStatus();
    }
    case LayerSpec::kGlobalAvgPool:
      if (out->shape().rank() != 4) {
        return Error(i, absl::StrCat("global_avg_pool needs an image input, got ", out->shape().DebugString()));
      }
      *out = b_->Op("GlobalAvgPool", {*out});
      return absl::OkStatus();
    case LayerSpec::kDropout: {
      const float rate = layer.dropout().rate();
      if (!(rate >= 0.0f && rate < 1.0f)) return Error(i, absl::StrCat("dropout.rate must be in [0, 1), got ", rate));
      if (training && rate > 0.0f) {
        *out = b_->Op("Dropout", {*out}, {Attr("rate", rate), Attr("seed", static_cast<int64_t>(job_.seed() + i))});
      }
      return absl::OkStatus();
    }
    case LayerSpec::kActivation:
      *out = ActivateUnlessLastSoftmax(b_, *out, layer.activation().activation(), last);
      return absl::OkStatus();
    case LayerSpec::KIND_NOT_SET: break;
  }
  return Error(i, "layer has no kind (dense, conv2d, max_pool, ...)");
}

absl::Status ModelLowering::Reshape(int i, Output* x) {
  // One example keeps its element count: a shape that does not would
  // silently regroup the batch (784 values as 112 rows of 7).
  const TensorShape& in = x->shape();
  std::vector<int64_t> shape{-1};
  int64_t in_elems = 1, out_elems = 1;
  for (int d = 1; d < in.rank(); ++d) in_elems *= in.dim(d);
  for (int64_t d : model_.layer(i).reshape().shape()) {
    if (d <= 0 || __builtin_mul_overflow(out_elems, d, &out_elems)) {
      return Error(i, absl::StrCat("reshape.shape needs positive dimensions that fit, got ", d));
    }
    shape.push_back(d);
  }
  if (out_elems != in_elems) {
    return Error(i, absl::StrCat("reshape.shape holds ", out_elems, " values per example; its input ",
                                 in.DebugString(), " has ", in_elems));
  }
  *x = b_->Op("Reshape", {*x}, {Attr("shape", shape)});
  return absl::OkStatus();
}

absl::Status ModelLowering::Dense(int i, bool last, Output* x) {
  const DenseLayer& d = model_.layer(i).dense();
  const TensorShape in = x->shape();  // a copy: *x changes below
  LayerVars& v = vars_[i];
  if (d.units() <= 0) return Error(i, "dense.units must be positive");
  // A sequence [batch, seq, features] is projected position by position, as
  // rows of features, and reshaped back to [batch, seq, units].
  const bool sequence = in.rank() == 3 && in.dim(1) > 0 && in.dim(2) > 0;
  if (in.rank() != 2 && !sequence) {
    return Error(i, absl::StrCat("dense needs a flat [batch, features] input or a sequence [batch, seq, ",
                                 "features] of known seq and features, got ", in.DebugString(),
                                 "; add a flatten layer before it"));
  }
  const int64_t features = in.dim(in.rank() - 1);
  if (sequence) *x = b_->Op("Reshape", {*x}, {Attr("shape", std::vector<int64_t>{-1, features})});
  if (!v.kernel.valid()) {
    v.kernel = b_->Variable("kernel", DType::kFloat32, {features, d.units()}, "glorot_uniform", job_.seed() + i);
    Track(v.kernel);
    if (!d.no_bias()) {
      v.bias = b_->Variable("bias", DType::kFloat32, {d.units()}, "zeros");
      Track(v.bias);
    }
  }
  *x = b_->Op("MatMul", {*x, v.kernel});
  if (v.bias.valid()) *x = b_->Op("BiasAdd", {*x, v.bias});
  *x = ActivateUnlessLastSoftmax(b_, *x, d.activation(), last);
  if (sequence) *x = b_->Op("Reshape", {*x}, {Attr("shape", std::vector<int64_t>{-1, in.dim(1), d.units()})});
  return absl::OkStatus();
}

absl::Status ModelLowering::Conv2D(int i, bool last, Output* x) {
  const Conv2DLayer& c = model_.layer(i).conv2d();
  const TensorShape& in = x->shape();
  LayerVars& v = vars_[i];
  if (c.filters() <= 0 || c.kernel_size() <= 0) {
    return Error(i, "conv2d.filters and conv2d.kernel_size must be positive");
  }
  if (in.rank() != 4) {
    return Error(i, absl::StrCat("conv2d needs an image input [batch, height, width, channels], got ",
                                 in.DebugString(), "; set input_shape or add a reshape layer"));
  }
  if (!v.kernel.valid()) {
    v.kernel = b_->Variable("kernel", DType::kFloat32, {c.kernel_size(), c.kernel_size(), in.dim(3), c.filters()},
                            "glorot_uniform", job_.seed() + i);
    Track(v.kernel);
    if (!c.no_bias()) {
      v.bias = b_->Variable("bias", DType::kFloat32, {c.filters()}, "zeros");
      Track(v.bias);
    }
  }
  const std::string padding = c.padding().empty() ? "SAME" : c.padding();
  if (padding != "SAME" && padding != "VALID") {
    return Error(i, absl::StrCat("conv2d.padding must be SAME or VALID, got '", padding, "'"));
  }
  *x = b_->Op("Conv2D", {*x, v.kernel},
              {Attr("stride", c.stride() > 0 ? c.stride() : int64_t{1}), Attr("padding", padding)});
  if (v.bias.valid()) *x = b_->Op("BiasAdd", {*x, v.bias});
  *x = ActivateUnlessLastSoftmax(b_, *x, c.activation(), last);
  return absl::OkStatus();
}

absl::Status ModelLowering::MaxPool(int i, Output* x) {
  const MaxPoolLayer& p = model_.layer(i).max_pool();
  const int64_t k = p.pool_size() > 0 ? p.pool_size() : 2;
  const std::string padding = p.padding().empty() ? "VALID" : p.padding();
  if (padding != "SAME" && padding != "VALID") {
    return Error(i, absl::StrCat("max_pool.padding must be SAME or VALID, got '", padding, "'"));
  }
  if (x->shape().rank() != 4) {
    return Error(i, absl::StrCat("max_pool needs an image input, got ", x->shape().DebugString()));
  }
  *x = b_->Op("MaxPool", {*x},
              {Attr("ksize", k), Attr("stride", p.stride() > 0 ? p.stride() : k), Attr("padding", padding)});
  return absl::OkStatus();
}

// A normalisation's trainable gamma (ones) and beta (zeros) over x's last
// axis, and batch norm's moving statistics (`moving`), made by the training
// pass and kept for the evaluation pass.
absl::Status ModelLowering::ScaleAndShift(int i, const char* kind, const Output& x, bool moving) {
  const TensorShape& in = x.shape();
  if (in.rank() < 2 || in.dim(in.rank() - 1) <= 0) {
    return Error(i, absl::StrCat(kind, " needs a known last axis (channels or features), got ", in.DebugString()));
  }
  LayerVars& v = vars_[i];
  if (v.gamma.valid()) return absl::OkStatus();
  const TensorShape c{in.dim(in.rank() - 1)};
  v.gamma = b_->Variable("gamma", DType::kFloat32, c, "ones");
  v.beta = b_->Variable("beta", DType::kFloat32, c, "zeros");
  if (moving) {
    v.moving_mean = b_->Variable("moving_mean", DType::kFloat32, c, "zeros");
    v.moving_var = b_->Variable("moving_variance", DType::kFloat32, c, "ones");
  }
  Track(v.gamma);
  Track(v.beta);
  return absl::OkStatus();
}

absl::Status ModelLowering::BatchNorm(int i, bool last, bool training, Output* x) {
  const BatchNormLayer& bn = model_.layer(i).batch_norm();
  const float momentum = bn.momentum() == 0.0f ? 0.99f : bn.momentum();
  const float epsilon = bn.epsilon() == 0.0f ? 1e-3f : bn.epsilon();
  if (!(momentum > 0.0f && momentum < 1.0f)) {
    return Error(i, absl::StrCat("batch_norm.momentum must be in (0, 1), got ", bn.momentum()));
  }
  if (!(epsilon > 0.0f)) return Error(i, absl::StrCat("batch_norm.epsilon must be positive, got ", bn.epsilon()));
  RETURN_IF_ERROR(ScaleAndShift(i, "batch_norm", *x, /*moving=*/true));
  const LayerVars& v = vars_[i];
  if (training) {
    Node* n = nullptr;
    if (bn.synchronized()) {
      // The global batch's sums: CrossReplicaSum is the identity on one
      // replica and an all-reduce once a strategy replicates the graph.
      Node* sums = b_->AddNode("BatchNormSums", {*x});
      Node* global = sums == nullptr ? nullptr
                                     : b_->AddNode("CrossReplicaSum",
                                                   {Output(sums, 0), Output(sums, 1), Output(sums, 2)});
      if (global == nullptr) return b_->status();
      n = b_->AddNode("BatchNormFromSums",
                      {*x, v.gamma, v.beta, Output(global, 0), Output(global, 1), Output(global, 2)},
                      {Attr("epsilon", epsilon)});
    } else {
      n = b_->AddNode("BatchNorm", {*x, v.gamma, v.beta}, {Attr("epsilon", epsilon)});
    }
    if (n == nullptr) return b_->status();
    *x = Output(n, 0);
    for (const auto& [var, stat] : {std::pair{v.moving_mean, 1}, std::pair{v.moving_var, 2}}) {
      const Output moving = var;  // a lambda may not capture a structured binding (C++17)
      auto it = std::find_if(moving_.begin(), moving_.end(), [&](const MovingStat& m) { return m.var == moving; });
      if (it == moving_.end()) it = moving_.insert(moving_.end(), MovingStat{moving, {}, momentum});
      it->values.push_back(Output(n, stat));
    }
  } else {
    *x = b_->Op("BatchNormInference", {*x, v.gamma, v.beta, v.moving_mean, v.moving_var},
                {Attr("epsilon", epsilon)});
  }
  *x = ActivateUnlessLastSoftmax(b_, *x, bn.activation(), last);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Node*>> ModelLowering::MovingAverageUpdates() {
  std::vector<Node*> updates;
  for (const MovingStat& m : moving_) {
    const Output value = MeanOf(b_, m.values, m.var.node->name() + "_mean");  // over the training passes
    Node* u = b_->AddNode("ApplyMovingAverage", {m.var, value}, {Attr("momentum", m.momentum)},
                          m.var.node->name() + "_update");
    if (u == nullptr) return b_->status();
    updates.push_back(u);
  }
  return updates;
}

// The same op in training and evaluation: each example's own statistics,
// nothing kept between steps.
absl::Status ModelLowering::LayerNorm(int i, bool last, Output* x) {
  const LayerNormLayer& ln = model_.layer(i).layer_norm();
  const float epsilon = ln.epsilon() == 0.0f ? 1e-3f : ln.epsilon();
  if (!(epsilon > 0.0f) || !std::isfinite(epsilon)) {
    return Error(i, absl::StrCat("layer_norm.epsilon must be positive, got ", ln.epsilon()));
  }
  RETURN_IF_ERROR(ScaleAndShift(i, "layer_norm", *x, /*moving=*/false));
  const LayerVars& v = vars_[i];
  Node* n = b_->AddNode("LayerNorm", {*x, v.gamma, v.beta}, {Attr("epsilon", epsilon)});
  if (n == nullptr) return b_->status();
  *x = ActivateUnlessLastSoftmax(b_, Output(n, 0), ln.activation(), last);
  return absl::OkStatus();
}

absl::Status ModelLowering::Add(int i, bool last, const std::vector<Output>& in, Output* out) {
  for (size_t k = 1; k < in.size(); ++k) {
    if (in[k].shape() != in[0].shape()) {
      return Error(i, absl::StrCat("add's inputs must have one shape: input 0 is ", in[0].shape().DebugString(),
                                   ", input ", k, " (", model_.layer(i).inputs(k).substr(0, 64), ") is ",
                                   in[k].shape().DebugString()));
    }
  }
  *out = b_->Op("AddN", in);
  *out = ActivateUnlessLastSoftmax(b_, *out, model_.layer(i).add().activation(), last);
  return absl::OkStatus();
}

}  // namespace weft
