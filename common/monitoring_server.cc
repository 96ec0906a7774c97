#include "common/monitoring_server.h"

#include <arpa/inet.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/certs.h"
#include "common/metrics.h"

namespace weft {

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

absl::Status AuthorizeMonitoringReader(const std::string& client_certificate_pem) {
  if (client_certificate_pem.empty()) {
    return absl::PermissionDeniedError("a client certificate from the cluster CA is required");
  }
  absl::StatusOr<PeerIdentity> id = IdentityFromPem(client_certificate_pem);
  if (!id.ok()) {
    return absl::PermissionDeniedError(
        absl::StrCat("the client certificate is not a weft identity: ", id.status().message()));
  }
  if (id->role == Role::kUser) {
    return absl::PermissionDeniedError(absl::StrCat(
        "user ", id->name, " may not read the monitoring pages: they show every user's jobs; they need a cluster or "
        "admin certificate (O=weft:cluster or weft:admin)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MonitoringServer>> MonitoringServer::Start(const MonitoringOptions& options,
                                                                          std::map<std::string, HttpHandler> pages) {
  const bool has_certs = !options.cert_file.empty();
  if (options.plaintext && has_certs && !IsLoopbackHost(options.host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_plaintext serves metrics without TLS to anyone who reaches ", options.host,
        ": allowed on a loopback address only (--metrics_host=127.0.0.1), or drop it to serve HTTPS with the "
        "daemon's certificate"));
  }
  const bool tls = has_certs && !options.plaintext;
  pages["/metrics"] = [](const HttpRequest&) {
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = metrics::Registry::Default().Render();
    return r;
  };
  if (tls) {
    // Every page checks its reader the same way.
    for (auto& [path, handler] : pages) {
      handler = [inner = std::move(handler)](const HttpRequest& req) {
        absl::Status ok = AuthorizeMonitoringReader(req.client_certificate_pem);
        if (!ok.ok()) return HttpResponse{403, "text/plain; charset=utf-8", absl::StrCat(ok.message(), "\n")};
        return inner(req);
      };
    }
  }
  HttpServerOptions http;
  http.host = options.host;
  http.port = options.port;
  if (tls) {
    http.cert_file = options.cert_file;
    http.key_file = options.key_file;
    http.ca_file = options.ca_file;
  }
  auto server = HttpServer::Start(http, std::move(pages));
  if (!server.ok()) return server.status();
  std::unique_ptr<MonitoringServer> m(new MonitoringServer());
  m->http_ = *std::move(server);
  const bool v6 = options.host.find(':') != std::string::npos;
  m->url_ = absl::StrCat(tls ? "https://" : "http://", v6 ? "[" : "", options.host, v6 ? "]" : "", ":",
                         m->http_->port());
  return m;
}

}  // namespace weft
