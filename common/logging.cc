#include "common/logging.h"

#include <cstdlib>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace weft {
namespace {

struct Registry {
  absl::Mutex mu;
  absl::flat_hash_map<std::string, std::shared_ptr<spdlog::logger>> loggers ABSL_GUARDED_BY(mu);
  std::string task_id ABSL_GUARDED_BY(mu);
  spdlog::level::level_enum level ABSL_GUARDED_BY(mu) = spdlog::level::info;
};

Registry& GetRegistry() {
  static Registry* const r = [] {
    auto* reg = new Registry();
    if (const char* env = std::getenv("WEFT_LOG_LEVEL")) {
      reg->level = spdlog::level::from_str(env);
    }
    return reg;
  }();
  return *r;
}

std::string DisplayName(const std::string& role, const std::string& task_id) {
  return task_id.empty() ? role : role + ":" + task_id;
}

}  // namespace

std::shared_ptr<spdlog::logger> Logger(absl::string_view role) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  auto it = r.loggers.find(role);
  if (it != r.loggers.end()) return it->second;
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>(DisplayName(std::string(role), r.task_id), sink);
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%^%l%$] %v");
  logger->set_level(r.level);
  r.loggers.emplace(std::string(role), logger);
  return logger;
}

bool SetLogLevel(absl::string_view level) {
  const std::string name(level);
  const auto lvl = spdlog::level::from_str(name);
  if (lvl == spdlog::level::off && name != "off") return false;
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  r.level = lvl;
  for (auto& [role, logger] : r.loggers) logger->set_level(lvl);
  return true;
}

void SetTaskId(absl::string_view task_id) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  r.task_id = std::string(task_id);
  // spdlog names are fixed at construction: rebuild the loggers under new names.
  for (auto& [role, logger] : r.loggers) {
    auto fresh = std::make_shared<spdlog::logger>(DisplayName(role, r.task_id), logger->sinks().begin(),
                                                  logger->sinks().end());
    fresh->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%^%l%$] %v");
    fresh->set_level(r.level);
    logger = fresh;
  }
}

}  // namespace weft
