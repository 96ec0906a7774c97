#include "master/dataset_uploads.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/checked_math.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "runtime/data/uploaded_dataset.h"

namespace weft {
namespace master {
namespace {

constexpr char kOwners[] = "OWNERS";

std::string OwnersText(const std::set<std::string>& owners) {
  std::string out;
  for (const std::string& o : owners) absl::StrAppend(&out, absl::CEscape(o), "\n");
  return out;
}

std::set<std::string> ReadOwners(const std::string& path) {
  std::set<std::string> owners;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::string owner;
    if (!line.empty() && absl::CUnescape(line, &owner)) owners.insert(owner);
  }
  return owners;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DatasetUploads>> DatasetUploads::Open(const DatasetUploadsOptions& options) {
  if (options.max_upload_bytes <= 0 || options.quota_bytes <= 0) {
    return absl::InvalidArgumentError("upload limits must be positive");
  }
  absl::StatusOr<ConfinedRoot> root = ConfinedRoot::Open(options.root, /*create=*/true);
  if (!root.ok()) return Annotate(root.status(), "--upload_root");
  data::RemoveStaleUploads(*root);
  std::unique_ptr<DatasetUploads> store(new DatasetUploads(*std::move(root), options));
  store->Index();
  return store;
}

void DatasetUploads::Index() {
  std::vector<std::string> ids;
  if (DIR* d = ::opendir(root_.path().c_str()); d != nullptr) {
    while (struct dirent* e = ::readdir(d)) {
      if (data::CheckUploadId(e->d_name).ok()) ids.push_back(e->d_name);
    }
    ::closedir(d);
  }
  absl::MutexLock lock(&mu_);
  for (const std::string& id : ids) {
    absl::StatusOr<std::vector<data::UploadedFileDigest>> files = data::StoredUploadFiles(root_, id);
    if (!files.ok()) continue;
    Stored& s = stored_[id];
    for (const auto& f : *files) s.bytes += f.size;
    s.owners = ReadOwners(absl::StrCat(root_.path(), "/", id, "/", kOwners));
  }
  Logger("master")->info("{} uploaded dataset(s) under {}", stored_.size(), root_.path());
}

absl::StatusOr<std::unique_ptr<DatasetUploads::Upload>> DatasetUploads::Begin(const Caller& caller) {
  RETURN_IF_ERROR(RequireUser(caller, "MasterService.UploadDataset"));
  {
    absl::MutexLock lock(&mu_);
    if (in_flight_ >= kMaxUploadsInFlight) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the master takes at most ", kMaxUploadsInFlight, " uploads at once; retry later"));
    }
    ++in_flight_;
  }
  absl::StatusOr<std::unique_ptr<data::UploadWriter>> writer = data::UploadWriter::Create(root_);
  if (!writer.ok()) {
    absl::MutexLock lock(&mu_);
    --in_flight_;
    return writer.status();
  }
  return std::unique_ptr<Upload>(new Upload(this, caller.owner(), *std::move(writer)));
}

int64_t DatasetUploads::OwnerBytesLocked(const std::string& owner) const {
  int64_t total = 0;
  for (const auto& [id, s] : stored_) {
    if (s.owners.count(owner) > 0) total += s.bytes;
  }
  auto r = reserved_.find(owner);
  return total + (r == reserved_.end() ? 0 : r->second);
}

int64_t DatasetUploads::OwnerBytes(const std::string& owner) const {
  absl::MutexLock lock(&mu_);
  return OwnerBytesLocked(owner);
}

absl::Status DatasetUploads::Reserve(Upload* upload, const std::string& file, int64_t bytes) {
  int64_t total = 0;
  if (!CheckedAdd(upload->reserved_, bytes, &total) || total > options_.max_upload_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("file ", file, " (", bytes, " bytes) takes the upload past ",
                                                     options_.max_upload_bytes,
                                                     " bytes, the most one upload may hold (--max_upload_bytes)"));
  }
  absl::MutexLock lock(&mu_);
  const int64_t used = OwnerBytesLocked(upload->owner_);
  int64_t after = 0;
  if (!CheckedAdd(used, bytes, &after) || after > options_.quota_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "file ", file, " (", bytes, " bytes): user '", upload->owner_, "' already holds ", used,
        " bytes of uploads, and may hold at most ", options_.quota_bytes, " (--upload_quota_bytes)"));
  }
  reserved_[upload->owner_] += bytes;
  upload->reserved_ = total;
  return absl::OkStatus();
}

void DatasetUploads::Release(Upload* upload) {
  absl::MutexLock lock(&mu_);
  auto it = reserved_.find(upload->owner_);
  if (it != reserved_.end()) {
    it->second -= upload->reserved_;
    if (it->second <= 0) reserved_.erase(it);
  }
  upload->reserved_ = 0;
}

absl::Status DatasetUploads::Authorize(const Caller& caller, const std::string& id) const {
  RETURN_IF_ERROR(data::CheckUploadId(id));
  if (caller.insecure() || caller.admin) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  auto it = stored_.find(id);
  if (it == stored_.end() || it->second.owners.count(caller.owner()) == 0) {
    return absl::PermissionDeniedError(absl::StrCat("dataset upload_id ", id, " was not uploaded by ",
                                                    caller.Describe(), ": a job may use only its owner's uploads"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<data::UploadedFileDigest>> DatasetUploads::Files(const std::string& id) const {
  return data::StoredUploadFiles(root_, id);
}

absl::Status DatasetUploads::AddOwner(const std::string& id, int64_t bytes, const std::string& owner) {
  std::string text;
  {
    absl::MutexLock lock(&mu_);
    Stored& s = stored_[id];
    s.bytes = bytes;
    if (!s.owners.insert(owner).second) return absl::OkStatus();
    text = OwnersText(s.owners);
  }
  // Replaced in one rename, so a reader never sees half a list.
  const std::string tmp = absl::StrCat(id, "/", kOwners, ".new");
  ASSIGN_OR_RETURN(const int fd, root_.OpenFile(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600));
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  const std::string from = absl::StrCat(root_.path(), "/", tmp);
  const std::string to = absl::StrCat(root_.path(), "/", id, "/", kOwners);
  if (!written || ::rename(from.c_str(), to.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("writing ", to, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

DatasetUploads::Upload::~Upload() {
  writer_.reset();  // removes an uncommitted upload's files
  store_->Release(this);
  absl::MutexLock lock(&store_->mu_);
  --store_->in_flight_;
}

absl::Status DatasetUploads::Upload::OnMessage(const UploadDatasetRequest& m) {
  if (m.has_file()) {
    if (!m.data().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("a message starting file ", m.file().name().substr(0, 64),
                                                     " carries data: send the header, then the bytes"));
    }
    if (++files_ > data::kNumUploadFiles) {
      return absl::InvalidArgumentError(
          absl::StrCat("more than ", data::kNumUploadFiles, " files in one upload"));
    }
    // The name and size are checked, and the quota taken, before the file
    // is created.
    if (data::UploadFileIndex(m.file().name()) >= 0 && m.file().size() >= 0) {
      RETURN_IF_ERROR(store_->Reserve(this, m.file().name(), m.file().size()));
    }
    RETURN_IF_ERROR(writer_->StartFile(m.file().name(), m.file().size()));
    file_ = m.file().name();
    return absl::OkStatus();
  }
  return writer_->Append(m.data());
}

absl::StatusOr<UploadDatasetResponse> DatasetUploads::Upload::Finish() {
  ASSIGN_OR_RETURN(data::UploadSummary summary, writer_->Finish());
  std::set<std::string> owners = {owner_};
  RETURN_IF_ERROR(writer_->WriteExtra(kOwners, OwnersText(owners)));
  ASSIGN_OR_RETURN(const bool stored, writer_->Commit());
  // The dataset is on disk (this copy or an earlier one): the quota counts
  // it as stored from now on.
  store_->Release(this);
  RETURN_IF_ERROR(store_->AddOwner(summary.id, summary.bytes, owner_));
  Logger("master")->info("dataset {} uploaded by '{}': {} bytes, {} train / {} test examples{}", summary.id, owner_,
                         summary.bytes, summary.train_examples, summary.test_examples,
                         stored ? "" : " (already stored)");
  UploadDatasetResponse r;
  r.set_dataset_id(summary.id);
  r.set_bytes(summary.bytes);
  r.set_train_examples(summary.train_examples);
  r.set_test_examples(summary.test_examples);
  return r;
}

}  // namespace master
}  // namespace weft
