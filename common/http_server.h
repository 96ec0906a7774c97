// HttpServer: a small HTTP(S) server for a daemon's monitoring pages
// (/metrics, the master's dashboard), on Debian's cpp-httplib (Debian 12's
// civetweb cannot load OpenSSL 3, so its TLS does not work there).
//
// Only GET and HEAD of the registered paths are served; no file is ever
// served from disk and nothing is written. Over TLS the server presents the
// daemon's certificate and, with a CA, requires a client certificate that
// chains to it; each request then carries the client certificate's PEM so
// the handler can decide who may see what (common/monitoring_server.h).
//
// Thread-safety: handlers run on the server's pool threads, several at
// once; they must be thread-safe. Start and the destructor are not.
#ifndef WEFT_COMMON_HTTP_SERVER_H_
#define WEFT_COMMON_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace weft {

struct HttpRequest {
  std::string method;  // "GET" or "HEAD"
  std::string path;    // "/metrics"
  std::string query;   // after '?', undecoded; empty when none
  // The verified client certificate (PEM); empty over plaintext or when
  // the client sent none.
  std::string client_certificate_pem;
  std::string remote_address;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpServerOptions {
  // Address to bind ("0.0.0.0", "127.0.0.1", "::1") and port (0: any free
  // port; see HttpServer::port()).
  std::string host = "0.0.0.0";
  int port = 0;
  // PEM files. With cert and key the server speaks TLS only; with ca too
  // it requires a client certificate that chains to ca.
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
  int num_threads = 4;
};

class HttpServer {
 public:
  // Serves `routes` (exact paths). Fails naming the address when it cannot
  // bind, or the file when TLS cannot load it.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           std::map<std::string, HttpHandler> routes);
  ~HttpServer();  // stops serving; waits for running handlers
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  bool tls() const { return tls_; }

  // The routes and the server, shared with its threads.
  struct Impl;

 private:
  HttpServer() = default;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  bool tls_ = false;
};

}  // namespace weft

#endif  // WEFT_COMMON_HTTP_SERVER_H_
