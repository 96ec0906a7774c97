// Helpers shared by the integration tests that run `weft` daemons as
// processes: where the binary is, a small learnable dataset, the identity
// each daemon's certificate carries, and the daemons themselves.
//
// A TestDaemon listens on 127.0.0.1 port 0 and reports the port the kernel
// gave it through --port_file; the test waits for that file (with a
// deadline) before it names the daemon's address to anyone. So no port is
// picked, released and hoped to be free later. Tasks start knowing only
// themselves; the master, started last with every task's address, sends the
// cluster to the tasks.
//
// Thread-safety: plain functions; a TestDaemon is used by one thread at a
// time, and the thread that starts it must outlive its process (a child dies
// with the thread that forked it, see client/subprocess.h).
#ifndef WEFT_TESTS_TEST_CLUSTER_H_
#define WEFT_TESTS_TEST_CLUSTER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/grpc_master_client.h"
#include "client/subprocess.h"
#include "gtest/gtest.h"

namespace weft {
namespace testing {

// How long a daemon may take to serve, and a cluster to come up: far more
// than a healthy start needs, well inside Bazel's timeout.
inline constexpr absl::Duration kDaemonStartTimeout = absl::Seconds(60);

// The `weft` binary in the test's runfiles.
std::string WeftBinary();
// Writes a synthetic 3-class problem (class c brightens the c-th third of a
// 12-pixel image; n examples in each split) as IDX files under `dir`
// (created) and returns `dir`.
std::string WriteThreeClassData(const std::string& dir, int n);
// "worker-1" -> "/job:worker/task:1"; "master" -> "master".
std::string DaemonIdentity(const std::string& name);
// The last `lines` lines of a file (a daemon's log), for failure messages.
std::string LogTail(const std::string& path, int lines = 20);

class TestDaemon {
 public:
  // `name`: "worker-0", "master", ..., for messages. `args`: the subcommand
  // and its flags, without the binary, --listen and --port_file. Output
  // goes to `log`, appended; the port file lies beside it.
  // A process still running when the TestDaemon goes is terminated.
  TestDaemon(std::string name, std::vector<std::string> args, std::string log);

  // Start = Launch + AwaitPort. Launch several, then await each, to start
  // them side by side.
  absl::Status Start(absl::Duration timeout = kDaemonStartTimeout);
  // Starts the process on port 0. An error names the daemon.
  absl::Status Launch();
  // Waits for the port the daemon bound. An error names the daemon and its
  // log and quotes the log's end: it exited first, or reported no port in
  // `timeout`.
  absl::Status AwaitPort(absl::Duration timeout = kDaemonStartTimeout);
  // Starts it again on the port it had (how a task comes back at its
  // address after a crash) and waits until it serves; an error says so when
  // that port could not be bound again. REQUIRES: Start succeeded, and the
  // process has exited since.
  absl::Status Restart(absl::Duration timeout = kDaemonStartTimeout);
  // OK while the process runs; else FAILED_PRECONDITION naming the daemon,
  // how it exited, and its log.
  absl::Status CheckRunning();

  const std::string& name() const { return name_; }
  const std::string& log() const { return log_; }
  // The bound port, once AwaitPort succeeded; 0 before.
  int port() const { return port_; }
  // "127.0.0.1:<port>"
  std::string address() const;
  Subprocess* process() { return process_.get(); }

 private:
  absl::Status LaunchOn(int port);

  const std::string name_;
  const std::vector<std::string> args_;
  const std::string log_;
  const std::string port_file_;
  int port_ = 0;
  std::unique_ptr<Subprocess> process_;
};

// Waits until the master behind `client` lists devices of `num_tasks` tasks.
// Fails early, naming the daemon and its log, when one of `daemons` exits;
// on timeout, says what the master answered last.
::testing::AssertionResult WaitForCluster(MasterClient* client, int num_tasks, const std::vector<TestDaemon*>& daemons,
                                          absl::Duration timeout = kDaemonStartTimeout);

// A daemon still running gets SIGTERM and must exit, cleanly (status 0),
// within `timeout`; the test fails naming it otherwise. How the tests stop
// their clusters.
void ExpectStopsOnSigterm(TestDaemon* daemon, absl::Duration timeout = absl::Seconds(30));

// Watches job `id` to its end, calling `on_status` (if set) with each status
// the master streams, and returns the last. A job still running after
// `timeout` is cancelled, which ends the watch, and the test fails saying
// so; a watch that fails fails the test too.
JobStatus WatchJobToEnd(MasterClient* client, const std::string& id, absl::Duration timeout,
                        const std::function<void(const JobStatus&)>& on_status = nullptr);

// Polls job `id` (GetJob) until `until` holds for its status or the job
// ends, and returns the last status; the test fails when neither happens
// within `timeout`, naming `what` it waited for. For actions that must land
// while a job runs: WatchJob's progress comes only about once a second.
JobStatus PollJobUntil(MasterClient* client, const std::string& id, absl::Duration timeout, const std::string& what,
                       const std::function<bool(const JobStatus&)>& until);

}  // namespace testing
}  // namespace weft

#endif  // WEFT_TESTS_TEST_CLUSTER_H_
