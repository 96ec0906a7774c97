// The client side of bench/transfer.sh: drives a `weft master` and two
// `weft worker` tasks (worker:0, worker:1) through RemoteSession and prints
// one JSON line per measurement.
//
//   transfer_bench transfer --master=H:P --sender_pid=PID [--mib=1,4,64,256]
//                           [--steps=20] [--warmup=3]
//     Per size: a float32 Variable of MIB MiB on worker:1 ("ones"), read by an
//     Identity on worker:0. A step targets the Identity and fetches nothing, so
//     the payload crosses once, worker:1 -> worker:0 (RecvTensor), and the
//     client gets no tensor back. The step time is the client's wall clock of
//     Run (master dispatch to both tasks included). The sender's peak RSS
//     above idle comes from /proc/PID/status (VmHWM after the steps, minus VmRSS
//     after the variable exists; the peak is reset via /proc/PID/clear_refs).
//
// The master's credentials come from WEFT_CA, WEFT_CERT and WEFT_KEY, as for
// the `weft` client; without WEFT_CA the master must run with --insecure.
//
//   transfer_bench noop --master=H:P [--calls=2000] [--warmup=200]
//     A step that runs a NoOp on worker:0 and one on worker:1, nothing fed or
//     fetched: the runtime's own round trip client -> master -> both tasks.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/grpc_client_auth.h"
#include "client/grpc_master_client.h"
#include "common/logging.h"
#include "graph/builder.h"
#include "graph/graph.h"

namespace weft {
namespace {

constexpr char kW0[] = "/job:worker/task:0";
constexpr char kW1[] = "/job:worker/task:1";

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "transfer_bench: %s\n", msg.c_str());
  std::exit(1);
}

void CheckOk(const absl::Status& s, const std::string& what) {
  if (!s.ok()) Die(absl::StrCat(what, ": ", s.ToString()));
}

// --key=value flags after the mode.
std::map<std::string, std::string> ParseFlags(int argc, char** argv) {
  std::map<std::string, std::string> f;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || a.find('=') == std::string::npos) Die("bad flag '" + a + "'; want --key=value");
    const size_t eq = a.find('=');
    f[a.substr(2, eq - 2)] = a.substr(eq + 1);
  }
  return f;
}

int IntFlag(const std::map<std::string, std::string>& f, const std::string& k, int def) {
  auto it = f.find(k);
  if (it == f.end()) return def;
  int v = 0;
  if (!absl::SimpleAtoi(it->second, &v) || v < 0) Die("--" + k + " must be a non-negative integer");
  return v;
}

// A field of /proc/PID/status in KiB ("VmRSS", "VmHWM").
long ProcStatusKib(int pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::strtol(line.c_str() + field.size() + 1, nullptr, 10);
  }
  Die(absl::StrCat("no ", field, " in /proc/", pid, "/status"));
}

// Resets VmHWM to the current RSS (Linux >= 4.0); false when not permitted.
bool ResetPeakRss(int pid) {
  std::ofstream out(absl::StrCat("/proc/", pid, "/clear_refs"));
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

struct Stats {
  double min, p50, p99, max, mean;
};

Stats Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  return Stats{v.front(), v[v.size() / 2], v[static_cast<size_t>(v.size() * 0.99)], v.back(), sum / v.size()};
}

double TimedRun(RemoteSession* s, const std::vector<std::string>& fetches, const std::vector<std::string>& targets,
                std::vector<Tensor>* out = nullptr) {
  const absl::Time t0 = absl::Now();
  auto r = s->Run({}, fetches, targets);
  const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
  CheckOk(r.status(), "Run");
  if (out != nullptr) *out = *std::move(r);
  return secs;
}

int Transfer(MasterClient* client, const std::map<std::string, std::string>& f) {
  const int pid = IntFlag(f, "sender_pid", 0);
  if (pid <= 0) Die("transfer needs --sender_pid=PID of the worker:1 process");
  const int steps = std::max(1, IntFlag(f, "steps", 20));
  const int warmup = IntFlag(f, "warmup", 3);
  std::vector<int64_t> sizes_mib;
  for (absl::string_view m : absl::StrSplit(f.count("mib") ? f.at("mib") : "1,4,64,256", ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(m, &v) || v <= 0) Die("--mib must list positive integers");
    sizes_mib.push_back(v);
  }
  for (int64_t mib : sizes_mib) {
    const int64_t bytes = mib << 20;
    const int64_t n = bytes / 4;
    Graph g;
    GraphBuilder b(&g);
    b.set_device(kW1);
    Output x = b.Variable(absl::StrCat("x", mib), DType::kFloat32, {n}, "ones");
    b.Op("Sum", {x}, {}, "init");  // makes the variable exist, on worker:1 only
    b.set_device(kW0);
    Output y = b.Op("Identity", {x}, {}, "y");
    b.Op("Sum", {y}, {}, "check");
    CheckOk(b.status(), "building the graph");
    auto session = RemoteSession::Create(client, g.ToGraphDef());
    CheckOk(session.status(), "CreateSession");
    RemoteSession* s = session->get();

    TimedRun(s, {}, {"init"});
    const long idle_kib = ProcStatusKib(pid, "VmRSS");
    const bool reset = ResetPeakRss(pid);
    const long hwm_before = ProcStatusKib(pid, "VmHWM");
    for (int i = 0; i < warmup; ++i) TimedRun(s, {}, {"y"});
    std::vector<double> t;
    for (int i = 0; i < steps; ++i) t.push_back(TimedRun(s, {}, {"y"}));
    const long hwm_after = ProcStatusKib(pid, "VmHWM");
    // Correctness: the receiver sums what arrived (not timed).
    std::vector<Tensor> got;
    TimedRun(s, {"check"}, {}, &got);
    const double sum = got.at(0).data<float>()[0];
    CheckOk((*session)->Close(), "CloseSession");

    const Stats st = Summarize(t);
    std::string each;
    for (double x : t) absl::StrAppend(&each, each.empty() ? "" : ", ", absl::StrFormat("%.2f", x * 1e3));
    std::printf(
        "{\"kind\": \"transfer\", \"mib\": %lld, \"bytes\": %lld, \"steps\": %d, \"ms_min\": %.3f, "
        "\"ms_median\": %.3f, \"ms_max\": %.3f, \"GBps_median\": %.4f, \"GBps_best\": %.4f, "
        "\"sender_idle_rss_kib\": %ld, \"sender_hwm_before_kib\": %ld, \"sender_hwm_after_kib\": %ld, "
        "\"sender_peak_above_idle_kib\": %ld, \"peak_reset\": %s, \"check_sum\": %.1f, \"expected_sum\": %lld, \"ms_each\": [%s]}\n",
        static_cast<long long>(mib), static_cast<long long>(bytes), steps, st.min * 1e3, st.p50 * 1e3, st.max * 1e3,
        bytes / st.p50 / 1e9, bytes / st.min / 1e9, idle_kib, hwm_before, hwm_after, hwm_after - idle_kib,
        reset ? "true" : "false", sum, static_cast<long long>(n), each.c_str());
    std::fflush(stdout);
  }
  return 0;
}

int Noop(MasterClient* client, const std::map<std::string, std::string>& f) {
  const int calls = std::max(1, IntFlag(f, "calls", 2000));
  const int warmup = IntFlag(f, "warmup", 200);
  Graph g;
  GraphBuilder b(&g);
  b.set_device(kW0);
  b.AddNode("NoOp", {}, {}, "n0");
  b.set_device(kW1);
  b.AddNode("NoOp", {}, {}, "n1");
  CheckOk(b.status(), "building the graph");
  auto session = RemoteSession::Create(client, g.ToGraphDef());
  CheckOk(session.status(), "CreateSession");
  RemoteSession* s = session->get();
  for (int i = 0; i < warmup; ++i) TimedRun(s, {}, {"n0", "n1"});
  std::vector<double> t;
  t.reserve(calls);
  for (int i = 0; i < calls; ++i) t.push_back(TimedRun(s, {}, {"n0", "n1"}));
  CheckOk((*session)->Close(), "CloseSession");
  const Stats st = Summarize(t);
  std::printf(
      "{\"kind\": \"noop\", \"calls\": %d, \"p50_us\": %.1f, \"p99_us\": %.1f, \"min_us\": %.1f, \"max_us\": %.1f, "
      "\"mean_us\": %.1f}\n",
      calls, st.p50 * 1e6, st.p99 * 1e6, st.min * 1e6, st.max * 1e6, st.mean * 1e6);
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  if (argc < 2) weft::Die("usage: transfer_bench transfer|noop --master=HOST:PORT [...]");
  weft::SetLogLevel("warn");
  const std::string mode = argv[1];
  const auto f = weft::ParseFlags(argc, argv);
  if (!f.count("master")) weft::Die("pass --master=HOST:PORT");
  // Credentials as the `weft` client takes them from the environment
  // (WEFT_CA with WEFT_CERT/WEFT_KEY); without WEFT_CA, a master started
  // with --insecure.
  weft::MasterClientOptions options;
  const char* ca = std::getenv("WEFT_CA");
  if (ca != nullptr && *ca != '\0') {
    weft::ClientCredentialFiles files;
    files.ca = ca;
    files.cert = std::getenv("WEFT_CERT") != nullptr ? std::getenv("WEFT_CERT") : "";
    files.key = std::getenv("WEFT_KEY") != nullptr ? std::getenv("WEFT_KEY") : "";
    auto creds = weft::ClientChannelCredentials(files);
    if (!creds.ok()) weft::Die(creds.status().ToString());
    options.credentials = *creds;
  }
  auto client = weft::MasterClient::Create(f.at("master"), options);
  if (mode == "transfer") return weft::Transfer(client.get(), f);
  if (mode == "noop") return weft::Noop(client.get(), f);
  weft::Die("unknown mode '" + mode + "'");
}
