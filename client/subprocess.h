// Child processes for `weft local`: start, signal, wait, and never leak.
//
// A child started here gets PR_SET_PDEATHSIG(SIGTERM), so it stops when the
// supervising process dies, even by SIGKILL, and no daemon outlives a local
// cluster. PR_SET_PDEATHSIG follows the thread that forked, not the process:
// keep the thread that calls Start or Restart alive while the child should
// run. A child leads its own process group, so a terminal's Ctrl-C reaches
// only the supervisor, which stops its children in its own order. Terminate
// sends SIGTERM, waits up to a grace period, then sends SIGKILL.
//
// Thread-safety: a Subprocess is used by one thread at a time.
#ifndef WEFT_CLIENT_SUBPROCESS_H_
#define WEFT_CLIENT_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace weft {

class Subprocess {
 public:
  Subprocess() = default;
  ~Subprocess();  // Terminates a running child (1 s grace).
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // Starts argv[0] (a path) with `argv`; stdout/stderr go to `log_path` when
  // non-empty (appended), else are inherited. `env` entries ("K=V") are added.
  absl::Status Start(const std::vector<std::string>& argv, const std::string& log_path = "",
                     const std::vector<std::string>& env = {});
  // Starts the command line of the last Start again, appending to the same
  // log. REQUIRES: Start succeeded once and that child has exited.
  absl::Status Restart();
  pid_t pid() const { return pid_; }
  // True while the child has not exited (reaps it if it has).
  bool Running();
  // The exit status as from waitpid, once the child has exited.
  int exit_status() const { return status_; }
  // Sends `signal`; no-op when the child has exited.
  void Signal(int signal);
  // SIGTERM, then SIGKILL after `grace`; returns when the child is reaped.
  void Terminate(absl::Duration grace);
  // Waits up to `timeout` for the child to exit; true if it did.
  bool WaitFor(absl::Duration timeout);

 private:
  std::vector<std::string> argv_;  // of the last Start, for Restart
  std::string log_path_;
  std::vector<std::string> env_;
  pid_t pid_ = -1;
  int status_ = 0;
  bool exited_ = true;
};

// A waitpid status in words: "exit status 1", "killed by signal 9".
std::string DescribeExitStatus(int status);

}  // namespace weft

#endif  // WEFT_CLIENT_SUBPROCESS_H_
