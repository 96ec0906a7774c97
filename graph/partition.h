// Partitioning: a placed graph becomes one graph per device.
//
// PartitionGraph copies every node, under its own name, into the GraphDef of
// its assigned device, with NodeDef.device set to that device, and rewrites
// each edge between devices S and D:
//  * data edge from endpoint "src:k": a _Send(src:k) on S and a _Recv on D
//    (dtype and shape of src:k) that every consumer of src:k on D reads; one
//    pair per (endpoint, destination device), however many consumers;
//  * control edge from node c: on S a scalar Const with a control input from
//    c feeds a _Send, and a _Recv on D becomes the control input of every
//    consumer of the edge on D; again one pair per (c, D).
// A pair shares attributes tensor_name ("src:k" for data, "^c" for control),
// send_device S, recv_device D, send_device_incarnation 0 and
// client_terminated false, which with the step id give the rendezvous key
// (RendezvousKey). Inserted nodes are named "_send/src_k/to/<D>",
// "_recv/src_k/to/<D>" (control: "src_control") and "_ctrl/src/to/<D>" with
// <D> the device with '/' and ':' replaced by '_', made unique if taken.
//
// Each partition is a valid graph by itself (Graph::FromGraphDef accepts it
// once the _Send/_Recv ops from :ops are linked). Only devices that hold a
// node get a partition. Kernels for _Send/_Recv belong to the runtime, not
// here.
//
// Errors: FAILED_PRECONDITION naming the node when a node has no full
// assigned device (run PlaceGraph first).
//
// Thread-safety: pure functions; `placed` is only read.
#ifndef WEFT_GRAPH_PARTITION_H_
#define WEFT_GRAPH_PARTITION_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "proto/graph.pb.h"

namespace weft {

// Partitions keyed by device name.
absl::StatusOr<std::map<std::string, GraphDef>> PartitionGraph(const Graph& placed);

// "send_device;incarnation;recv_device;tensor_name;step_id", the incarnation
// as 16 lower-case hex digits and the step id in decimal. The first four parts
// are a _Send/_Recv's attributes; the executor adds the step id at run time.
std::string RendezvousKey(const std::string& send_device, int64_t incarnation, const std::string& recv_device,
                          const std::string& tensor_name, int64_t step_id);

}  // namespace weft

#endif  // WEFT_GRAPH_PARTITION_H_
