// What the `strata` command's files share: exit statuses, the usage error,
// the API client (one gRPC channel, the bearer token), and the printing of
// resources as tables or JSON. Single-threaded: the command runs one call
// at a time on main's thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "strata/v1/array.grpc.pb.h"
#include "tools/version.h"

namespace strata::cli {

namespace v1 = strata::v1;

// The CLI's own version: the tree's (tools/version.h), the one the API's
// GetVersion reports too (mgmt/service.h); tests/tools/strata_cli_test.py
// checks that they agree.
inline constexpr const char* version = strata::strata_version;

constexpr int exit_refused = 1;      // the array refused the request
constexpr int exit_usage = 2;        // the command line is wrong
constexpr int exit_unreachable = 3;  // the array cannot be reached

// A command line the parser accepted but a command cannot use ("--size 7Q"):
// main prints "strata: WHAT" and exits 2. `command` is the subcommand whose
// --help to point at (null: the top level).
struct usage_error : std::runtime_error {
  usage_error(const std::string& what, const CLI::App* where = nullptr)
      : std::runtime_error(what), command(where) {}
  const CLI::App* command;
};

// Prints a failed call's status on stderr; the exit status it deserves.
int fail(const grpc::Status& status);

// Printing (print.cc).
std::string json(const google::protobuf::Message& m);
std::string size(std::uint64_t bytes);  // "1.0 GiB"
std::string fixed(double v, int decimals);
std::string when(std::int64_t unix_ms);  // local time, "2026-11-28 03:24:36"
std::string joined(const google::protobuf::RepeatedPtrField<std::string>& items);
void table(const std::vector<std::string>& header,
           const std::vector<std::vector<std::string>>& rows);
std::vector<std::string> row(const v1::Controller& c);
std::vector<std::string> row(const v1::Disk& d);
std::vector<std::string> row(const v1::DiskGroup& g);
std::vector<std::string> row(const v1::Pool& p);
std::vector<std::string> row(const v1::Volume& v);
std::vector<std::string> row(const v1::Host& h);
std::vector<std::string> row(const v1::Mapping& m);
std::vector<std::string> row(const v1::Operation& o);
std::vector<std::string> row(const v1::VolumeStatistics& s);
std::vector<std::string> row(const v1::PoolStatistics& s);
std::vector<std::string> row(const v1::ExtentHeat& h);
std::vector<std::string> row(const v1::Event& e);

// Names: "hdd-00" → "disks/hdd-00"; a name with a '/' is kept as given.
std::string resource(const std::string& collection, const std::string& name);
std::string volume_name(const std::string& name);  // "v1" → "pools/p1/volumes/v1"
// "100G", "512MiB", "4096": bytes; 0 if it is not a size.
std::uint64_t parse_size(const std::string& text);

struct client {
  std::unique_ptr<v1::Array::Stub> stub;
  bool as_json = false;
  std::string authorization;  // "Bearer TOKEN", or empty: no token

  template <class Request, class Response, class Method>
  grpc::Status call(Method method, const Request& in, Response& out) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!authorization.empty()) context.AddMetadata("authorization", authorization);
    return ((*stub).*method)(&context, in, &out);
  }

  // Every page of a list, printed as one table or one JSON array.
  template <class Response, class Method, class Items>
  int list(Method method, Items items, const std::vector<std::string>& header,
           const std::string& parent = {}) {
    v1::ListRequest in;
    in.set_page_size(1000);
    in.set_parent(parent);
    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> objects;
    for (;;) {
      Response out;
      if (auto s = call(method, in, out); !s.ok()) return fail(s);
      for (const auto& item : items(out)) {
        rows.push_back(row(item));
        objects.push_back(json(item));
      }
      if (out.next_page_token().empty()) break;
      in.set_page_token(out.next_page_token());
    }
    if (as_json) {
      std::string out = "[";
      for (std::size_t i = 0; i < objects.size(); ++i) out += (i ? "," : "") + objects[i];
      std::printf("%s]\n", out.c_str());
    } else {
      table(header, rows);
    }
    return 0;
  }

  template <class Response, class Method>
  int show(Method method, const std::string& name, const std::vector<std::string>& header) {
    v1::GetRequest in;
    in.set_name(name);
    Response out;
    if (auto s = call(method, in, out); !s.ok()) return fail(s);
    return print(out, header);
  }

  // The result of a change, as show prints it.
  template <class Request, class Response, class Method>
  int change(Method method, const Request& in, const std::vector<std::string>& header) {
    Response out;
    if (auto s = call(method, in, out); !s.ok()) return fail(s);
    return print(out, header);
  }

  template <class Message>
  int print(const Message& m, const std::vector<std::string>& header) {
    if (as_json) {
      std::printf("%s\n", json(m).c_str());
    } else {
      table(header, {row(m)});
    }
    return 0;
  }
};

// What every command gets: the top-level options, the client (connected
// on first use, so that offline commands need no array), and the table of
// actions main runs for the subcommand the parser selected.
class context {
 public:
  std::string api = "127.0.0.1:50051";
  std::string tls_ca, token_file;
  bool as_json = false;

  // The client; a usage error for TLS options that cannot work.
  client& connect();

  // The action of a leaf command; main runs the one selected.
  void on(CLI::App* command, std::function<int()> action) { actions_[command] = std::move(action); }
  const std::function<int()>* action(const CLI::App* command) const {
    auto it = actions_.find(command);
    return it == actions_.end() ? nullptr : &it->second;
  }

 private:
  std::unique_ptr<client> client_;
  std::map<const CLI::App*, std::function<int()>> actions_;
};

// The commands, by group; each adds its subcommands to `app`.
void add_resource_commands(CLI::App& app, context& ctx);     // resources.cc
void add_heat_commands(CLI::App& app, context& ctx);         // heat.cc
void add_heat_table_commands(CLI::App* heat, context& ctx);  // resources.cc: heat top, heat list
void add_system_commands(CLI::App& app, context& ctx);  // system.cc: the appliance's boot slots
// The hidden `completion bash` command (completion.cc).
void add_completion_command(CLI::App& app, context& ctx);
std::string bash_completion(const CLI::App& app);

}  // namespace strata::cli
