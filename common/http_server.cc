#include "common/http_server.h"

#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace weft {
namespace {

// Requests are a GET line and headers: anything larger is refused.
constexpr size_t kMaxRequestBodyBytes = 16384;
constexpr int kTimeoutSeconds = 10;

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "unknown error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

std::string PeerCertificatePem(const SSL* ssl) {
  if (ssl == nullptr) return "";
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (cert == nullptr) return "";
  std::string out;
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio != nullptr && PEM_write_bio_X509(bio, cert) == 1) {
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio, &data);
    if (n > 0) out.assign(data, static_cast<size_t>(n));
  }
  BIO_free(bio);
  X509_free(cert);
  return out;
}

// Configures the TLS context: the daemon's certificate and key and, with a
// CA, a required client certificate that chains to it. Sets `error` and
// returns false naming the file that failed.
bool SetUpTls(SSL_CTX* ctx, const HttpServerOptions& o, std::string* error) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
  if (SSL_CTX_use_certificate_chain_file(ctx, o.cert_file.c_str()) != 1) {
    *error = absl::StrCat("cannot load certificate ", o.cert_file, ": ", OpenSslError());
    return false;
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    *error = absl::StrCat("cannot load key ", o.key_file, " (or it does not match ", o.cert_file,
                          "): ", OpenSslError());
    return false;
  }
  if (!o.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, o.ca_file.c_str(), nullptr) != 1) {
      *error = absl::StrCat("cannot load CA ", o.ca_file, ": ", OpenSslError());
      return false;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return true;
}

}  // namespace

struct HttpServer::Impl {
  std::map<std::string, HttpHandler> routes;
  std::unique_ptr<httplib::Server> server;
  std::thread thread;
};

namespace {

// GET (and so HEAD) of the registered paths; every other method is 405.
void InstallRoutes(HttpServer::Impl* impl) {
  impl->server->Get(".*", [impl](const httplib::Request& req, httplib::Response& res) {
    auto it = impl->routes.find(req.path);
    if (it == impl->routes.end()) {
      res.status = 404;
      res.set_content("not found\n", "text/plain; charset=utf-8");
      return;
    }
    HttpRequest r;
    r.method = req.method;
    r.path = req.path;
    r.remote_address = req.remote_addr;
    const size_t q = req.target.find('?');
    if (q != std::string::npos) r.query = req.target.substr(q + 1);
    r.client_certificate_pem = PeerCertificatePem(req.ssl);
    HttpResponse out = it->second(r);
    res.status = out.status;
    res.set_content(std::move(out.body), out.content_type.c_str());
  });
  auto not_allowed = [](const httplib::Request&, httplib::Response& res) {
    res.status = 405;
    res.set_content("only GET and HEAD are served\n", "text/plain; charset=utf-8");
  };
  impl->server->Post(".*", not_allowed);
  impl->server->Put(".*", not_allowed);
  impl->server->Delete(".*", not_allowed);
  impl->server->Patch(".*", not_allowed);
  impl->server->Options(".*", not_allowed);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              std::map<std::string, HttpHandler> routes) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("HTTP port ", options.port, " is not 0..65535"));
  }
  const bool tls = !options.cert_file.empty();
  if (tls != !options.key_file.empty()) {
    return absl::InvalidArgumentError("HTTP over TLS needs both a certificate and a key");
  }
  const bool v6 = options.host.find(':') != std::string::npos;
  const std::string where =
      absl::StrCat(v6 ? "[" : "", options.host, v6 ? "]" : "", ":", options.port);
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->impl_ = std::make_unique<Impl>();
  s->impl_->routes = std::move(routes);
  s->tls_ = tls;
  std::string tls_error;
  if (tls) {
    s->impl_->server = std::make_unique<httplib::SSLServer>(
        [&](SSL_CTX& ctx) { return SetUpTls(&ctx, options, &tls_error); });
  } else {
    s->impl_->server = std::make_unique<httplib::Server>();
  }
  httplib::Server& server = *s->impl_->server;
  if (!server.is_valid()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot serve HTTPS on ", where, ": ", tls_error));
  }
  const int threads = options.num_threads > 0 ? options.num_threads : 1;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // cpp-httplib sets SO_REUSEPORT by default, which lets a second process
  // bind the same port and take half the connections: one port, one server.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server.set_payload_max_length(kMaxRequestBodyBytes);
  server.set_read_timeout(kTimeoutSeconds, 0);
  server.set_write_timeout(kTimeoutSeconds, 0);
  server.set_default_headers({{"Cache-Control", "no-store"},
                              {"X-Content-Type-Options", "nosniff"},
                              {"Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'"}});
  Impl* impl = s->impl_.get();
  InstallRoutes(impl);
  if (options.port == 0) {
    s->port_ = server.bind_to_any_port(options.host);
  } else {
    s->port_ = server.bind_to_port(options.host, options.port) ? options.port : -1;
  }
  if (s->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve HTTP", tls ? "S" : "", " on ", where,
                                               ": the address is in use or not this host's"));
  }
  impl->thread = std::thread([impl] { impl->server->listen_after_bind(); });
  // stop() is a no-op until the loop runs: wait for it, so that a server
  // destroyed at once still stops. Start-up only, and bounded.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!server.is_running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!server.is_running()) return absl::InternalError(absl::StrCat("HTTP server on ", where, " did not start"));
  return s;
}

HttpServer::~HttpServer() {
  if (impl_ == nullptr || impl_->server == nullptr) return;
  impl_->server->stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace weft
