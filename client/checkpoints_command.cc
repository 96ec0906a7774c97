#include "client/checkpoints_command.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/flags.h"
#include "common/env.h"
#include "ps/checkpoint_index.h"
#include "runtime/training_loop.h"

namespace weft {
namespace {

int Usage(const std::string& msg) {
  std::fprintf(stderr, "weft checkpoints: %s\nusage: weft checkpoints DIR [--output=text|json]\n", msg.c_str());
  return 2;
}

// The manifest's wall time as "2026-11-22T10:00:00Z"; empty when unknown.
std::string UtcTime(const ps::CheckpointEntry& e) {
  if (e.manifest.wall_time_micros() <= 0) return "";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMicros(e.manifest.wall_time_micros()),
                          absl::UTCTimeZone());
}

// Whether the entry's manifest was read (valid, or invalid for its shards or
// step): an unread one is empty.
bool HasManifest(const ps::CheckpointEntry& e) { return e.valid || e.manifest.ByteSizeLong() > 0; }

std::string TextLine(const ps::CheckpointEntry& e) {
  const std::string time = UtcTime(e);
  const std::string shards = HasManifest(e) ? absl::StrCat(e.manifest.shard_size()) : "-";
  std::string line = absl::StrFormat("%10d  %-20s  %2s shards  %12d bytes  %s", e.step, time.empty() ? "-" : time,
                                     shards, e.bytes, e.path);
  if (!e.valid) absl::StrAppend(&line, "  INVALID: ", e.problem);
  return line;
}

std::string JsonObject(const ps::CheckpointEntry& e) {
  const bool manifest = HasManifest(e);
  const std::string time = UtcTime(e);
  return absl::StrCat(
      "{\"step\": ", e.step, ", \"path\": ", JsonString(e.path), ", \"valid\": ", e.valid ? "true" : "false",
      ", \"time\": ", time.empty() ? "null" : JsonString(time),
      ", \"wall_time_micros\": ", manifest ? absl::StrCat(e.manifest.wall_time_micros()) : "null",
      ", \"job\": ", manifest ? JsonString(e.manifest.job_name()) : "null",
      ", \"shards\": ", manifest ? absl::StrCat(e.manifest.shard_size()) : "null", ", \"bytes\": ", e.bytes,
      ", \"problem\": ", e.valid ? "null" : JsonString(e.problem), "}");
}

}  // namespace

int RunCheckpointsCommand(int argc, char** argv) {
  auto parsed = Flags::Parse(argc, argv, 2, {"output"}, {});
  if (!parsed.ok()) return Usage(std::string(parsed.status().message()));
  const std::string output = parsed->Get("output", "text");
  if (output != "text" && output != "json") {
    return Usage(absl::StrCat("--output must be text or json, got '", output, "'"));
  }
  if (parsed->args().size() != 1) return Usage("expected one checkpoint directory");
  const std::string& dir = parsed->args()[0];

  auto entries = ps::ListCheckpoints(Env::Default(), dir);
  if (!entries.ok()) {
    std::fprintf(stderr, "weft checkpoints: %s\n", std::string(entries.status().message()).c_str());
    return 1;
  }
  bool any_valid = false;
  std::vector<std::string> lines;
  for (const ps::CheckpointEntry& e : *entries) {
    any_valid = any_valid || e.valid;
    lines.push_back(output == "json" ? JsonObject(e) : TextLine(e));
  }
  if (output == "json") {
    std::printf("[%s]\n", absl::StrJoin(lines, ", ").c_str());
  } else {
    for (const std::string& line : lines) std::printf("%s\n", line.c_str());
  }
  if (!any_valid) {
    std::fprintf(stderr, "no valid checkpoint in %s\n", dir.c_str());
    return 1;
  }
  return 0;
}

}  // namespace weft
