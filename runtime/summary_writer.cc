#include "runtime/summary_writer.h"

#include <unistd.h>

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "common/status_macros.h"

namespace weft {
namespace {

constexpr size_t kHeaderBytes = 12;  // length + masked CRC of the length
constexpr size_t kFooterBytes = 4;   // masked CRC of the data
// Names tried by Create before it gives up (each a new counter value).
constexpr int kNameAttempts = 16;

void PutLE32(uint32_t v, char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void PutLE64(uint64_t v, char* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string host(buf);
  for (char& c : host) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                       c == '_' || c == '.';
    if (!plain) c = '_';
  }
  return host;
}

double WallSeconds(Env* env) { return static_cast<double>(env->NowMicros()) / 1e6; }

}  // namespace

std::string SummaryWriter::NewEventFileName(Env* env) {
  static std::atomic<int64_t> counter{0};
  static const std::string* const host = new std::string(HostName());
  return absl::StrCat(kEventFilePrefix, env->NowMicros() / 1000000, ".", *host, ".", ::getpid(), ".",
                      counter.fetch_add(1));
}

absl::StatusOr<std::unique_ptr<SummaryWriter>> SummaryWriter::Open(const std::string& path, Env* env) {
  absl::StatusOr<std::unique_ptr<WritableFile>> file = env->NewWritableFile(path);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat("event file ", path, ": cannot create it: ", file.status().message()));
  }
  std::unique_ptr<SummaryWriter> writer(new SummaryWriter(path, *std::move(file), env));
  Event first;
  first.set_wall_time(WallSeconds(env));
  first.set_file_version(kEventFileVersion);
  RETURN_IF_ERROR(writer->AppendEvent(first));
  return writer;
}

absl::StatusOr<std::unique_ptr<SummaryWriter>> SummaryWriter::Create(const std::string& dir, Env* env) {
  if (absl::Status s = env->CreateDirs(dir); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("event file directory ", dir, ": ", s.message()));
  }
  for (int attempt = 0; attempt < kNameAttempts; ++attempt) {
    const std::string path = JoinPath(dir, NewEventFileName(env));
    if (!env->FileExists(path)) return Open(path, env);
  }
  return absl::AlreadyExistsError(
      absl::StrCat("event file directory ", dir, ": ", kNameAttempts, " new event file names were all taken"));
}

SummaryWriter::SummaryWriter(std::string path, std::unique_ptr<WritableFile> file, Env* env)
    : path_(std::move(path)), file_(std::move(file)), env_(env) {
  event_.mutable_summary();  // the oneof stays `summary` from here on, so its values are reused
}

SummaryWriter::~SummaryWriter() {
  if (file_ != nullptr) (void)file_->Close();  // errors are lost, as documented
}

absl::Status SummaryWriter::Unusable() const {
  if (!error_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("event file ", path_, " is not written to since an earlier error: ", error_.message()));
  }
  return absl::FailedPreconditionError(absl::StrCat("event file ", path_, " is closed"));
}

absl::Status SummaryWriter::AppendEvent(const Event& event) {
  if (file_ == nullptr) return Unusable();
  record_.resize(kHeaderBytes);
  if (!event.AppendToString(&record_)) {
    return absl::InternalError(absl::StrCat("event file ", path_, ": cannot serialize an Event"));
  }
  const size_t length = record_.size() - kHeaderBytes;
  PutLE64(length, record_.data());
  PutLE32(MaskCrc32c(Crc32c(record_.data(), 8)), record_.data() + 8);
  char footer[kFooterBytes];
  PutLE32(MaskCrc32c(Crc32c(record_.data() + kHeaderBytes, length)), footer);
  record_.append(footer, kFooterBytes);
  if (absl::Status s = file_->Append(record_); !s.ok()) {
    error_ = absl::Status(s.code(), absl::StrCat("event file ", path_, ": write failed: ", s.message()));
    (void)file_->Close();
    file_.reset();
    return error_;
  }
  return absl::OkStatus();
}

absl::Status SummaryWriter::WriteScalars(int64_t step, absl::Span<const SummaryScalar> scalars) {
  if (file_ == nullptr) return Unusable();
  if (scalars.empty()) return absl::OkStatus();
  event_.set_wall_time(WallSeconds(env_));
  event_.set_step(step);
  // Clear keeps the Value objects (and their tags' buffers) for Add to reuse.
  auto* values = event_.mutable_summary()->mutable_value();
  values->Clear();
  for (const SummaryScalar& s : scalars) {
    Summary::Value* v = values->Add();
    v->mutable_tag()->assign(s.tag.data(), s.tag.size());
    v->set_simple_value(s.value);
  }
  return AppendEvent(event_);
}

absl::Status SummaryWriter::Sync() {
  if (file_ == nullptr) return Unusable();
  if (absl::Status s = file_->Sync(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("event file ", path_, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status SummaryWriter::Close() {
  if (file_ == nullptr) return Unusable();
  absl::Status s = file_->Close();
  file_.reset();
  if (!s.ok()) {
    error_ = absl::Status(s.code(), absl::StrCat("event file ", path_, ": close failed: ", s.message()));
    return error_;
  }
  return absl::OkStatus();
}

}  // namespace weft
