// CPU kernel for InputBatch (graph/ops/data_ops.cc): reads one shard of a
// dataset (or, with global_batch, its slice of each window of the whole
// split's order) and yields its batches step after step.
//
// Per (session, node) state, an InputPipeline, lives in the step's
// ResourceMgr under the node's name: an InputState (the shard and a
// BatchIterator over it, whose own thread prefetches batches, the spec's
// `prefetch`, default 2, so that a step rarely waits for one) and the attrs
// it was built from. A kernel whose attrs differ replaces it (see
// InputPipeline).
//
// The unsharded split is cached process-wide (DatasetCache), keyed by the
// dataset attribute, split, example shape and num_classes, and held by weak
// reference: replicas and sessions in one process that read the same data
// decompress it once, and it is freed when the last InputState holding it
// goes. A file changed on disk while the cache holds its split is not
// re-read. A global_batch node reads the cached split itself (no shard), so
// it shares it with sharded nodes of the same data.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "graph/input_ops.h"
#include "runtime/data/dataset.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace {

// Loaded splits shared by every InputBatch kernel in the process.
// Thread-safe; loading one key never blocks lookups of another.
class DatasetCache {
 public:
  static DatasetCache* Global() {
    static auto* cache = new DatasetCache;
    return cache;
  }

  using Loader = std::function<absl::StatusOr<data::InMemoryDataset>()>;

  // The dataset cached under `key`, or `load`'s result, cached while any
  // caller holds it. A failed load is not cached.
  absl::StatusOr<std::shared_ptr<const data::InMemoryDataset>> Get(const std::string& key, const Loader& load) {
    std::shared_ptr<Entry> entry;
    {
      absl::MutexLock lock(&mu_);
      std::shared_ptr<Entry>& e = entries_[key];
      if (e == nullptr) e = std::make_shared<Entry>();
      entry = e;
    }
    absl::MutexLock lock(&entry->mu);
    if (std::shared_ptr<const data::InMemoryDataset> ds = entry->dataset.lock()) return ds;
    ASSIGN_OR_RETURN(data::InMemoryDataset loaded, load());
    auto ds = std::make_shared<const data::InMemoryDataset>(std::move(loaded));
    entry->dataset = ds;
    return ds;
  }

 private:
  struct Entry {
    absl::Mutex mu;  // held while loading, so one key loads once
    std::weak_ptr<const data::InMemoryDataset> dataset ABSL_GUARDED_BY(mu);
  };
  absl::Mutex mu_;
  // Entries are small and there is one per distinct dataset; never erased.
  absl::flat_hash_map<std::string, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
};

struct InputAttrs {
  std::string dataset_attr;  // base64, also the cache key's heart
  DatasetSpec spec;
  bool train = true;
  int64_t batch_size = 0;
  int64_t shard_index = 0;
  int64_t num_shards = 1;
  uint64_t seed = 0;
  std::vector<int64_t> example_shape;
  int64_t num_classes = 0;
  int64_t skip_batches = 0;
  int64_t global_batch = 0;  // 0: the shard; else windows of this many examples
  // Everything that decides which examples the node reads in which order,
  // skip_batches (where a new pipeline starts) aside.
  std::string pipeline_key;
};

std::string SplitName(bool train) { return train ? "train" : "test"; }

// The files a split is read from, for error messages.
std::string SourceFiles(const DatasetSpec& spec, bool train) {
  if (spec.format() == DatasetSpec::TFRECORD) {
    return absl::StrJoin(train ? spec.train_files() : spec.test_files(), ", ");
  }
  if (spec.format() == DatasetSpec::TEXT || spec.format() == DatasetSpec::SERIES) {
    return absl::StrJoin(spec.train_files(), ", ");  // both splits
  }
  const std::string& images = train ? spec.train_images() : spec.test_images();
  const std::string name = images.empty() ? "(default IDX names)" : images;
  return spec.dir().empty() ? name : absl::StrCat(spec.dir(), "/", name);
}

// One node's pipeline in one session. Thread-safe: concurrent steps take
// batches in turn.
class InputState {
 public:
  static absl::StatusOr<std::shared_ptr<InputState>> Create(const InputAttrs& a) {
    const std::string key = absl::StrCat(SplitName(a.train), "|", absl::StrJoin(a.example_shape, ","), "|",
                                         a.num_classes, "|", a.dataset_attr);
    ASSIGN_OR_RETURN(std::shared_ptr<const data::InMemoryDataset> full,
                     DatasetCache::Global()->Get(key, [&]() -> absl::StatusOr<data::InMemoryDataset> {
                       absl::StatusOr<data::InMemoryDataset> ds =
                           data::LoadDataset(a.spec, a.train, a.example_shape, a.num_classes);
                       if (!ds.ok()) {
                         return Annotate(ds.status(), absl::StrCat("loading the ", SplitName(a.train), " split"));
                       }
                       return ds;
                     }));
    if (full->example_shape() != a.example_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the ", SplitName(a.train), " split of ", SourceFiles(a.spec, a.train), " has examples of shape [",
          absl::StrJoin(full->example_shape(), ","), "], not example_shape [", absl::StrJoin(a.example_shape, ","),
          "]"));
    }
    auto state = std::shared_ptr<InputState>(new InputState(std::move(full), a.train));
    const bool global = a.global_batch > 0;
    // A global_batch node reads the whole split: its slice of each window
    // comes from the window's positions, not from the file order.
    if (a.num_shards > 1 && !global) {
      ASSIGN_OR_RETURN(data::InMemoryDataset shard, state->full_->Shard(a.shard_index, a.num_shards));
      state->shard_ = std::make_unique<const data::InMemoryDataset>(std::move(shard));
    }
    const data::InMemoryDataset* source = state->shard_ != nullptr ? state->shard_.get() : state->full_.get();
    std::string where;
    if (global) {
      where = absl::StrCat("shard ", a.shard_index, " of num_shards=", a.num_shards,
                           " reading windows of global_batch=", a.global_batch, " of the ", SplitName(a.train),
                           " split of ", SourceFiles(a.spec, a.train), " (", source->size(), " examples)");
      if (source->size() < a.global_batch) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": the split is smaller than one global batch"));
      }
    } else {
      where = absl::StrCat("shard ", a.shard_index, " of num_shards=", a.num_shards, " of the ", SplitName(a.train),
                           " split of ", SourceFiles(a.spec, a.train), " (", state->full_->size(),
                           " examples) holds ", source->size(), " examples");
      if (a.train && source->size() < a.batch_size) {
        return absl::InvalidArgumentError(absl::StrCat(where, ", fewer than batch_size=", a.batch_size));
      }
    }
    if (source->size() == 0) return absl::InvalidArgumentError(where);

    data::BatchOptions o = data::BatchOptionsFromSpec(a.spec, a.batch_size, a.seed, a.train);
    o.num_epochs = 0;  // test passes repeat too, each ended by an empty batch
    if (a.train) o.skip_batches = a.skip_batches;
    if (global) {
      o.window = a.global_batch;
      // Below global_batch: ReadAttrs checked batch_size * num_shards ==
      // global_batch and shard_index < num_shards.
      o.window_offset = a.shard_index * a.batch_size;
    }
    absl::StatusOr<std::unique_ptr<data::BatchIterator>> it = data::BatchIterator::Create(source, o);
    if (!it.ok()) return Annotate(it.status(), where);
    absl::MutexLock lock(&state->mu_);
    state->iterator_ = *std::move(it);
    return state;
  }

  // The next batch: in training, of the current epoch or else the next one;
  // in testing, of the current pass, or an empty batch at its end.
  absl::StatusOr<data::Batch> Next() {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(std::optional<data::Batch> batch, iterator_->Next());
    if (batch.has_value()) return *std::move(batch);
    if (!train_) return EmptyBatchLocked();
    // An epoch ended; the call after a nullopt starts the next one.
    ASSIGN_OR_RETURN(batch, iterator_->Next());
    if (!batch.has_value()) {
      return absl::InternalError(absl::StrCat("epoch ", iterator_->epoch(), " started without a batch"));
    }
    return *std::move(batch);
  }

 private:
  InputState(std::shared_ptr<const data::InMemoryDataset> full, bool train) : full_(std::move(full)), train_(train) {}

  // The end-of-pass marker: features [0, example_shape...], labels [0].
  data::Batch EmptyBatchLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    TensorShape shape({0});
    for (int64_t d : full_->example_shape()) shape.AddDim(d);
    data::Batch b;
    // Zero rows: no payload, so these cannot fail; Allocate keeps the path
    // free of the throwing constructor all the same.
    b.features = Tensor::Allocate(DType::kFloat32, shape).value_or(Tensor());
    b.labels = Tensor::Allocate(full_->float_examples() ? DType::kFloat32 : DType::kInt32, TensorShape({0}))
                   .value_or(Tensor());
    b.epoch = iterator_->epoch() - 1;  // the pass that just ended
    return b;
  }

  // Held so that other sessions and replicas in the process share the split.
  const std::shared_ptr<const data::InMemoryDataset> full_;
  std::unique_ptr<const data::InMemoryDataset> shard_;  // null when unsharded
  const bool train_;
  absl::Mutex mu_;
  // Reads *shard_ or *full_; declared last so that it (and its prefetch
  // thread) goes first.
  std::unique_ptr<data::BatchIterator> iterator_ ABSL_GUARDED_BY(mu_);
};

// A node's pipeline in one session and the attrs it was built from: the
// resource under the node's name. Node names outlive attrs: an elastic job
// re-planned for another replica count gives a replica's InputBatch node
// the same name but another shard_index, num_shards and batch_size, and a
// pipeline built for the old ones would read the wrong slice of every
// global batch. So a kernel whose attrs differ (pipeline_key) replaces the
// pipeline with one built from its own, starting at its skip_batches; with
// the same attrs, a graph registered again continues the session's
// pipeline. Thread-safe; steps that already hold the old state finish with
// it.
class InputPipeline {
 public:
  InputPipeline(std::string key, std::shared_ptr<InputState> state) : key_(std::move(key)), state_(std::move(state)) {}

  // The state for `a`, built now if the current one is for other attrs. A
  // failed build keeps the current state (the next call tries again).
  absl::StatusOr<std::shared_ptr<InputState>> StateFor(const InputAttrs& a) {
    absl::MutexLock lock(&mu_);
    if (a.pipeline_key != key_) {
      ASSIGN_OR_RETURN(std::shared_ptr<InputState> rebuilt, InputState::Create(a));
      key_ = a.pipeline_key;
      state_ = std::move(rebuilt);
    }
    return state_;
  }

 private:
  absl::Mutex mu_;  // held while building, so that one change of attrs builds once
  std::string key_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<InputState> state_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<InputAttrs> ReadAttrs(const NodeDef& def) {
  InputAttrs a;
  ASSIGN_OR_RETURN(a.dataset_attr, GetStringAttr(def, "dataset"));
  ASSIGN_OR_RETURN(a.spec, DecodeDatasetSpecAttr(a.dataset_attr));
  ASSIGN_OR_RETURN(a.train, GetBoolAttr(def, "train"));
  ASSIGN_OR_RETURN(a.batch_size, GetIntAttr(def, "batch_size"));
  ASSIGN_OR_RETURN(a.shard_index, GetIntAttrOr(def, "shard_index", 0));
  ASSIGN_OR_RETURN(a.num_shards, GetIntAttrOr(def, "num_shards", 1));
  ASSIGN_OR_RETURN(int64_t seed, GetIntAttrOr(def, "seed", 0));
  a.seed = static_cast<uint64_t>(seed);
  ASSIGN_OR_RETURN(TensorShape shape, GetShapeAttr(def, "example_shape"));
  a.example_shape.assign(shape.dims().begin(), shape.dims().end());
  ASSIGN_OR_RETURN(a.num_classes, GetIntAttrOr(def, "num_classes", 0));
  ASSIGN_OR_RETURN(a.skip_batches, GetIntAttrOr(def, "skip_batches", 0));
  ASSIGN_OR_RETURN(a.global_batch, GetIntAttrOr(def, "global_batch", 0));
  ASSIGN_OR_RETURN(bool float_targets, GetBoolAttrOr(def, "float_targets", false));
  if (float_targets != (a.spec.format() == DatasetSpec::SERIES)) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'float_targets' is ", float_targets ? "true" : "false",
                                                   ", but only a SERIES dataset (this one is ",
                                                   DatasetSpec::Format_Name(a.spec.format()),
                                                   ") has float targets"));
  }
  // The op's shape function has checked these; a kernel built from a
  // hand-made NodeDef gets the same answer.
  if (a.batch_size < 1) return absl::InvalidArgumentError(absl::StrCat("batch_size must be >= 1, got ", a.batch_size));
  if (a.num_shards < 1 || a.shard_index < 0 || a.shard_index >= a.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_index ", a.shard_index, " is not in [0, num_shards=", a.num_shards, ")"));
  }
  if (a.global_batch < 0) {
    return absl::InvalidArgumentError(absl::StrCat("global_batch must be >= 0, got ", a.global_batch));
  }
  if (a.global_batch > 0) {
    if (!a.train) {
      return absl::InvalidArgumentError(
          absl::StrCat("global_batch ", a.global_batch, " is for the train split only (this node has train=false)"));
    }
    int64_t product = 0;
    const bool fits = CheckedMul(a.batch_size, a.num_shards, &product);
    if (!fits || product != a.global_batch) {
      return absl::InvalidArgumentError(
          absl::StrCat("global_batch ", a.global_batch, " is not batch_size=", a.batch_size, " * num_shards=",
                       a.num_shards, fits ? absl::StrCat(" = ", product) : " (which overflows 64 bits)"));
    }
  }
  a.pipeline_key = absl::StrCat(SplitName(a.train), "|", a.batch_size, "|", a.shard_index, "|", a.num_shards, "|",
                                a.global_batch, "|", a.seed, "|", absl::StrJoin(a.example_shape, ","), "|",
                                a.num_classes, "|", a.dataset_attr);
  return a;
}

class InputBatchOp : public OpKernel {
 public:
  explicit InputBatchOp(OpKernelConstruction* c) : OpKernel(c) {
    absl::StatusOr<InputAttrs> a = ReadAttrs(c->def());
    if (!a.ok()) {
      c->SetStatus(a.status());
      return;
    }
    attrs_ = *std::move(a);
  }

  void Compute(OpKernelContext* ctx) override {
    // The first step of a session loads the data; later ones find it.
    absl::StatusOr<std::shared_ptr<InputPipeline>> pipeline = ctx->resources()->LookupOrCreate<InputPipeline>(
        ctx->node().name(), [this]() -> absl::StatusOr<std::shared_ptr<InputPipeline>> {
          ASSIGN_OR_RETURN(std::shared_ptr<InputState> state, InputState::Create(attrs_));
          return std::make_shared<InputPipeline>(attrs_.pipeline_key, std::move(state));
        });
    OP_REQUIRES_OK(ctx, pipeline.status());
    absl::StatusOr<std::shared_ptr<InputState>> state = (*pipeline)->StateFor(attrs_);
    OP_REQUIRES_OK(ctx, state.status());
    absl::StatusOr<data::Batch> batch = (*state)->Next();
    OP_REQUIRES_OK(ctx, batch.status());
    ctx->set_output(0, std::move(batch->features));
    ctx->set_output(1, std::move(batch->labels));
    ctx->set_output(2, Tensor::Scalar<int64_t>(batch->epoch));
  }

 private:
  InputAttrs attrs_;
};

WEFT_REGISTER_KERNEL("InputBatch", "CPU", InputBatchOp);

}  // namespace
}  // namespace weft
