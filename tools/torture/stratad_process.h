// stratad as strata-torture's child: started on a state directory with
// --small-shelf and --volatile-drive-caches, killed with SIGKILL, started
// again, stopped with SIGTERM at the end; and the strata CLI against it.
//
// The child gets none of our file descriptors beyond stdin/out/err (a
// build lock held by whoever started us must not outlive us through it),
// and dies with us (PR_SET_PDEATHSIG), so that no stratad is ever left
// running.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace strata::torture {

struct daemon_paths {
  std::filesystem::path stratad;
  std::filesystem::path cli;    // the strata CLI
  std::filesystem::path state;  // the state directory
  std::filesystem::path logs;   // stratad-N.out/.err, one pair per start
};

// Which controller it is: its address (iSCSI and the API on it), the
// arguments that make it that controller, and its logs' name.
struct daemon_role {
  std::string host = "127.0.0.1";
  std::vector<std::string> args{"--small-shelf"};  // the one controller of the small shelf
  std::string name = "stratad";                    // logs: NAME-N.out/.err
};

class stratad_process {
 public:
  stratad_process(daemon_paths paths, int iscsi_port, int api_port, daemon_role role = {});
  ~stratad_process();  // a daemon still running is killed
  stratad_process(const stratad_process&) = delete;
  stratad_process& operator=(const stratad_process&) = delete;

  // Starts stratad and waits (at most `timeout`) for its ready line. False
  // with `why` (its exit status and the end of its stderr) if it does not
  // come up.
  bool start(std::chrono::seconds timeout, std::string& why);
  // kill -9, and reaped. False if it had exited already (a crash of its own).
  bool kill_hard(std::string& why);
  // SIGTERM, and its exit status 0 expected.
  bool stop(std::string& why);
  // SIGSTOP and SIGCONT: frozen with whatever it holds queued, and thawed
  // (a hypervisor's stall, as far as a process can be made one). False if
  // it is not running.
  bool freeze();
  bool thaw();
  bool running() const noexcept { return pid_ > 0; }

  std::string portal() const { return role_.host + ":" + std::to_string(iscsi_port_); }
  const std::string& target_name() const noexcept { return target_name_; }
  // Runs `strata --api … ARGS…`: its exit status, its stdout and stderr in `out`.
  int cli(const std::vector<std::string>& args, std::string& out) const;
  int starts() const noexcept { return starts_; }
  const std::string& name() const noexcept { return role_.name; }

 private:
  std::string log_tail(const std::filesystem::path& file) const;
  daemon_paths paths_;
  int iscsi_port_;
  int api_port_;
  daemon_role role_;
  pid_t pid_ = -1;
  int starts_ = 0;
  std::string target_name_;
};

}  // namespace strata::torture
