// `weft master | worker | ps`: the daemons.
//
//   weft worker --task=worker:0 --cluster='worker=h:p,h:p;ps=h:p' [--listen=HOST:PORT]
//   weft ps     --task=ps:0     --cluster=...                     [--listen=HOST:PORT]
//   weft worker --task=worker:0 --listen=HOST:PORT                (no cluster)
//   weft master --cluster=...   [--port=P | --listen=HOST:PORT]
//   any of them: [--port_file=PATH]
//
// Without --cluster/--task the cluster comes from $TF_CONFIG (Kubeflow's
// TFJob format). A worker or ps listens on its own cluster address's port on
// every interface unless --listen says otherwise. The master sends the
// cluster it was given to every task with each graph it registers there, and
// the task reaches its peers through that one from then on; so a task may
// start with no cluster at all, on --listen=HOST:0, and learn its peers'
// ports from the master. --port_file=PATH (client/port_file.h) reports the
// port a daemon bound, once it serves: how a starter learns a port 0 daemon's
// port without picking a "free" one that another process could take first.
// SIGTERM or SIGINT stops a daemon cleanly: calls in flight finish or are
// cancelled, every thread is joined, and it exits 0.
#ifndef WEFT_CLIENT_DAEMON_COMMANDS_H_
#define WEFT_CLIENT_DAEMON_COMMANDS_H_

namespace weft {

// Where daemons read datasets from unless --data_root says otherwise
// (Debian's dataset packages install there).
inline constexpr char kDefaultDataRoot[] = "/usr/share/datasets";
// Where the master keeps uploaded datasets, and where a task keeps its
// copies, unless --upload_root / --dataset_cache say otherwise.
inline constexpr char kDefaultUploadRoot[] = "/tmp/weft-uploads";
inline constexpr char kDefaultDatasetCache[] = "/tmp/weft-dataset-cache";

int RunMasterCommand(int argc, char** argv);
// `job` is "worker" or "ps": the default job of --task.
int RunTaskCommand(int argc, char** argv, const char* job);

// Blocks SIGINT and SIGTERM in this thread (and so in every thread it starts
// afterwards), so that WaitForTerminationSignal can take them. Call before
// starting any server.
void BlockTerminationSignals();
// Waits for SIGINT or SIGTERM; returns the signal.
int WaitForTerminationSignal();

}  // namespace weft

#endif  // WEFT_CLIENT_DAEMON_COMMANDS_H_
