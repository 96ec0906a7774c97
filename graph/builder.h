// GraphBuilder: the C++ API for adding ops to a Graph.
//
//   Graph g;
//   GraphBuilder b(&g);
//   Output x = b.Placeholder(DType::kFloat32, {-1, 784}, "x");
//   Output w = b.Variable("w", DType::kFloat32, {784, 10}, "glorot_uniform");
//   Output y = b.Op("MatMul", {x, w});
//   if (!b.status().ok()) ...
//
// Like a TensorFlow Scope, the builder records the first error and turns every
// later call into a no-op that returns an invalid Output, so a sequence of
// calls needs one status check at the end. Names are made unique within the
// graph and prefixed by the current name scope ("dense0/MatMul").
//
// Thread-safety: not thread-safe.
#ifndef WEFT_GRAPH_BUILDER_H_
#define WEFT_GRAPH_BUILDER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "graph/attr.h"
#include "graph/graph.h"

namespace weft {

// A tensor produced by a node: output `index` of `node`.
struct Output {
  Node* node = nullptr;
  int index = 0;

  Output() = default;
  Output(Node* n, int i = 0) : node(n), index(i) {}  // NOLINT: implicit by design
  bool valid() const { return node != nullptr; }
  DType dtype() const { return node->output_type(index); }
  const TensorShape& shape() const { return node->output_shape(index); }
  std::string name() const { return TensorName(Endpoint{node, index}); }
  bool operator==(const Output& o) const { return node == o.node && index == o.index; }
};

class GraphBuilder {
 public:
  // `graph` must outlive the builder.
  explicit GraphBuilder(Graph* graph) : graph_(graph) {}

  Graph* graph() const { return graph_; }
  const absl::Status& status() const { return status_; }
  // Records `s` if no error is recorded yet.
  void UpdateStatus(const absl::Status& s) {
    if (status_.ok() && !s.ok()) status_ = s;
  }

  // Adds a node; returns it, or nullptr after an error. `name` defaults to the
  // op name; either way it is scoped and made unique.
  Node* AddNode(absl::string_view op, absl::Span<const Output> inputs, const AttrList& attrs = {},
                absl::string_view name = "", absl::Span<Node* const> control_inputs = {});
  // AddNode, returning output 0.
  Output Op(absl::string_view op, absl::Span<const Output> inputs, const AttrList& attrs = {},
            absl::string_view name = "") {
    Node* n = AddNode(op, inputs, attrs, name);
    return n == nullptr || n->num_outputs() == 0 ? Output() : Output(n, 0);
  }

  Output Placeholder(DType dtype, const TensorShape& shape, absl::string_view name);
  Output Const(const Tensor& value, absl::string_view name = "Const");
  Output ScalarConst(float value, absl::string_view name = "Const");
  // A variable initialised on first use by `initializer` ("zeros", "ones",
  // "glorot_uniform", "he_normal", "constant" with `init_value`).
  Output Variable(absl::string_view name, DType dtype, const TensorShape& shape, absl::string_view initializer,
                  int64_t seed = 0, float init_value = 0.0f);

  // Name scopes: names of nodes added while a scope is pushed start "scope/".
  void PushScope(absl::string_view scope);
  void PopScope();
  // Device requested for the nodes added from now on ("" = none).
  void set_device(std::string device) { device_ = std::move(device); }
  // Attributes that every `op` node added from now on gets, unless the call
  // gives them itself: MatMul's compute_type under mixed precision, so the
  // gradients' MatMuls that autodiff adds get it too.
  void SetOpDefaults(const std::string& op, AttrList attrs) { op_defaults_[op] = std::move(attrs); }

 private:
  Graph* graph_;
  absl::Status status_;
  std::vector<std::string> scopes_;
  std::string device_;
  std::map<std::string, AttrList> op_defaults_;
};

// Pushes a name scope for the lifetime of the object.
class NameScope {
 public:
  NameScope(GraphBuilder* b, absl::string_view scope) : b_(b) { b_->PushScope(scope); }
  ~NameScope() { b_->PopScope(); }

 private:
  GraphBuilder* b_;
};

}  // namespace weft

#endif  // WEFT_GRAPH_BUILDER_H_
