// The in-memory graph IR.
//
// A Graph owns Nodes. Each Node keeps its NodeDef (name, op, attributes,
// requested device) and the resolved form of its inputs, plus the dtypes and
// shapes that inference gave its outputs. Nodes are added in an order where
// every input already exists, so node ids are a topological order; a GraphDef
// in any order is sorted first by FromGraphDef, which rejects cycles, unknown
// ops, dangling inputs and bad shapes with a message naming the node.
//
// Thread-safety: not thread-safe for mutation; a finished graph may be read
// from many threads.
#ifndef WEFT_GRAPH_GRAPH_H_
#define WEFT_GRAPH_GRAPH_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor.h"
#include "graph/op_registry.h"
#include "proto/graph.pb.h"

namespace weft {

class Node;

// Output `index` of `node`.
struct Endpoint {
  Node* node = nullptr;
  int index = 0;
  bool operator==(const Endpoint& o) const { return node == o.node && index == o.index; }
};

class Node {
 public:
  int id() const { return id_; }
  const std::string& name() const { return def_.name(); }
  const std::string& op() const { return def_.op(); }
  const NodeDef& def() const { return def_; }
  const OpDef& op_def() const { return *op_def_; }
  // The requested device (may be partial or empty).
  const std::string& requested_device() const { return def_.device(); }
  void set_requested_device(std::string d) { def_.set_device(std::move(d)); }
  // The device placement chose ("" before placement).
  const std::string& assigned_device() const { return assigned_device_; }
  void set_assigned_device(std::string d) { assigned_device_ = std::move(d); }

  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const Endpoint& input(int i) const { return inputs_[i]; }
  const std::vector<Endpoint>& inputs() const { return inputs_; }
  const std::vector<Node*>& control_inputs() const { return control_inputs_; }

  int num_outputs() const { return static_cast<int>(output_types_.size()); }
  DType output_type(int i) const { return output_types_[i]; }
  const TensorShape& output_shape(int i) const { return output_shapes_[i]; }

  // Consumers, maintained by the graph: (node, input index), and nodes with a
  // control edge from this one.
  struct OutEdge {
    Node* dst;
    int src_output;
    int dst_input;
  };
  const std::vector<OutEdge>& out_edges() const { return out_edges_; }
  const std::vector<Node*>& control_outputs() const { return control_outputs_; }

  // "name (Op)" for messages.
  std::string DebugName() const;

 private:
  friend class Graph;
  int id_ = -1;
  NodeDef def_;
  const OpDef* op_def_ = nullptr;
  std::string assigned_device_;
  std::vector<Endpoint> inputs_;
  std::vector<Node*> control_inputs_;
  std::vector<DType> output_types_;
  std::vector<TensorShape> output_shapes_;
  std::vector<OutEdge> out_edges_;
  std::vector<Node*> control_outputs_;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Builds a graph from a GraphDef whose nodes may come in any order.
  static absl::StatusOr<std::unique_ptr<Graph>> FromGraphDef(const GraphDef& def);
  // Nodes in id order, inputs as "name", "name:k" and "^name".
  GraphDef ToGraphDef() const;
  // A deep copy (placement included).
  std::unique_ptr<Graph> Clone() const;

  // Adds a node whose inputs ("name", "name:k", "^name") already exist, and
  // runs its op's shape function.
  absl::StatusOr<Node*> AddNode(NodeDef def);
  // Adds a node as AddNode does, but without its shape function: its
  // outputs get `output_types` and scalar shapes, and its attributes are not
  // checked. For tests that a kernel defends itself against a graph whose
  // inference never ran (every kernel re-checks what its shape function
  // checks); never for graphs from a request.
  absl::StatusOr<Node*> AddNodeSkippingInference(NodeDef def, std::vector<DType> output_types);
  // Adds a control edge src -> dst. REQUIRES: both nodes belong to this
  // graph and src->id() < dst->id() (keeps ids topological).
  absl::Status AddControlEdge(Node* src, Node* dst);

  Node* FindNode(absl::string_view name) const;
  // Parses "name" or "name:k" into an existing endpoint.
  absl::StatusOr<Endpoint> FindEndpoint(absl::string_view tensor_name) const;
  Node* node(int id) const { return nodes_[id].get(); }
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }

  // A name not used yet: `base`, else base_1, base_2, ...
  std::string UniqueName(absl::string_view base) const;

 private:
  // With `skip_inference_types`, AddNodeSkippingInference.
  absl::StatusOr<Node*> AddNodeImpl(NodeDef def, std::vector<DType>* skip_inference_types);
  // AddNodeImpl's steps; `where` names the node for messages. Resolves
  // def's inputs into `node` (whose op_def is set) and checks their count.
  absl::Status ResolveInputs(const NodeDef& def, const std::string& where, Node* node) const;
  // Runs the shape function (or takes `skip_inference_types`) and sets
  // node's output types and shapes. REQUIRES: ResolveInputs succeeded.
  static absl::Status InferOutputs(const NodeDef& def, const std::string& where,
                                   std::vector<DType>* skip_inference_types, Node* node);

  std::vector<std::unique_ptr<Node>> nodes_;
  absl::flat_hash_map<std::string, Node*> by_name_;
};

// Splits "name:k" into ("name", k); "name" gives k = 0; "^name" gives k = -1.
absl::Status ParseTensorName(absl::string_view s, std::string* node, int* index);
// "name" for output 0, "name:k" otherwise.
std::string TensorName(const Endpoint& e);
// The node a NodeDef input names: "x", "x:1" and "^x" all give "x".
std::string InputNodeName(absl::string_view input);
// `input` ("x", "x:1" or "^x") with its node renamed by `rename`; graph
// rewrites use it to copy nodes under new names.
std::string RenameInputNode(absl::string_view input, const std::function<std::string(const std::string&)>& rename);

}  // namespace weft

#endif  // WEFT_GRAPH_GRAPH_H_
