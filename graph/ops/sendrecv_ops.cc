// _Send and _Recv: the two ends of a graph edge cut by partitioning
// (graph/partition.h inserts them; the worker's rendezvous carries the value).
//
// _Send(tensor)   no outputs. Hands `tensor` to the rendezvous under the key
//                 RendezvousKey(send_device, send_device_incarnation,
//                 recv_device, tensor_name, step_id).
// _Recv()         one output of dtype `tensor_type` and shape `shape` (dims
//                 may be -1): the value sent under the same key.
//
// Attributes of both: tensor_name, send_device, recv_device (strings);
// send_device_incarnation (int, default 0); client_terminated (bool, default
// false: true when the client, not a graph node, is the other end). _Recv
// adds tensor_type (type) and shape (shape).
//
// Both are stateful: they must never be merged with a twin or folded.
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/op_registry.h"

namespace weft {
namespace {

absl::Status CheckRendezvousAttrs(InferenceContext* c) {
  for (const char* name : {"tensor_name", "send_device", "recv_device"}) {
    ASSIGN_OR_RETURN(std::string value, GetStringAttr(c->node, name));
    if (value.empty()) return c->Error(absl::StrCat("attribute '", name, "' must not be empty"));
  }
  RETURN_IF_ERROR(GetIntAttrOr(c->node, "send_device_incarnation", 0).status());
  RETURN_IF_ERROR(GetBoolAttrOr(c->node, "client_terminated", false).status());
  return absl::OkStatus();
}

absl::Status SendShape(InferenceContext* c) { return CheckRendezvousAttrs(c); }

absl::Status RecvShape(InferenceContext* c) {
  RETURN_IF_ERROR(CheckRendezvousAttrs(c));
  ASSIGN_OR_RETURN(c->output_types[0], GetTypeAttr(c->node, "tensor_type"));
  ASSIGN_OR_RETURN(c->output_shapes[0], GetShapeAttr(c->node, "shape"));
  return absl::OkStatus();
}

}  // namespace

WEFT_REGISTER_OP(OpDef{.name = "_Send", .num_inputs = 1, .num_outputs = 0, .stateful = true, .shape_fn = SendShape});
WEFT_REGISTER_OP(OpDef{.name = "_Recv", .num_inputs = 0, .num_outputs = 1, .stateful = true, .shape_fn = RecvShape});

}  // namespace weft
