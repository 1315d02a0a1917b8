// Prometheus metrics (`GET /metrics`, the text exposition format 0.0.4):
// what the management API says about the array, scraped through the same
// API as every other client (collect), then written out by Prometheus's
// naming conventions (render): base units (bytes, seconds), `_total` for
// counters, `_seconds` histograms, one series per state for enumerations.
// docs/metrics.md lists them.
//
// Threads: collect() makes blocking calls: never on a loop (http_server.h
// runs it on a worker thread). render() is a pure function.
#pragma once

#include <grpcpp/support/status.h>

#include <expected>
#include <string>
#include <vector>

#include "strata/v1/array.grpc.pb.h"

namespace strata::mgmt {

// One scrape: the array's resources and their statistics, as the API
// answered.
struct array_scrape {
  std::vector<v1::Controller> controllers;
  std::vector<std::pair<v1::Pool, v1::PoolStatistics>> pools;
  std::vector<std::pair<v1::Volume, v1::VolumeStatistics>> volumes;
  std::vector<v1::Disk> disks;
  std::vector<v1::DiskGroup> groups;
  std::vector<v1::Operation> running;  // operations still running
  std::uint64_t events = 0;            // the newest event's number: events logged so far
  double collect_seconds = 0;          // how long the calls took
};

// Lists everything through `api` (every page) and asks each pool's and
// volume's statistics. A statistics call that fails (a pool served by a
// partner that is down) leaves that one out; a list that fails is the
// scrape's error.
std::expected<array_scrape, grpc::Status> collect(v1::Array::StubInterface& api);

// The exposition text.
std::string render(const array_scrape& scrape);

}  // namespace strata::mgmt
