// The op registry: every op's signature, shape/type inference and gradient.
//
// An op is registered once, at static-initialisation time, from the file that
// defines it:
//
//   WEFT_REGISTER_OP(OpDef{.name = "Relu", .num_inputs = 1, .num_outputs = 1,
//                          .shape_fn = UnchangedShape, .grad_fn = ReluGrad});
//
// Shape inference runs when a node is added to a Graph; a shape function sees
// the node (for attributes) and its inputs' dtypes and shapes, where a
// dimension of -1 is unknown (the batch, typically), and fills the outputs'.
// It returns INVALID_ARGUMENT for a node that cannot work; the graph adds the
// node's name and op to the message.
//
// Libraries that register ops or kernels must be linked with alwayslink = 1,
// or the linker drops their registrations.
//
// Thread-safety: registration happens before main; lookups are thread-safe.
#ifndef WEFT_GRAPH_OP_REGISTRY_H_
#define WEFT_GRAPH_OP_REGISTRY_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"
#include "common/tensor.h"
#include "proto/graph.pb.h"

namespace weft {

struct InferenceContext {
  const NodeDef& node;
  std::vector<DType> input_types;
  std::vector<TensorShape> input_shapes;
  // Sized to the op's num_outputs before the call; the shape function fills them.
  std::vector<DType> output_types;
  std::vector<TensorShape> output_shapes;

  // An INVALID_ARGUMENT status; the graph prefixes node name and op.
  absl::Status Error(absl::string_view message) const { return absl::InvalidArgumentError(message); }
};
using ShapeFn = std::function<absl::Status(InferenceContext*)>;

struct GradContext;  // graph/gradients.h
using GradFn = std::function<absl::Status(GradContext*)>;

struct OpDef {
  std::string name;
  int num_inputs = 0;   // -1: one or more (variadic)
  int num_outputs = 1;  // -1: one per input (with num_inputs -1)
  // When set, the node's int attribute of this name gives the number of
  // outputs instead (e.g. UnpackTensors); num_outputs is then ignored.
  std::string num_outputs_attr;
  // Has effects beyond its outputs (variables, randomness): kept when it is a
  // target, never merged with a twin, never evaluated at graph-build time.
  bool stateful = false;
  ShapeFn shape_fn;
  // Null: no gradient flows through the op (autodiff reports an error when a
  // trainable variable's gradient would need one).
  GradFn grad_fn;
};

class OpRegistry {
 public:
  static OpRegistry* Global();

  // REQUIRES: no op of that name is registered yet (a programmer error).
  void Register(OpDef def);
  // nullptr when unknown.
  const OpDef* Find(absl::string_view name) const;
  // NOT_FOUND "unknown op 'X'" when unknown.
  absl::StatusOr<const OpDef*> Lookup(absl::string_view name) const;
  std::vector<std::string> OpNames() const;

 private:
  absl::flat_hash_map<std::string, std::unique_ptr<OpDef>> ops_;
};

namespace internal {
struct OpRegistrar {
  explicit OpRegistrar(OpDef def) { OpRegistry::Global()->Register(std::move(def)); }
};
}  // namespace internal

#define WEFT_REGISTER_OP(...) WEFT_REGISTER_OP_UNIQ_(__COUNTER__, __VA_ARGS__)
#define WEFT_REGISTER_OP_UNIQ_(ctr, ...) WEFT_REGISTER_OP_UNIQ2_(ctr, __VA_ARGS__)
#define WEFT_REGISTER_OP_UNIQ2_(ctr, ...) \
  static ::weft::internal::OpRegistrar weft_op_registrar_##ctr(__VA_ARGS__)

// Common shape functions.
absl::Status UnchangedShape(InferenceContext* c);   // output 0 = input 0
absl::Status ScalarFloatShape(InferenceContext* c); // output 0 = float32 scalar
// Checks that input `i` has dtype `want`.
absl::Status ExpectInputType(InferenceContext* c, int i, DType want);
// Checks that input `i` has rank `rank`.
absl::Status ExpectInputRank(InferenceContext* c, int i, int rank);
// Merges two possibly-unknown shapes; INVALID_ARGUMENT when they disagree.
absl::StatusOr<TensorShape> MergeShapes(const TensorShape& a, const TensorShape& b);

}  // namespace weft

#endif  // WEFT_GRAPH_OP_REGISTRY_H_
