// TlsListener over POSIX sockets, and the address helpers TlsSocket shares.
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/certs_internal.h"
#include "common/tls_socket.h"
#include "common/tls_socket_internal.h"

namespace weft {
namespace tls_internal {

std::string JoinHostPort(absl::string_view host, int port) {
  return absl::StrCat(host.find(':') == absl::string_view::npos ? host : absl::StrCat("[", host, "]"), ":", port);
}

// sin_port and sin6_port lie at the same offset.
int PortOf(const sockaddr_storage& addr) { return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port); }

}  // namespace tls_internal

using AddrInfoPtr = certs_internal::Owned<addrinfo, freeaddrinfo>;
using tls_internal::JoinHostPort;
using tls_internal::PortOf;

absl::StatusOr<std::unique_ptr<TlsListener>> TlsListener::Listen(const std::string& host, int port) {
  const std::string where = JoinHostPort(host.empty() ? "0.0.0.0" : host, port);
  const addrinfo hints{AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV, host.empty() ? AF_INET : AF_UNSPEC, SOCK_STREAM};
  addrinfo* found = nullptr;
  if (port < 0 || port > 65535 ||
      getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot listen on ", where, ": not an IP address and port"));
  }
  AddrInfoPtr list(found);
  std::unique_ptr<TlsListener> listener(new TlsListener);
  const int fd = listener->fd_ = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", where, ": ", std::strerror(errno)));
  }
  listener->port_ = PortOf(addr);
  return listener;
}

// Closed here, not in Close: a number freed while another thread is in accept() could be reused by another open.
TlsListener::~TlsListener() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<int> TlsListener::AcceptFd() {
  for (;;) {
    if (closed_.load()) return absl::CancelledError(absl::StrCat("the listener on port ", port_, " was closed"));
    const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0 && !closed_.load()) return fd;
    if (fd >= 0) close(fd);
    const int err = errno;  // accept(2): a connection that failed, or a network error: retry
    if (fd >= 0 || closed_.load() || err == EINTR || err == ECONNABORTED || err == EPROTO || err == ENETDOWN ||
        err == ENOPROTOOPT || err == EHOSTDOWN || err == ENONET || err == EHOSTUNREACH || err == ENETUNREACH) {
      continue;
    }
    return absl::UnavailableError(absl::StrCat("accept on port ", port_, ": ", std::strerror(err)));
  }
}

void TlsListener::Close() {
  closed_.store(true);
  shutdown(fd_, SHUT_RDWR);
}

}  // namespace weft
