#include "client/port_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"

namespace weft {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat("port file '", path, "': ", what, ": ", std::strerror(errno)));
}

}  // namespace

absl::Status WritePortFile(const std::string& path, int port) {
  const std::string text = absl::StrCat(port, "\n");
  std::vector<char> tmp(path.begin(), path.end());
  for (char c : absl::string_view(".XXXXXX")) tmp.push_back(c);
  tmp.push_back('\0');
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return Errno("cannot create a temporary file beside it", path);
  const std::string tmp_path = tmp.data();
  absl::Status s;
  // mkostemp makes the file private; a port is no secret.
  if (::fchmod(fd, 0644) != 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    s = Errno("cannot write", tmp_path);
  }
  if (::close(fd) != 0 && s.ok()) s = Errno("cannot write", tmp_path);
  if (s.ok() && ::rename(tmp_path.c_str(), path.c_str()) != 0) s = Errno("cannot rename a temporary file to it", path);
  if (!s.ok()) ::unlink(tmp_path.c_str());
  return s;
}

absl::StatusOr<int> ReadPortFile(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no port file '", path, "' yet"));
    return Errno("cannot open", path);
  }
  char buf[16];
  const size_t n = std::fread(buf, 1, sizeof(buf), f);
  std::fclose(f);
  const absl::string_view text(buf, n);
  int port = 0;
  if (text.empty() || text.back() != '\n' || !absl::SimpleAtoi(text.substr(0, text.size() - 1), &port) || port < 1 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port file '", path, "' does not hold a port and a newline: '", text, "'"));
  }
  return port;
}

absl::StatusOr<int> WaitForPortFile(Subprocess* process, const std::string& path, absl::Time deadline) {
  // Start-up is fast; poll often at first, then back off a little.
  absl::Duration interval = absl::Milliseconds(1);
  for (;;) {
    absl::StatusOr<int> port = ReadPortFile(path);
    if (!absl::IsNotFound(port.status())) return port;
    if (!process->Running()) {
      return absl::FailedPreconditionError(absl::StrCat("process ", process->pid(), " exited (",
                                                        DescribeExitStatus(process->exit_status()),
                                                        ") before it wrote its port file '", path, "'"));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("process ", process->pid(), " wrote no port file '", path, "' in time"));
    }
    absl::SleepFor(std::min(interval, std::max(deadline - absl::Now(), absl::ZeroDuration())));
    interval = std::min(interval * 2, absl::Milliseconds(50));
  }
}

}  // namespace weft
