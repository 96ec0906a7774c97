// spdlog loggers, one per role ("train", "master", "worker", "ps", ...).
//
// Every logger writes to stderr with the pattern
//   [2026-11-22 10:00:00.123] [worker:0] [info] message
// where the bracketed name is the role plus the task id set by SetTaskId.
// Per-step messages belong at debug level, which costs a branch when off.
//
// Thread-safety: all functions are thread-safe.
#ifndef WEFT_COMMON_LOGGING_H_
#define WEFT_COMMON_LOGGING_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

namespace weft {

// The logger for `role`, created on first use.
std::shared_ptr<spdlog::logger> Logger(absl::string_view role);

// Sets the level of every logger: "trace", "debug", "info", "warn", "error",
// "off". Unknown names leave the level unchanged and return false.
bool SetLogLevel(absl::string_view level);

// Appends a task id to every logger's name, e.g. "worker" -> "worker:1".
void SetTaskId(absl::string_view task_id);

}  // namespace weft

#endif  // WEFT_COMMON_LOGGING_H_
