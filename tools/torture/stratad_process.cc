#include "tools/torture/stratad_process.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace strata::torture {

namespace {

// In a forked child: die with the parent, keep only 0-2, exec.
[[noreturn]] void exec_child(pid_t parent, const std::vector<std::string>& argv) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
  ::syscall(SYS_close_range, 3u, ~0u, 0u);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  ::_exit(127);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

stratad_process::stratad_process(daemon_paths paths, int iscsi_port, int api_port, daemon_role role)
    : paths_(std::move(paths)),
      iscsi_port_(iscsi_port),
      api_port_(api_port),
      role_(std::move(role)) {}

stratad_process::~stratad_process() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::string stratad_process::log_tail(const std::filesystem::path& file) const {
  const std::string all = read_file(file);
  return all.size() > 2000 ? "…" + all.substr(all.size() - 2000) : all;
}

bool stratad_process::start(std::chrono::seconds timeout, std::string& why) {
  ++starts_;
  // Two starts' logs are kept: this one and the one before (the crash's).
  const auto out = paths_.logs / (role_.name + "-" + std::to_string(starts_ % 2) + ".out");
  const auto err = paths_.logs / (role_.name + "-" + std::to_string(starts_ % 2) + ".err");
  std::vector<std::string> argv{paths_.stratad.string(),
                                "--state-dir",
                                paths_.state.string(),
                                "--iscsi",
                                portal(),
                                "--grpc",
                                role_.host + ":" + std::to_string(api_port_),
                                "--volatile-drive-caches"};
  argv.insert(argv.end(), role_.args.begin(), role_.args.end());
  // The last start but one's logs go first: their ready line is not this start's.
  std::error_code ignored;
  std::filesystem::remove(out, ignored);
  std::filesystem::remove(err, ignored);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    why = std::string("fork: ") + std::strerror(errno);
    return false;
  }
  if (pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in = ::open("/dev/null", O_RDONLY);
    if (o < 0 || e < 0 || in < 0) ::_exit(127);
    ::dup2(in, 0);
    ::dup2(o, 1);
    ::dup2(e, 2);
    exec_child(parent, argv);
  }
  pid_ = pid;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string printed = read_file(out);
    if (const auto ready = printed.find("stratad is ready"); ready != std::string::npos) {
      // "  iscsi-inq iscsi://PORTAL/TARGET/0"
      const std::string marker = "iscsi-inq iscsi://" + portal() + "/";
      if (const auto at = printed.find(marker); at != std::string::npos) {
        const auto begin = at + marker.size();
        const auto end = printed.find('/', begin);
        if (end != std::string::npos) target_name_ = printed.substr(begin, end - begin);
      }
      if (target_name_.empty()) {
        why = "stratad's ready line names no target";
        return false;
      }
      return true;
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      why = "stratad " + describe_status(status) + " before it was ready; its stderr:\n" +
            log_tail(err);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  why = "stratad was not ready in " + std::to_string(timeout.count()) + " s; its stderr:\n" +
        log_tail(err);
  return false;
}

bool stratad_process::kill_hard(std::string& why) {
  if (pid_ <= 0) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    why = "stratad " + describe_status(status) + " by itself before the kill";
    return false;
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return true;
}

bool stratad_process::freeze() {
  return pid_ > 0 && ::kill(pid_, SIGSTOP) == 0;
}

bool stratad_process::thaw() {
  return pid_ > 0 && ::kill(pid_, SIGCONT) == 0;
}

bool stratad_process::stop(std::string& why) {
  if (pid_ <= 0) return false;
  ::kill(pid_, SIGTERM);
  int status = 0;
  // A clean stop flushes every drive cache: give it time, then force.
  for (int i = 0; i < 1200; ++i) {
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
      why = "stratad " + describe_status(status) + " at SIGTERM";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  why = "stratad did not stop within 60 s of SIGTERM";
  return false;
}

int stratad_process::cli(const std::vector<std::string>& args, std::string& out) const {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return -1;
  std::vector<std::string> argv{paths_.cli.string(), "--api",
                                role_.host + ":" + std::to_string(api_port_)};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::dup2(pipe_fds[1], 1);
    ::dup2(pipe_fds[1], 2);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    ::dup2(null_fd, 0);
    exec_child(parent, argv);
  }
  ::close(pipe_fds[1]);
  out.clear();
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace strata::torture
