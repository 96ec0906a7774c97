// Fuzzes the job file parser, text format and JSON (ParseJob picks JSON when
// the first non-blank character is '{'), and the validation of a job that
// parses. Every bad input must come back as a Status.
#include <cstddef>
#include <cstdint>
#include <string>

#include "job/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<weft::JobSpec> job = weft::ParseJob(text, "fuzz.pbtxt");
  if (job.ok()) weft::ValidateJob(*job).IgnoreError();
  return 0;
}
