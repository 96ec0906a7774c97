// The job spec's one home: reading a job file and checking what a JobSpec
// says on its own, before any cluster is known.
//
// A job file is a weft.JobSpec in protobuf text format (`.pbtxt`) or JSON
// (`.json`, or any file whose first non-blank character is '{'), parsed by
// protobuf's own parsers. Errors name the file and, for text format, the line
// and column, and never quote the file's bytes beyond what protobuf reports.
//
// The CLI, the master's Submit and the strategies all call ValidateJob (or
// the narrower checks it is made of, job/strategy_spec.h), so a job is
// judged the same wherever it is read. What needs the cluster (the number of
// replicas, the devices) is checked where the cluster is known, with the
// helpers of job/defaults.h and job/strategy_spec.h.
//
// Thread-safety: every function here is pure (LoadJobFile reads one file).
#ifndef WEFT_JOB_JOB_SPEC_H_
#define WEFT_JOB_JOB_SPEC_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace weft {

// Parses `path`. A relative dataset.dir is resolved against the job file's
// folder, so a job file can ship beside its data.
absl::StatusOr<JobSpec> LoadJobFile(const std::string& path);
// Parses job text; `origin` names the source in messages.
absl::StatusOr<JobSpec> ParseJob(const std::string& text, const std::string& origin);
// Checks what lowering cannot: batch size, epochs or steps, dataset, the
// checkpoint and recovery policies, and the strategy's spec-only settings
// (ValidateStrategySpec). INVALID_ARGUMENT for a wrong value, UNIMPLEMENTED
// for a combination weft does not run.
absl::Status ValidateJob(const JobSpec& job);

}  // namespace weft

#endif  // WEFT_JOB_JOB_SPEC_H_
