// Address helpers shared by common/tls_socket.cc and common/tls_listener.cc.
#ifndef WEFT_COMMON_TLS_SOCKET_INTERNAL_H_
#define WEFT_COMMON_TLS_SOCKET_INTERNAL_H_

#include <sys/socket.h>

#include <string>

#include "absl/strings/string_view.h"

namespace weft {
namespace tls_internal {

// "host:port", or "[v6]:port".
std::string JoinHostPort(absl::string_view host, int port);
// The port of an IPv4 or IPv6 address.
int PortOf(const sockaddr_storage& addr);

}  // namespace tls_internal
}  // namespace weft

#endif  // WEFT_COMMON_TLS_SOCKET_INTERNAL_H_
