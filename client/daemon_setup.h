// What `weft worker`, `weft ps` and `weft master` share when they start
// (client/daemon_commands.cc): reading the cluster, the security, the file
// roots and the memory flags, and the plaintext health server. The commands
// themselves are in task_command.cc and master_command.cc.
#ifndef WEFT_CLIENT_DAEMON_SETUP_H_
#define WEFT_CLIENT_DAEMON_SETUP_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/flags.h"
#include "common/cluster_spec.h"
#include "common/grpc_security.h"
#include "common/monitoring_server.h"
#include "proto/cluster.pb.h"
#include "master/dataset_uploads.h"
#include "worker/dataset_cache.h"
#include "worker/worker_server.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace weft {
namespace daemon {

// Prints "weft <cmd>: <msg>" and returns 2 (a usage error).
int Usage(const char* cmd, absl::string_view msg);

// The cluster and this task, from flags or TF_CONFIG.
absl::StatusOr<ClusterConfig> ClusterFrom(const Flags& f, bool needs_task);

// --port_file=PATH: where the daemon reports the port it bound (for port 0).
// Empty when not given; an error when given empty.
absl::StatusOr<std::string> PortFileFlag(const Flags& f);

// The daemon's transport security from --ca/--cert/--key, or plaintext with
// --insecure (warned about once). `identity` is the name its certificate
// must carry.
absl::StatusOr<std::shared_ptr<const TransportSecurity>> DaemonSecurity(const Flags& f, const std::string& role,
                                                                        const std::string& identity);

// A plaintext server holding only the standard health service, for probes
// that cannot speak mTLS (Kubernetes' gRPC probes).
class HealthServer {
 public:
  // Null for --health_port=0 (the default).
  static absl::StatusOr<std::unique_ptr<HealthServer>> Start(const Flags& f);
  ~HealthServer();
  // Reports NOT_SERVING and stops; idempotent.
  void Stop();

 private:
  explicit HealthServer(std::unique_ptr<grpc::Server> server) : server_(std::move(server)) {}
  std::unique_ptr<grpc::Server> server_;
};

// The monitoring port (common/monitoring_server.h): --metrics_port (unset:
// none; 0: any free port), --metrics_host (default 0.0.0.0),
// --metrics_plaintext, and --metrics_port_file where the bound port is
// reported. Serves HTTPS with the daemon's --ca/--cert/--key unless the
// daemon is --insecure or --metrics_plaintext (loopback only). Null when
// --metrics_port is not given. `pages` are served beside /metrics.
absl::StatusOr<std::unique_ptr<MonitoringServer>> StartMonitoring(const Flags& f, const std::string& role,
                                                                  std::map<std::string, HttpHandler> pages = {});

// --dataset_cache (default kDefaultDatasetCache): where a task keeps the
// datasets clients uploaded, copied here by the master; also this process's
// upload root, so jobs' upload_id resolve there.
absl::StatusOr<std::unique_ptr<worker::DatasetCache>> OpenDatasetCache(const Flags& f);

// --upload_root (default kDefaultUploadRoot), --max_upload_bytes and
// --upload_quota_bytes: the master's store of uploaded datasets.
absl::Status UploadFlags(const Flags& f, master::DatasetUploadsOptions* opts);

// Confines datasets to --data_root and returns the opened --checkpoint_root.
absl::StatusOr<std::string> ConfineFiles(const Flags& f);

// The cluster without the master's own job: the tasks the master drives.
ClusterDef WithoutJob(const ClusterDef& cluster, const std::string& job);

// --memory_limit and --max_message_bytes, shared by every daemon; called
// before anything serves.
absl::Status ApplyMemoryFlags(const Flags& f, const std::string& role);

// The worker's and ps's quotas from their flags.
absl::Status TaskQuotas(const Flags& f, worker::WorkerServerOptions* opts);

}  // namespace daemon
}  // namespace weft

#endif  // WEFT_CLIENT_DAEMON_SETUP_H_
