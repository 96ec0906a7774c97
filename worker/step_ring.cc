#include "worker/step_ring.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace weft {
namespace worker {

uint64_t StepRing::Begin(int64_t step_id, int iterations, absl::Time now) {
  absl::MutexLock lock(&mu_);
  const uint64_t token = next_token_++;
  Entry& e = ring_[token % kCapacity];
  e.token = token;
  e.step_id = step_id;
  e.iterations = std::max(1, iterations);
  e.start = now;
  e.took = absl::ZeroDuration();
  e.running = true;
  e.status = absl::OkStatus();
  return token;
}

void StepRing::End(uint64_t token, const absl::Status& status, absl::Time now) {
  absl::MutexLock lock(&mu_);
  Entry& e = ring_[token % kCapacity];
  if (e.token != token) return;  // overwritten by later calls
  e.took = now - e.start;
  e.running = false;
  e.status = status;
}

void StepRing::Fill(google::protobuf::RepeatedPtrField<StepRecord>* out, absl::Time now) const {
  absl::MutexLock lock(&mu_);
  const uint64_t first = next_token_ > kCapacity ? next_token_ - kCapacity : 1;
  for (uint64_t t = first; t < next_token_; ++t) {
    const Entry& e = ring_[t % kCapacity];
    if (e.token != t) continue;
    StepRecord* r = out->Add();
    r->set_step_id(e.step_id);
    r->set_iterations(e.iterations);
    r->set_start_unix_ms(absl::ToUnixMillis(e.start));
    r->set_running(e.running);
    r->set_seconds(absl::ToDoubleSeconds(e.running ? now - e.start : e.took));
    if (!e.status.ok()) r->set_error(e.status.ToString());
  }
}

std::string StepRing::Dump(absl::Time now) const {
  google::protobuf::RepeatedPtrField<StepRecord> records;
  Fill(&records, now);
  std::string out;
  for (const StepRecord& r : records) {
    if (!out.empty()) out += "; ";
    absl::StrAppend(&out, "step ", r.step_id());
    if (r.iterations() > 1) absl::StrAppend(&out, " (", r.iterations(), " iterations)");
    absl::StrAppend(&out, r.running() ? " running " : " ", absl::StrFormat("%.3f s", r.seconds()),
                    r.running() ? "" : r.error().empty() ? " ok" : absl::StrCat(" ", r.error()));
  }
  return out.empty() ? "no steps yet" : out;
}

}  // namespace worker
}  // namespace weft
