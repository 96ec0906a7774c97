// The processes of `weft local` (client/local_command.h): a master, workers
// and parameter servers, each a `weft` process on 127.0.0.1 that reports the
// port it bound; a supervisor that restarts a task that exits unasked; and
// the throwaway credentials of an mTLS local cluster.
#ifndef WEFT_CLIENT_LOCAL_CLUSTER_H_
#define WEFT_CLIENT_LOCAL_CLUSTER_H_

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/grpc_master_client.h"
#include "client/subprocess.h"

namespace weft {

struct Task {
  std::string name;     // "worker:0"
  std::string address;  // "127.0.0.1:40123", once the task reported its port
  std::string log;
  std::string port_file;
  // Its command line: --listen=127.0.0.1:0 at first, then the port it bound,
  // so that a restart comes back at the same address.
  std::vector<std::string> argv;
  std::unique_ptr<Subprocess> process;
  absl::Time started;  // of the current process
  int restarts = 0;
  bool restart_pending = false;  // exited; starts again at `restart_at`
  absl::Time restart_at;
  bool given_up = false;  // exited with no restarts left
};

// How to start the tasks: the flags every daemon gets besides its own.
struct LocalClusterOptions {
  std::string self;     // this executable, which every task runs
  std::string log_dir;  // logs, port files, tasks.txt
  std::string state_dir;
  std::string checkpoint_root;
  std::string data_root;
  std::string log_level;  // empty: the daemons' default
  int workers = 1;
  int ps = 0;
  int cpu_devices = 1;
  int gpus = -1;
  // Monitoring ports (`weft local --metrics_port=P`): -1 none; else the
  // master's is P (0: any free port) and every task's any free port, each
  // on 127.0.0.1, reported in DIR/<name>.metrics_port (name "master-0",
  // "worker-1"). `metrics_plaintext`: plain HTTP instead of HTTPS.
  int metrics_port = -1;
  bool metrics_plaintext = false;
  // Every task's --shared_memory ("true" or "false").
  std::string shared_memory = "true";
  // Identity ("master", "worker-0") -> its --ca/--cert/--key flags; a task
  // missing here runs --insecure.
  std::map<std::string, std::vector<std::string>> tls_flags;
};

// Starts the workers and parameter servers side by side, waits for each one's
// port, then starts the master with every task's address (`cluster`), waits
// for its port and writes DIR/tasks.txt. Every daemon binds port 0 and
// reports the port it got in DIR/<name>.port: no port is picked and released
// first, for another process to take in between. On error the tasks started
// so far stay in `tasks` for the caller to stop.
absl::Status StartLocalTasks(const LocalClusterOptions& options, std::vector<Task>* tasks, std::string* cluster);

// The path of this executable.
std::string SelfPath();

// Waits until the master lists a device of every task, or a task exits, or
// the deadline passes.
absl::Status WaitUntilReady(MasterClient* client, std::vector<Task>* tasks, int expected_tasks, absl::Duration limit);

// Stops every task: SIGTERM to all, master first, then a bounded wait for each.
void StopAll(std::vector<Task>* tasks);

// `name pid address` per task, replaced atomically so that a reader never
// sees half a file.
absl::Status WriteTasksFile(const std::string& path, const std::vector<Task>& tasks);

// Keeps a running local cluster's tasks up: a task that exits unasked (a
// crash, kill -9, the OOM killer) starts again with Task::argv, on the port
// it bound first, appending to the same log, at most `max_restarts`
// times. Its thread also stops the tasks at the end: PR_SET_PDEATHSIG ties a
// child to the thread that forked it, so the thread that restarts children
// must outlive them.
//
// Thread-safety: Start and Stop are called from one thread. Between them the
// tasks belong to the supervisor's thread.
class Supervisor {
 public:
  // `tasks` must outlive this; `tasks_file` is rewritten on each restart.
  Supervisor(std::vector<Task>* tasks, int max_restarts, std::string tasks_file)
      : tasks_(tasks), max_restarts_(max_restarts), tasks_file_(std::move(tasks_file)) {}
  ~Supervisor() { Stop(); }

  void Start();
  // Stops every task, master first, with no restarts from the moment it is
  // called; returns once all have exited.
  void Stop();

 private:
  void Run();
  void CheckTasks();

  std::vector<Task>* const tasks_;
  const int max_restarts_;
  const std::string tasks_file_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The throwaway credentials of a local cluster: a CA, a certificate per
// daemon (for 127.0.0.1 and localhost) and an admin user for this command.
struct LocalCredentials {
  std::string ca;
  std::map<std::string, std::pair<std::string, std::string>> daemon;  // name -> cert, key
  std::string user_cert, user_key;
};

absl::StatusOr<LocalCredentials> MakeLocalCredentials(const std::string& dir, const std::vector<std::string>& names);

}  // namespace weft

#endif  // WEFT_CLIENT_LOCAL_CLUSTER_H_
