// The `weft` command.
//
//   weft train JOB [--output=text|json] [--log_level=LEVEL]
//       Trains JOB (a .pbtxt or .json JobSpec) in this process, showing
//       progress on stderr, and prints the result: a summary, or with
//       --output=json one JSON object on stdout.
//
// Exit status: 0 on success, 1 when the job failed, 2 for bad usage.
#include <malloc.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"
#include "client/certs_command.h"
#include "client/checkpoints_command.h"
#include "client/daemon_commands.h"
#include "client/flags.h"
#include "client/job_commands.h"
#include "job/job_spec.h"
#include "client/local_command.h"
#include "client/progress.h"
#include "common/status_macros.h"
#include "graph/op_registry.h"
#include "common/logging.h"
#include "runtime/trainer.h"

namespace weft {
namespace {

constexpr char kUsage[] =
    "usage: weft <command> [args]\n"
    "\n"
    "train in one process:\n"
    "  train JOB [--output=text|json] [--gpus=G] [--cuda_graphs=true|false] [--log_level=LEVEL]\n"
    "\n"
    "run a local cluster of processes (and optionally a job on it):\n"
    "  local --workers=N --ps=M [--cpu_devices=D] [--gpus=G] [JOB] [--output=text|json] [--log_dir=DIR]\n"
    "        [--max_restarts=N] [--resume_from=DIR] [--master_wait_seconds=S] [--insecure]\n"
    "        [--checkpoint_root=DIR] [--data_root=DIR]\n"
    "\n"
    "daemons (cluster from --cluster='worker=h:p,h:p;ps=h:p' or $TF_CONFIG; a task given neither\n"
    "  learns it from the master and needs --listen):\n"
    "  master --port=P | --listen=HOST:PORT [--cluster=...] [--state_dir=DIR] [--auth_tokens_file=FILE]\n"
    "         [--upload_root=DIR] (default /tmp/weft-uploads: datasets clients upload)\n"
    "         [--max_upload_bytes=N] (default 2G per upload) [--upload_quota_bytes=N] (default 10G per user)\n"
    "  worker --task=worker:I [--cluster=...] [--listen=HOST:PORT] [--cpu_devices=D] [--gpus=G] [--inter_op_threads=N]\n"
    "         [--drain_seconds=S] [--dataset_cache=DIR] (default /tmp/weft-dataset-cache: uploaded datasets\n"
    "         the master copies here)\n"
    "         [--master=HOST:PORT] (join that master's cluster: register, and again every 5 s)\n"
    "         [--advertise=HOST:PORT] (with --master: the address registered; default the --listen host,\n"
    "         or this machine's name for 0.0.0.0, with the port bound)\n"
    "  ps     --task=ps:I     [--cluster=...] [--listen=HOST:PORT] [--drain_seconds=S]\n"
    "  every daemon: --ca=FILE --cert=FILE --key=FILE (mutual TLS; or --insecure), [--health_port=P]\n"
    "        [--port_file=FILE] (the port it bound, e.g. for --listen=127.0.0.1:0, written once it serves)\n"
    "        [--checkpoint_root=DIR] (default /tmp/weft-checkpoints) [--data_root=DIR] (default /usr/share/datasets)\n"
    "\n"
    "certificates (mutual TLS between daemons, and for users):\n"
    "  certs init DIR                         a cluster CA: DIR/ca.crt, DIR/ca.key\n"
    "  certs issue DIR --name=NAME [--hosts=H,H] [--role=cluster|user|admin]\n"
    "        NAME: master, /job:worker/task:0, ... or a user name\n"
    "  certs show FILE\n"
    "\n"
    "jobs (master from --master=HOST:PORT or $WEFT_MASTER):\n"
    "  submit JOB [--follow] [--output=text|json] [--resume_from=DIR] [--master_wait_seconds=S]\n"
    "  jobs | status ID | cancel ID | devices\n"
    "  scale ID --workers=N                   an elastic job's size from its next step on\n"
    "  trace ID [--steps=N] [--out=trace.json]  the next N steps on every task, for Perfetto\n"
    "  credentials: --ca=FILE with --cert=FILE --key=FILE or --token_file=FILE\n"
    "  ($WEFT_CA, $WEFT_CERT, $WEFT_KEY, $WEFT_TOKEN_FILE), or --insecure\n"
    "\n"
    "  checkpoints DIR [--output=text|json]   list and check a job's checkpoints, newest first\n"
    "  ops                                    list the registered ops\n"
    "\n"
    "--gpus=G: GPUs a process may use (default: every visible one, when built with CUDA;\n"
    "  0: none). A job's `device: CPU` keeps it off GPUs, `device: GPU` requires one.\n"
    "--cuda_graphs: `weft train` on a GPU records a steady step as a CUDA graph and replays it\n"
    "  (default true, false where WEFT_CUDA_GRAPHS=0; false launches every kernel of every step).\n";

LocalTrainer* g_trainer = nullptr;

void OnSignal(int) {
  if (g_trainer != nullptr) g_trainer->Cancel();
}

int Fail(bool json, const absl::Status& s) {
  std::fprintf(stderr, "weft: %s\n", std::string(s.message()).c_str());
  if (json) {
    // Only state and the error: a failed run has no figures to report.
    std::printf("{\"state\": \"FAILED\", \"error\": %s}\n", JsonString(s.message()).c_str());
  }
  return 1;
}

int Train(int argc, char** argv) {
  auto parsed = Flags::Parse(argc, argv, 2, {"output", "gpus", "cuda_graphs", "log_level"}, {});
  if (!parsed.ok()) {
    std::fprintf(stderr, "weft train: %s\n%s", std::string(parsed.status().message()).c_str(), kUsage);
    return 2;
  }
  const Flags& f = *parsed;
  const std::string output = f.Get("output", "text");
  if (output != "text" && output != "json") {
    std::fprintf(stderr, "weft train: --output must be text or json, got '%s'\n", output.c_str());
    return 2;
  }
  if (f.Has("log_level") && !SetLogLevel(f.Get("log_level"))) {
    std::fprintf(stderr, "weft: unknown log level '%s'\n", f.Get("log_level").c_str());
    return 2;
  }
  auto gpus = f.GetInt("gpus", -1, -1, 64);
  if (!gpus.ok()) {
    std::fprintf(stderr, "weft train: %s\n", std::string(gpus.status().message()).c_str());
    return 2;
  }
  const char* graphs_env = std::getenv("WEFT_CUDA_GRAPHS");
  const std::string cuda_graphs =
      f.Get("cuda_graphs", graphs_env != nullptr && std::string(graphs_env) == "0" ? "false" : "true");
  if (cuda_graphs != "true" && cuda_graphs != "false") {
    std::fprintf(stderr, "weft train: --cuda_graphs must be true or false, got '%s'\n", cuda_graphs.c_str());
    return 2;
  }
  const bool json = output == "json";
  if (f.args().size() != 1) {
    std::fprintf(stderr, "weft train: expected one job file\n%s", kUsage);
    return 2;
  }
  auto job = LoadJobFile(f.args()[0]);
  if (!job.ok()) return Fail(json, job.status());
  if (absl::Status s = ValidateJob(*job); !s.ok()) return Fail(json, Annotate(s, f.args()[0]));
  if (job->name().empty()) {
    std::string base = f.args()[0].substr(f.args()[0].rfind('/') + 1);
    job->set_name(base.substr(0, base.find('.')));
  }
  LocalTrainerOptions trainer_options;
  trainer_options.max_gpus = static_cast<int>(*gpus);
  trainer_options.cuda_graphs = cuda_graphs == "true";
  auto trainer = LocalTrainer::Create(*job, trainer_options);
  if (!trainer.ok()) return Fail(json, trainer.status());
  g_trainer = trainer->get();
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);

  ProgressDisplay display(stderr, isatty(fileno(stderr)) != 0);
  auto result = (*trainer)->Train([&](const TrainProgress& p) { display.Update(p); });
  display.Finish();
  g_trainer = nullptr;
  if (!result.ok()) return Fail(json, result.status());
  if (json) {
    std::printf("%s\n", result->ToJson().c_str());
  } else {
    std::printf("job %s %s: %lld steps, %lld epochs, train loss %.4f%s, %.0f samples/s, %.1f s\n",
                result->job.c_str(), JobState_Name(result->state).c_str(), static_cast<long long>(result->steps),
                static_cast<long long>(result->epochs), result->train_loss,
                result->TestMetrics().c_str(), result->samples_per_second, result->wall_seconds);
  }
  return result->state == SUCCEEDED ? 0 : 1;
}


// gRPC reads a large message into fresh buffers of up to a few MiB. With
// glibc's defaults each is a new mmap, so every received tensor first pays a
// page fault per 4 KiB, and every free returns the pages to the kernel. A
// daemon keeps those buffers in its heap instead: blocks up to 32 MiB come
// from the heap and freed memory is not trimmed, so steady-state steps reuse
// warm pages. The cost is that a daemon's RSS stays at its high-water mark.
void KeepFreedMemory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  using namespace weft;
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "help") {
    std::fprintf(argc < 2 ? stderr : stdout, "%s", kUsage);
    return argc < 2 ? 2 : 0;
  }
#ifdef NDEBUG
  // Debian builds Abseil without NDEBUG, which leaves its mutex deadlock
  // detector on: a global graph updated on every lock and every mutex's
  // destruction. Optimised weft binaries turn it off (tests keep it).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  const std::string cmd = argv[1];
  if (cmd == "train") return Train(argc, argv);
  if (cmd == "local") return RunLocalCommand(argc, argv);
  if (cmd == "master" || cmd == "worker" || cmd == "ps") KeepFreedMemory();
  if (cmd == "master") return RunMasterCommand(argc, argv);
  if (cmd == "worker") return RunTaskCommand(argc, argv, "worker");
  if (cmd == "ps") return RunTaskCommand(argc, argv, "ps");
  if (cmd == "submit") return RunSubmitCommand(argc, argv);
  if (cmd == "jobs") return RunJobsCommand(argc, argv);
  if (cmd == "status") return RunStatusCommand(argc, argv);
  if (cmd == "cancel") return RunCancelCommand(argc, argv);
  if (cmd == "scale") return RunScaleCommand(argc, argv);
  if (cmd == "trace") return RunTraceCommand(argc, argv);
  if (cmd == "devices") return RunDevicesCommand(argc, argv);
  if (cmd == "checkpoints") return RunCheckpointsCommand(argc, argv);
  if (cmd == "certs") return RunCertsCommand(argc, argv);
  if (cmd == "ops") {
    for (const std::string& op : OpRegistry::Global()->OpNames()) {
      if (op[0] != '_') std::printf("%s\n", op.c_str());  // _Send, _Recv: inserted by partitioning
    }
    return 0;
  }
  std::fprintf(stderr, "weft: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}
