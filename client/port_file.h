// Port files: how a daemon started on port 0 tells whoever started it which
// port the kernel gave it.
//
// `weft master|worker|ps --port_file=PATH` writes the port it bound, in
// decimal and a newline, once it serves. The file is written whole under a
// temporary name in the same directory and renamed to PATH, so a reader sees
// no file or the whole of it, never a part. The starter removes PATH before
// it starts the daemon, so that an old file cannot answer for a new process.
//
// Thread-safety: plain functions.
#ifndef WEFT_CLIENT_PORT_FILE_H_
#define WEFT_CLIENT_PORT_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/subprocess.h"

namespace weft {

// Writes `port` to `path` atomically (see above). UNAVAILABLE naming the file
// when it cannot be written.
absl::Status WritePortFile(const std::string& path, int port);

// The port in `path`. NOT_FOUND when there is no file (yet); INVALID_ARGUMENT
// naming the file when it holds anything but a port in 1..65535 and a
// newline.
absl::StatusOr<int> ReadPortFile(const std::string& path);

// Waits until `process` has written its port file `path` and returns the
// port. FAILED_PRECONDITION when the process exits first (saying how),
// DEADLINE_EXCEEDED when `deadline` passes; both name the file. Polls: meant
// for start-up, not for any step's path.
absl::StatusOr<int> WaitForPortFile(Subprocess* process, const std::string& path, absl::Time deadline);

}  // namespace weft

#endif  // WEFT_CLIENT_PORT_FILE_H_
