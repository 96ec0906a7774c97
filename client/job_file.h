// Reading and validating job files.
//
// A job file is a weft.JobSpec in protobuf text format (`.pbtxt`) or JSON
// (`.json`, or any file whose first non-blank character is '{'), parsed by
// protobuf's own parsers. Errors name the file and, for text format, the line
// and column.
#ifndef WEFT_CLIENT_JOB_FILE_H_
#define WEFT_CLIENT_JOB_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace weft {

// Parses `path`. A relative dataset.dir is resolved against the job file's
// folder, so a job file can ship beside its data.
absl::StatusOr<JobSpec> LoadJobFile(const std::string& path);
// Parses job text; `origin` names the source in messages.
absl::StatusOr<JobSpec> ParseJob(const std::string& text, const std::string& origin);
// Checks what lowering cannot: batch size, epochs or steps, dataset files.
absl::Status ValidateJob(const JobSpec& job);

}  // namespace weft

#endif  // WEFT_CLIENT_JOB_FILE_H_
