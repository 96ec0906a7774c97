#include "client/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace weft {

Subprocess::~Subprocess() {
  if (!exited_) Terminate(absl::Seconds(1));
}

absl::Status Subprocess::Start(const std::vector<std::string>& argv, const std::string& log_path,
                               const std::vector<std::string>& env) {
  if (argv.empty()) return absl::InvalidArgumentError("Subprocess::Start: empty argv");
  if (!exited_) return absl::FailedPreconditionError("Subprocess::Start: a child is already running");
  // Everything the child needs is prepared before fork: after it, only
  // async-signal-safe calls.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  for (const std::string& e : env) env_strings.push_back(e);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  int log_fd = -1;
  if (!log_path.empty()) {
    log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) return absl::UnavailableError(absl::StrCat("cannot open log '", log_path, "': ", std::strerror(errno)));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    if (log_fd >= 0) ::close(log_fd);
    return absl::ResourceExhaustedError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    if (log_fd >= 0) {
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
    }
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
  ::setpgid(pid, pid);  // also here, so the group exists when Start returns
  if (&argv != &argv_) argv_ = argv;
  if (&log_path != &log_path_) log_path_ = log_path;
  if (&env != &env_) env_ = env;
  pid_ = pid;
  exited_ = false;
  status_ = 0;
  return absl::OkStatus();
}

absl::Status Subprocess::Restart() {
  if (argv_.empty()) return absl::FailedPreconditionError("Subprocess::Restart: never started");
  return Start(argv_, log_path_, env_);
}

bool Subprocess::Running() {
  if (exited_) return false;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exited_ = true;
    status_ = status;
  }
  return !exited_;
}

void Subprocess::Signal(int signal) {
  if (Running()) ::kill(pid_, signal);
}

bool Subprocess::WaitFor(absl::Duration timeout) {
  // waitpid has no timeout; a short sleep between checks bounds the wait
  // without a thread per child. Used only at shutdown, never per step.
  const absl::Time deadline = absl::Now() + timeout;
  while (Running()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

void Subprocess::Terminate(absl::Duration grace) {
  if (!Running()) return;
  ::kill(pid_, SIGTERM);
  if (WaitFor(grace)) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  if (::waitpid(pid_, &status, 0) == pid_) status_ = status;
  exited_ = true;
}

std::string DescribeExitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status));
  return absl::StrCat("wait status ", status);
}

}  // namespace weft
