#include "ps/checkpoint_index.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "ps/manifest.h"

namespace weft {
namespace ps {
namespace {

constexpr absl::string_view kDirPrefix = "step-";

// A directory named like a checkpoint, not yet checked.
struct Candidate {
  std::string path;
  int64_t step = 0;
};

// A checked directory and, when invalid, the error that made it so: it tells
// a damaged checkpoint from one that could not be read.
struct Checked {
  CheckpointEntry entry;
  absl::Status why;
};

// Missing manifest or shard, or contents that do not check out: the
// directory is not a checkpoint, whoever reads it.
bool Damaged(const absl::Status& s) { return absl::IsNotFound(s) || absl::IsDataLoss(s); }

// The checkpoint directories under `dir`, newest first.
absl::StatusOr<std::vector<Candidate>> FindCandidates(Env* env, const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> names = env->ListDirectory(dir);
  if (!names.ok()) {
    if (absl::IsNotFound(names.status())) return std::vector<Candidate>();  // no checkpoint yet
    absl::StatusOr<bool> is_dir = env->IsDirectory(dir);
    if (absl::IsFailedPrecondition(names.status()) && is_dir.ok() && !*is_dir) {  // ENOTDIR
      return absl::InvalidArgumentError(absl::StrCat("checkpoint directory ", dir, " is not a directory"));
    }
    return names.status();
  }
  std::vector<Candidate> out;
  for (const std::string& name : *names) {
    std::optional<int64_t> step = ParseCheckpointDirName(name);
    if (!step.has_value()) continue;
    const std::string path = JoinPath(dir, name);
    absl::StatusOr<bool> is_dir = env->IsDirectory(path);
    if (is_dir.ok() && !*is_dir) continue;
    if (absl::IsNotFound(is_dir.status())) continue;  // deleted since the listing
    out.push_back({path, *step});  // a stat error: the check will fail and say why
  }
  std::sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) { return a.step > b.step; });
  return out;
}

// The bytes of the files directly in `dir`, best effort.
uint64_t BytesOnDisk(Env* env, const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> names = env->ListDirectory(dir);
  if (!names.ok()) return 0;
  uint64_t total = 0;
  for (const std::string& name : *names) {
    const std::string path = JoinPath(dir, name);
    absl::StatusOr<bool> is_dir = env->IsDirectory(path);
    if (!is_dir.ok() || *is_dir) continue;
    absl::StatusOr<uint64_t> size = env->GetFileSize(path);
    if (size.ok()) total += *size;
  }
  return total;
}

Checked Check(Env* env, const Candidate& c) {
  Checked out;
  CheckpointEntry& e = out.entry;
  e.path = c.path;
  e.step = c.step;
  const std::string manifest_path = JoinPath(c.path, kManifestFileName);
  absl::StatusOr<CheckpointManifest> manifest = ReadManifest(env, c.path);
  if (!manifest.ok()) {
    out.why = manifest.status();
    e.problem = absl::IsNotFound(manifest.status())
                    ? absl::StrCat("no manifest ", manifest_path, " (its writer did not finish)")
                    : std::string(manifest.status().message());
  } else {
    e.manifest = *std::move(manifest);
    if (e.manifest.step() != c.step) {
      e.problem = absl::StrCat("manifest ", manifest_path, " records step ", e.manifest.step(),
                               ", the directory's name says step ", c.step);
      out.why = absl::DataLossError(e.problem);
    } else {
      out.why = VerifyCheckpoint(env, c.path, e.manifest);
      // The entry names the directory already.
      const absl::string_view message =
          absl::StripPrefix(out.why.message(), absl::StrCat("checkpoint ", c.path, ": "));
      if (absl::IsNotFound(out.why)) {
        e.problem = absl::StrCat("shard file missing: ", message);
      } else if (!out.why.ok()) {
        e.problem = std::string(message);
      }
    }
  }
  e.valid = out.why.ok();
  if (e.valid) {
    for (const ManifestShard& s : e.manifest.shard()) e.bytes += s.size();
  } else {
    e.bytes = BytesOnDisk(env, c.path);
  }
  return out;
}

}  // namespace

std::string CheckpointDirName(int64_t step) { return absl::StrFormat("%s%012d", kDirPrefix, step); }

std::optional<int64_t> ParseCheckpointDirName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kDirPrefix) || name.empty()) return std::nullopt;
  for (char ch : name) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(ch))) return std::nullopt;
  }
  int64_t step = 0;
  if (!absl::SimpleAtoi(name, &step)) return std::nullopt;  // out of range
  // Only the canonical spelling: "step-1200" or a 13-digit "step-0..." would
  // sort apart from the others and could name the same step twice.
  if (CheckpointDirName(step).size() != kDirPrefix.size() + name.size()) return std::nullopt;
  return step;
}

absl::StatusOr<std::vector<CheckpointEntry>> ListCheckpoints(Env* env, const std::string& dir) {
  ASSIGN_OR_RETURN(std::vector<Candidate> candidates, FindCandidates(env, dir));
  std::vector<CheckpointEntry> out;
  out.reserve(candidates.size());
  for (const Candidate& c : candidates) out.push_back(Check(env, c).entry);
  return out;
}

absl::StatusOr<CheckpointEntry> NewestValidCheckpoint(Env* env, const std::string& dir) {
  ASSIGN_OR_RETURN(std::vector<Candidate> candidates, FindCandidates(env, dir));
  for (const Candidate& c : candidates) {
    Checked checked = Check(env, c);
    if (checked.entry.valid) return std::move(checked.entry);
    Logger("checkpoint")->warn("skipping checkpoint {}: {}", checked.entry.path, checked.entry.problem);
  }
  if (candidates.empty()) return absl::NotFoundError(absl::StrCat("no valid checkpoint in ", dir, ": none written"));
  return absl::NotFoundError(
      absl::StrCat("no valid checkpoint in ", dir, ": all ", candidates.size(), " checkpoint directories are invalid"));
}

absl::Status PruneCheckpoints(Env* env, const std::string& dir, int keep) {
  if (keep < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pruning checkpoints in ", dir, ": keep must be at least 1, got ", keep));
  }
  ASSIGN_OR_RETURN(std::vector<Candidate> candidates, FindCandidates(env, dir));
  // Newest first: check until `keep` valid ones are found; everything older
  // than the last of them goes without being read.
  std::vector<std::pair<std::string, std::string>> doomed;  // path, why
  int valid = 0;
  for (const Candidate& c : candidates) {
    if (valid == keep) {
      doomed.emplace_back(c.path, absl::StrCat("older than the ", keep, " kept"));
      continue;
    }
    Checked checked = Check(env, c);
    if (checked.entry.valid) {
      ++valid;
    } else if (valid == 0) {
      // Newer than every valid checkpoint: possibly being written now.
    } else if (!Damaged(checked.why)) {
      Logger("checkpoint")->warn("leaving {}: cannot tell whether it is a checkpoint: {}", c.path,
                                 checked.entry.problem);
    } else {
      doomed.emplace_back(c.path, checked.entry.problem);
    }
  }
  if (valid == 0) return absl::OkStatus();

  absl::Status first;
  int failed = 0;
  for (const auto& [path, why] : doomed) {
    absl::Status s = DeleteRecursively(env, path);
    if (s.ok()) {
      Logger("checkpoint")->info("deleted {}: {}", path, why);
    } else if (++failed == 1) {
      first = s;
    }
  }
  if (failed == 0) return absl::OkStatus();
  return Annotate(first, absl::StrCat("pruning checkpoints in ", dir, ": ", failed, " of ", doomed.size(),
                                      " deletions failed; the first"));
}

}  // namespace ps
}  // namespace weft
