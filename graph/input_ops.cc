#include "graph/input_ops.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "graph/attr.h"

namespace weft {

std::string EncodeDatasetSpecAttr(const DatasetSpec& spec) {
  return absl::Base64Escape(spec.SerializeAsString());
}

absl::StatusOr<DatasetSpec> DecodeDatasetSpecAttr(absl::string_view attr) {
  std::string bytes;
  if (!absl::Base64Unescape(attr, &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset attribute is not base64 (", attr.size(), " chars; build it with EncodeDatasetSpecAttr)"));
  }
  DatasetSpec spec;
  if (!spec.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset attribute does not decode to a DatasetSpec (", bytes.size(), " bytes)"));
  }
  return spec;
}

namespace ops {

InputBatchOutputs InputBatch(GraphBuilder* b, const DatasetSpec& dataset, const InputBatchOptions& options,
                             absl::string_view name) {
  AttrList attrs = {Attr("dataset", EncodeDatasetSpecAttr(dataset)), Attr("train", options.train),
                    Attr("batch_size", options.batch_size), Attr("shard_index", options.shard_index),
                    Attr("num_shards", options.num_shards), Attr("seed", static_cast<int64_t>(options.seed)),
                    Attr("example_shape", options.example_shape), Attr("num_classes", options.num_classes),
                    Attr("skip_batches", options.skip_batches),
                    Attr("float_targets", dataset.format() == DatasetSpec::SERIES)};
  // Only when set, so that the NodeDefs of jobs that shard by file order
  // stay exactly what they were.
  if (options.global_batch != 0) attrs.push_back(Attr("global_batch", options.global_batch));
  Node* n = b->AddNode("InputBatch", {}, attrs, name);
  if (n == nullptr) return {};
  return {Output(n, 0), Output(n, 1), Output(n, 2)};
}

}  // namespace ops
}  // namespace weft
