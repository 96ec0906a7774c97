#include "worker/dataset_cache.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "runtime/data/uploaded_dataset.h"

namespace weft {
namespace worker {
namespace {

// The file list of a first call: known names in canonical order, sizes that
// add up without overflow.
absl::StatusOr<int64_t> CheckFiles(const PutDatasetRequest& r) {
  if (r.file_size() < 1 || r.file_size() > data::kNumUploadFiles) {
    return absl::InvalidArgumentError(absl::StrCat("PutDataset ", r.dataset_id(), ": ", r.file_size(),
                                                   " files listed (1..", data::kNumUploadFiles, ")"));
  }
  int64_t total = 0;
  int last = -1;
  for (const DatasetFile& f : r.file()) {
    const int i = data::UploadFileIndex(f.name());
    if (i <= last) {
      return absl::InvalidArgumentError(absl::StrCat("PutDataset ", r.dataset_id(), ": file \"",
                                                     absl::CEscape(f.name().substr(0, 64)),
                                                     "\" is unknown or out of canonical order"));
    }
    last = i;
    if (f.size() < 0 || !CheckedAdd(total, f.size(), &total)) {
      return absl::InvalidArgumentError(
          absl::StrCat("PutDataset ", r.dataset_id(), ": file ", f.name(), " has a bad size ", f.size()));
    }
  }
  return total;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DatasetCache>> DatasetCache::Open(const std::string& root) {
  absl::StatusOr<ConfinedRoot> opened = ConfinedRoot::Open(root, /*create=*/true);
  if (!opened.ok()) return Annotate(opened.status(), "--dataset_cache");
  data::RemoveStaleUploads(*opened);
  return std::unique_ptr<DatasetCache>(new DatasetCache(*std::move(opened)));
}

bool DatasetCache::Has(const std::string& id) const {
  return data::CheckUploadId(id).ok() && data::StoredUploadFiles(root_, id).ok();
}

absl::Status DatasetCache::Start(const PutDatasetRequest& request, PutDatasetResponse* response) {
  const std::string& id = request.dataset_id();
  if (Has(id)) {
    response->set_present(true);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const int64_t total, CheckFiles(request));
  ASSIGN_OR_RETURN(std::unique_ptr<data::UploadWriter> writer, data::UploadWriter::Create(root_));
  auto t = std::make_shared<Transfer>();
  {
    absl::MutexLock lock(&t->mu);
    t->writer = std::move(writer);
    t->files.assign(request.file().begin(), request.file().end());
    t->total = total;
  }
  std::shared_ptr<Transfer> replaced;  // destroyed (its files removed) outside mu_
  {
    absl::MutexLock lock(&mu_);
    auto it = transfers_.find(id);
    if (it == transfers_.end() && static_cast<int>(transfers_.size()) >= kMaxTransfers) {
      return absl::ResourceExhaustedError(
          absl::StrCat("PutDataset ", id, ": ", kMaxTransfers, " dataset transfers already in progress here"));
    }
    if (it != transfers_.end()) replaced = std::move(it->second);
    transfers_[id] = t;
  }
  response->set_next_offset(0);
  return absl::OkStatus();
}

absl::Status DatasetCache::Feed(Transfer* t, absl::string_view data) {
  while (!data.empty()) {
    while (t->file_left == 0) {
      if (t->next_file >= static_cast<int>(t->files.size())) {
        return absl::InvalidArgumentError("more bytes than the files listed");
      }
      const DatasetFile& f = t->files[static_cast<size_t>(t->next_file++)];
      RETURN_IF_ERROR(t->writer->StartFile(f.name(), f.size()));
      t->file_left = f.size();
    }
    const size_t n = static_cast<size_t>(std::min<int64_t>(t->file_left, static_cast<int64_t>(data.size())));
    RETURN_IF_ERROR(t->writer->Append(data.substr(0, n)));
    t->file_left -= static_cast<int64_t>(n);
    data.remove_prefix(n);
  }
  return absl::OkStatus();
}

absl::Status DatasetCache::Complete(const std::string& id, Transfer* t) {
  while (t->next_file < static_cast<int>(t->files.size())) {  // files of 0 bytes
    const DatasetFile& f = t->files[static_cast<size_t>(t->next_file++)];
    RETURN_IF_ERROR(t->writer->StartFile(f.name(), f.size()));
  }
  ASSIGN_OR_RETURN(const data::UploadSummary summary, t->writer->Finish());
  if (summary.id != id) {
    return absl::DataLossError(absl::StrCat("the bytes received hash to dataset ", summary.id, ", not ", id));
  }
  ASSIGN_OR_RETURN(const bool stored, t->writer->Commit());
  Logger("worker")->info("dataset {} stored under {}{}", id, root_.path(), stored ? "" : " (already there)");
  return absl::OkStatus();
}

absl::Status DatasetCache::Put(const PutDatasetRequest& request, PutDatasetResponse* response) {
  const std::string& id = request.dataset_id();
  RETURN_IF_ERROR(data::CheckUploadId(id));
  if (request.offset() == 0 && request.file_size() > 0) return Start(request, response);
  std::shared_ptr<Transfer> t;
  {
    absl::MutexLock lock(&mu_);
    auto it = transfers_.find(id);
    if (it != transfers_.end()) t = it->second;
  }
  if (t == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("PutDataset ", id, ": no transfer of it in progress here"));
  }
  absl::Status s;
  bool done = false;
  {
    absl::MutexLock lock(&t->mu);
    if (t->writer == nullptr || request.offset() != t->offset) {
      return absl::FailedPreconditionError(absl::StrCat("PutDataset ", id, ": a chunk at offset ", request.offset(),
                                                        ", expected ", t->offset, "; start over"));
    }
    if (static_cast<uint64_t>(request.data().size()) > static_cast<uint64_t>(t->total - t->offset)) {
      s = absl::InvalidArgumentError(absl::StrCat("PutDataset ", id, ": bytes past the ", t->total, " listed"));
    }
    if (s.ok()) s = Feed(t.get(), request.data());
    if (s.ok()) t->offset += static_cast<int64_t>(request.data().size());
    done = s.ok() && t->offset == t->total;
    if (done) s = Complete(id, t.get());
    response->set_next_offset(t->offset);
    response->set_present(done && s.ok());
    if (!s.ok() || done) t->writer.reset();  // removes what a failed transfer wrote
  }
  if (!s.ok() || done) {
    absl::MutexLock lock(&mu_);
    auto it = transfers_.find(id);
    if (it != transfers_.end() && it->second == t) transfers_.erase(it);
  }
  return s;
}

}  // namespace worker
}  // namespace weft
