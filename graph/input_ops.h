// Building the InputBatch op (graph/ops/data_ops.cc): a node that reads one
// shard of a job's dataset on the task it is placed on, so that batches never
// pass through the master.
//
//   ops::InputBatchOptions o;
//   o.train = true;
//   o.batch_size = 64;
//   o.shard_index = replica;
//   o.num_shards = num_replicas;
//   o.example_shape = training_graph.example_shape;
//   o.num_classes = 10;
//   ops::InputBatchOutputs in = ops::InputBatch(&b, job.dataset(), o);
//   // in.features / in.labels replace the `features` / `labels` placeholders.
//
// The `dataset` attribute holds the DatasetSpec as base64 of its binary
// serialisation: AttrValue.s is a proto3 `string`, which must be valid UTF-8
// on the wire, so raw proto bytes are not safe in it.
//
// Thread-safety: as GraphBuilder (not thread-safe); the codec functions are
// thread-safe.
#ifndef WEFT_GRAPH_INPUT_OPS_H_
#define WEFT_GRAPH_INPUT_OPS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor.h"
#include "graph/builder.h"
#include "proto/job.pb.h"

namespace weft {

// The `dataset` attribute's encoding of a DatasetSpec, and back.
// DecodeDatasetSpecAttr: INVALID_ARGUMENT for text that is not base64 of a
// DatasetSpec.
std::string EncodeDatasetSpecAttr(const DatasetSpec& spec);
absl::StatusOr<DatasetSpec> DecodeDatasetSpecAttr(absl::string_view attr);

namespace ops {

struct InputBatchOptions {
  bool train = true;  // train split (shuffled, repeating) or test split (one pass, then an empty batch)
  int64_t batch_size = 32;
  // This node reads examples i with i % num_shards == shard_index (unless
  // global_batch is set).
  int64_t shard_index = 0;
  int64_t num_shards = 1;
  uint64_t seed = 0;          // shuffle seed; the order is a function of (seed, epoch)
  TensorShape example_shape;  // one example's shape; fully defined, rank >= 1
  int64_t num_classes = 0;    // labels must be below it; 0 checks nothing
  // Training: batches of this node's shard to pass over first (a job
  // resumed at a step starts where it left off); with global_batch, windows.
  int64_t skip_batches = 0;
  // Training only; when > 0 it must be batch_size * num_shards. Batch k of
  // an epoch is then the batch_size examples at offset shard_index *
  // batch_size of window k (global_batch examples) of the whole split's
  // (seed, epoch) order, so that the shards of a step read one global batch
  // together however many there are: a job that changes num_shards (and
  // batch_size) at a step boundary, resuming each node with skip_batches =
  // the steps taken, still reads each window of the epoch once. 0: read the
  // shard above.
  int64_t global_batch = 0;
};

struct InputBatchOutputs {
  Output features;  // float32 [?, example_shape...]
  Output labels;    // int32 [?]; float32 targets for a SERIES dataset
  Output epoch;     // int64 scalar: the epoch (or test pass) the batch belongs to
};

// Adds an InputBatch node; after an error the outputs are invalid and
// b->status() holds it (bad options are reported by the op's shape function).
InputBatchOutputs InputBatch(GraphBuilder* b, const DatasetSpec& dataset, const InputBatchOptions& options,
                             absl::string_view name = "InputBatch");

}  // namespace ops
}  // namespace weft

#endif  // WEFT_GRAPH_INPUT_OPS_H_
