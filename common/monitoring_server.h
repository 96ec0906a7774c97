// MonitoringServer: a daemon's HTTP(S) port for monitoring (--metrics_port):
// /metrics in the Prometheus text format from the process's metrics
// registry (common/metrics.h), plus whatever pages the daemon adds (the
// master's dashboard, master/dashboard.h).
//
// Who may read it (docs/observability.md):
//   - a daemon with certificates serves HTTPS with its own certificate and
//     requires a client certificate from the cluster CA whose identity is a
//     cluster member or an admin (Prometheus gets an admin certificate);
//     anyone else is refused with 403 naming the rule;
//   - `plaintext` serves plain HTTP to anyone who reaches the address, so
//     it is refused unless the address is a loopback one (127.0.0.0/8,
//     ::1) or the daemon itself runs --insecure: a scraper on the same host
//     or a sidecar, as Kubernetes components bind theirs.
//
// Thread-safety: pages are served from several threads; Start and the
// destructor are not thread-safe.
#ifndef WEFT_COMMON_MONITORING_SERVER_H_
#define WEFT_COMMON_MONITORING_SERVER_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/http_server.h"

namespace weft {

struct MonitoringOptions {
  std::string host = "0.0.0.0";
  int port = 0;
  // The daemon's certificate files; all empty for an --insecure daemon.
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  bool plaintext = false;
};

class MonitoringServer {
 public:
  // Serves /metrics and `pages` (exact paths). INVALID_ARGUMENT when
  // plaintext is asked on a non-loopback address of a daemon with
  // certificates; UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MonitoringServer>> Start(const MonitoringOptions& options,
                                                                 std::map<std::string, HttpHandler> pages = {});
  int port() const { return http_->port(); }
  // "https://127.0.0.1:9464" (the host as bound).
  const std::string& url() const { return url_; }

 private:
  MonitoringServer() = default;
  std::unique_ptr<HttpServer> http_;
  std::string url_;
};

// True for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopbackHost(const std::string& host);

// Who may read the monitoring pages over TLS: FORBIDDEN unless the PEM is a
// cluster member's or an admin's certificate. Exposed for tests.
absl::Status AuthorizeMonitoringReader(const std::string& client_certificate_pem);

}  // namespace weft

#endif  // WEFT_COMMON_MONITORING_SERVER_H_
