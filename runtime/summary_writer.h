// SummaryWriter: one TensorBoard event file of scalar summaries.
//
// An event file (TensorFlow's `events.out.tfevents.*`) is a TFRecord file
// (runtime/data/tfrecord.h: a little-endian uint64 length, the masked
// CRC-32C of those 8 bytes, the data, the masked CRC-32C of the data; see
// common/crc32c.h) whose records are serialized weft.Event protos
// (proto/event.proto, wire-compatible with tensorflow.Event). The first
// record holds only file_version "brain.Event:2"; each later one holds the
// scalars of one step. TensorBoard reads every such file in a directory as
// one run.
//
// Durability: each WriteScalars hands its whole record to the operating
// system (one Append) before it returns, so a crash of this process loses
// nothing already written, and a crash inside a call loses at most that
// call's record (a torn last record, where readers stop). Sync makes
// what was written survive a crash of the machine too.
//
// Errors are absl::Status naming the file. A failed write leaves the file
// with a torn record at its end, so it is sticky: every later call returns
// FAILED_PRECONDITION naming the file and the first error, and the file is
// not appended to again.
//
// Steady state costs no heap allocation beyond what a step with more or
// longer tags than any before it needs: the Event, its values and the record
// buffer are reused from call to call.
//
// Thread-safety: not thread-safe; one thread uses a writer at a time. The
// static functions are thread-safe.
#ifndef WEFT_RUNTIME_SUMMARY_WRITER_H_
#define WEFT_RUNTIME_SUMMARY_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/env.h"
#include "proto/event.pb.h"

namespace weft {

// The file_version of the first record of every event file.
inline constexpr char kEventFileVersion[] = "brain.Event:2";
// Every event file's name starts with this.
inline constexpr char kEventFilePrefix[] = "events.out.tfevents.";

// One value of one step: `tag` names the chart ("train/loss").
struct SummaryScalar {
  absl::string_view tag;
  float value = 0;
};

class SummaryWriter {
 public:
  // A name for a new event file, TensorFlow's convention:
  // "events.out.tfevents.<unix seconds>.<hostname>.<pid>.<counter>", the
  // seconds from `env`'s clock, the counter process-wide, so two names made
  // by one process differ. Characters of the host name other than letters,
  // digits, '-', '_' and '.' become '_'.
  static std::string NewEventFileName(Env* env);

  // Creates (or truncates) the event file `path`, whose directory must
  // exist, with mode 0600, and writes its file_version record. Errors name
  // `path`.
  static absl::StatusOr<std::unique_ptr<SummaryWriter>> Open(const std::string& path, Env* env = Env::Default());

  // Creates `dir` and its missing parents (mode 0700) and a new event file
  // in it (NewEventFileName; a name that exists already is passed over).
  static absl::StatusOr<std::unique_ptr<SummaryWriter>> Create(const std::string& dir, Env* env = Env::Default());

  // Closes the file if Close was not called; errors are then lost.
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  // Appends one Event at `step` (wall_time from the Env's clock) holding
  // `scalars` in order, and hands it to the OS. Nothing is written when
  // `scalars` is empty.
  absl::Status WriteScalars(int64_t step, absl::Span<const SummaryScalar> scalars);
  // fsync: what was written survives a crash of the machine.
  absl::Status Sync();
  // Closes the file. FAILED_PRECONDITION after a first Close or an error.
  absl::Status Close();

  const std::string& path() const { return path_; }

 private:
  SummaryWriter(std::string path, std::unique_ptr<WritableFile> file, Env* env);
  // Frames the serialized `event` into record_ and appends it.
  absl::Status AppendEvent(const Event& event);
  // The sticky error, or FAILED_PRECONDITION once closed.
  absl::Status Unusable() const;

  const std::string path_;
  std::unique_ptr<WritableFile> file_;  // null once closed or failed
  Env* const env_;
  absl::Status error_;   // the first failed write; sticky
  Event event_;          // reused: its summary's values are kept across steps
  std::string record_;   // reused: one framed record
};

}  // namespace weft

#endif  // WEFT_RUNTIME_SUMMARY_WRITER_H_
