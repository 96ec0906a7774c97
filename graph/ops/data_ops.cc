// Ops that read training data on the task that runs them: InputBatch.
// graph/input_ops.h builds them; the CPU kernel is
// runtime/kernels/cpu/data_kernels.cc.
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "graph/attr.h"
#include "graph/op_registry.h"

namespace weft {
namespace {

absl::Status InputBatchShape(InferenceContext* c) {
  ASSIGN_OR_RETURN(std::string dataset, GetStringAttr(c->node, "dataset"));
  std::string bytes;
  if (dataset.empty() || !absl::Base64Unescape(dataset, &bytes)) {
    return c->Error("attribute 'dataset' must be a base64-encoded DatasetSpec (see graph/input_ops.h)");
  }
  ASSIGN_OR_RETURN(bool train, GetBoolAttr(c->node, "train"));
  ASSIGN_OR_RETURN(int64_t batch_size, GetIntAttr(c->node, "batch_size"));
  if (batch_size < 1) return c->Error(absl::StrCat("attribute 'batch_size' must be >= 1, got ", batch_size));
  ASSIGN_OR_RETURN(int64_t num_shards, GetIntAttrOr(c->node, "num_shards", 1));
  ASSIGN_OR_RETURN(int64_t shard_index, GetIntAttrOr(c->node, "shard_index", 0));
  if (num_shards < 1) return c->Error(absl::StrCat("attribute 'num_shards' must be >= 1, got ", num_shards));
  if (shard_index < 0 || shard_index >= num_shards) {
    return c->Error(absl::StrCat("attribute 'shard_index' ", shard_index, " is not in [0, num_shards=", num_shards,
                                 ")"));
  }
  ASSIGN_OR_RETURN(int64_t global_batch, GetIntAttrOr(c->node, "global_batch", 0));
  if (global_batch < 0) return c->Error(absl::StrCat("attribute 'global_batch' must be >= 0, got ", global_batch));
  if (global_batch > 0) {
    // The test split is read in file order, one pass, partial batches kept:
    // nothing there for windows of one global order to keep consistent.
    if (!train) {
      return c->Error(absl::StrCat("attribute 'global_batch' ", global_batch,
                                   " is for the train split only (this node has train=false)"));
    }
    int64_t product = 0;
    const bool fits = CheckedMul(batch_size, num_shards, &product);
    if (!fits || product != global_batch) {
      return c->Error(absl::StrCat("attribute 'global_batch' ", global_batch, " is not batch_size=", batch_size,
                                   " * num_shards=", num_shards,
                                   fits ? absl::StrCat(" = ", product) : " (which overflows 64 bits)"));
    }
  }
  RETURN_IF_ERROR(GetIntAttrOr(c->node, "seed", 0).status());
  ASSIGN_OR_RETURN(int64_t skip, GetIntAttrOr(c->node, "skip_batches", 0));
  if (skip < 0) return c->Error(absl::StrCat("attribute 'skip_batches' must be >= 0, got ", skip));
  ASSIGN_OR_RETURN(int64_t num_classes, GetIntAttrOr(c->node, "num_classes", 0));
  if (num_classes < 0) return c->Error(absl::StrCat("attribute 'num_classes' must be >= 0, got ", num_classes));
  ASSIGN_OR_RETURN(TensorShape example, GetShapeAttr(c->node, "example_shape"));
  if (example.rank() < 1) return c->Error("attribute 'example_shape' must have rank >= 1");
  TensorShape features({-1});
  for (int64_t d : example.dims()) {
    if (d < 1) {
      return c->Error(absl::StrCat("attribute 'example_shape' ", example.DebugString(), " has a non-positive dim"));
    }
    features.AddDim(d);
  }
  ASSIGN_OR_RETURN(bool float_targets, GetBoolAttrOr(c->node, "float_targets", false));
  c->output_types = {DType::kFloat32, float_targets ? DType::kFloat32 : DType::kInt32, DType::kInt64};
  c->output_shapes = {features, TensorShape({-1}), TensorShape{}};
  return absl::OkStatus();
}

}  // namespace

// () -> (features float32 [?, example_shape...], labels int32 [?] (float32
// targets with float_targets, which a SERIES dataset needs), epoch int64 []).
// Each run yields the next batch of shard `shard_index` of `num_shards`
// (examples i with i % num_shards == shard_index, split before shuffling) of
// the dataset's train (`train` true) or test split; with `global_batch` > 0
// (train only; it must equal batch_size * num_shards), the next batch_size
// examples at offset shard_index * batch_size of the next window of
// global_batch examples of the whole split's (seed, epoch) order, so that
// the shards of one step read one global batch together whatever their
// number (an elastic job may change num_shards between steps).
// Attrs: dataset (base64 DatasetSpec, graph/input_ops.h), float_targets
// (false; true exactly for a SERIES dataset), train, batch_size,
// shard_index (0), num_shards (1), seed (0), example_shape, num_classes (0:
// unchecked), skip_batches (0: training starts with the first batch; k: with
// the one after the first k, as when a job resumes at a step; with
// global_batch, k windows), global_batch (0: sharded by file order).
// Train: shuffled by (seed, epoch) unless the spec says no_shuffle, partial
// batches dropped, epochs follow one another forever. Test: file order, the
// last partial batch kept; after the last batch of a pass one EMPTY batch
// (features [0, ...], labels [0]) marks the pass's end, and the next run
// starts the next pass. `epoch` counts epochs (passes) from 0.
// State (the loaded shard and its iterator) lives in the session's
// ResourceMgr under the node's name; a graph whose node of that name has
// other attrs (skip_batches aside) rebuilds it.
WEFT_REGISTER_OP(
    OpDef{.name = "InputBatch", .num_inputs = 0, .num_outputs = 3, .stateful = true, .shape_fn = InputBatchShape});

}  // namespace weft
