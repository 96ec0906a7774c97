#include "master/dataset_push.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace weft {
namespace master {
namespace {

absl::Status PutSync(WorkerInterface* worker, const PutDatasetRequest& request, PutDatasetResponse* response) {
  absl::Notification done;
  absl::Status status;
  worker->PutDatasetAsync(&request, response, [&](const absl::Status& s) {
    status = s;
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

// Sends the files' bytes after the first call; `offset` counts across them.
absl::Status SendBytes(const DatasetUploads& uploads, const std::string& id,
                       const std::vector<data::UploadedFileDigest>& files, WorkerInterface* worker,
                       PutDatasetResponse* response) {
  int64_t offset = 0;
  std::string buffer(static_cast<size_t>(kDatasetChunkBytes), '\0');
  for (const data::UploadedFileDigest& f : files) {
    ASSIGN_OR_RETURN(const int fd, uploads.root().OpenFile(absl::StrCat(id, "/", f.name), O_RDONLY));
    int64_t left = f.size;
    absl::Status s;
    while (s.ok() && left > 0) {
      const ssize_t n = ::read(fd, buffer.data(), static_cast<size_t>(std::min(left, kDatasetChunkBytes)));
      if (n <= 0) {
        s = absl::DataLossError(absl::StrCat("reading ", uploads.root().path(), "/", id, "/", f.name, ": ",
                                             n == 0 ? "shorter than when it was stored" : std::strerror(errno)));
        break;
      }
      PutDatasetRequest r;
      r.set_dataset_id(id);
      r.set_offset(offset);
      r.set_data(buffer.data(), static_cast<size_t>(n));
      s = PutSync(worker, r, response);
      offset += n;
      left -= n;
      if (s.ok() && response->next_offset() != offset && !response->present()) {
        s = absl::AbortedError(absl::StrCat("expected the next offset ", offset, ", the task asked for ",
                                            response->next_offset()));
      }
    }
    ::close(fd);
    RETURN_IF_ERROR(s);
  }
  if (!response->present()) {
    return absl::DataLossError("every byte was sent but the task did not keep the dataset");
  }
  return absl::OkStatus();
}

absl::Status PushTo(const DatasetUploads& uploads, const std::string& id,
                    const std::vector<data::UploadedFileDigest>& files, WorkerInterface* worker) {
  PutDatasetRequest first;
  first.set_dataset_id(id);
  for (const data::UploadedFileDigest& f : files) {
    DatasetFile* file = first.add_file();
    file->set_name(f.name);
    file->set_size(f.size);
  }
  PutDatasetResponse response;
  RETURN_IF_ERROR(PutSync(worker, first, &response));
  if (response.present()) return absl::OkStatus();
  const auto started = absl::Now();
  RETURN_IF_ERROR(SendBytes(uploads, id, files, worker, &response));
  Logger("master")->info("dataset {} copied to {} in {:.2f}s", id, worker->task(),
                         absl::ToDoubleSeconds(absl::Now() - started));
  return absl::OkStatus();
}

}  // namespace

absl::Status PushDataset(const DatasetUploads& uploads, const std::string& id, WorkerCacheInterface* workers,
                         const std::vector<std::string>& tasks) {
  ASSIGN_OR_RETURN(const std::vector<data::UploadedFileDigest> files, uploads.Files(id));
  std::set<std::string> done;
  for (const std::string& task : tasks) {
    if (task.empty() || !done.insert(task).second) continue;
    WorkerInterface* worker = workers->GetOrCreateWorker(task);
    if (worker == nullptr) return absl::NotFoundError(absl::StrCat("no task ", task, " to copy dataset ", id, " to"));
    RETURN_IF_ERROR(Annotate(PushTo(uploads, id, files, worker),
                             absl::StrCat("copying uploaded dataset ", id, " to task ", task)));
  }
  return absl::OkStatus();
}

}  // namespace master
}  // namespace weft
