// Parsing job files (job/job_spec.h): text format or JSON, by protobuf.
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "job/job_spec.h"

namespace weft {
namespace {

// Keeps the first error only: later ones are usually its consequences.
class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  explicit CollectErrors(std::string origin) : origin_(std::move(origin)) {}
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    if (first_.empty()) first_ = absl::StrCat(origin_, ":", line + 1, ":", column + 1, ": ", message);
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  const std::string& first() const { return first_; }

 private:
  std::string origin_;
  std::string first_;
};

}  // namespace

absl::StatusOr<JobSpec> ParseJob(const std::string& text, const std::string& origin) {
  JobSpec job;
  absl::string_view trimmed = absl::StripLeadingAsciiWhitespace(text);
  if (!trimmed.empty() && trimmed[0] == '{') {
    google::protobuf::util::JsonParseOptions opts;
    opts.ignore_unknown_fields = false;
    auto s = google::protobuf::util::JsonStringToMessage(std::string(trimmed), &job, opts);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ": not a valid JSON job: ", s.message().as_string()));
    }
    return job;
  }
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors(origin);
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &job)) {
    return absl::InvalidArgumentError(errors.first().empty() ? absl::StrCat(origin, ": not a valid job file")
                                                             : errors.first());
  }
  return job;
}

absl::StatusOr<JobSpec> LoadJobFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open job file '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading job file '", path, "'"));
  auto job = ParseJob(ss.str(), path);
  if (!job.ok()) return job.status();
  DatasetSpec* ds = job->mutable_dataset();
  if (!ds->dir().empty() && ds->dir()[0] != '/') {
    const size_t slash = path.rfind('/');
    if (slash != std::string::npos) ds->set_dir(path.substr(0, slash + 1) + ds->dir());
  }
  return job;
}

}  // namespace weft
