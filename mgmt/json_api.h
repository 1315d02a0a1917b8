// The Array service as JSON: the Connect protocol's unary form
// (https://connectrpc.com/docs/protocol), `POST /strata.v1.Array/<Method>`
// with the request message in protobuf's JSON mapping as the body, the
// response message (or an error) as the answer.
//
// Derived from the service's descriptor, with no code per method: a new
// method in array.proto is callable here as soon as it is built. The
// calls themselves go through the same in-process gRPC server as every
// other client's (http_server.h), so the JSON and the gRPC faces can never
// disagree.
//
// Threads: any; these are pure functions.
#pragma once

#include <grpcpp/support/status.h>

#include <expected>
#include <string>
#include <string_view>

namespace google::protobuf {
class MethodDescriptor;
}

namespace strata::mgmt {

// An answer to send: an HTTP status and a JSON body.
struct json_answer {
  int http_status = 200;
  std::string body;
};

// The method a request's path names ("/strata.v1.Array/ListVolumes"), or
// nullptr: not a method of the service.
const google::protobuf::MethodDescriptor* find_method(std::string_view path);

// The request message `json` holds, serialized for the gRPC call. Unknown
// fields, wrong types and malformed JSON are refused (invalid_argument,
// naming what the parser found); an empty body is the empty message.
std::expected<std::string, json_answer> request_from_json(
    const google::protobuf::MethodDescriptor& method, std::string_view json);

// The response message `bytes` (as the call returned it) as JSON, every
// field present, zero values included, so that a client sees the whole
// resource.
json_answer response_to_json(const google::protobuf::MethodDescriptor& method,
                             const std::string& bytes);

// A failed call as Connect's error JSON: {"code": "invalid_argument",
// "message": "field: reason", "details": [{"type": "strata.v1.ErrorInfo",
// "value": base64, "debug": {"field": ..., "reason": ...}}]}, the details
// taken from the status's strata.v1.Status (service.cc), with the HTTP
// status Connect maps the code to.
json_answer error_json(const grpc::Status& status);
json_answer error_json(grpc::StatusCode code, const std::string& message);

// Connect's name for a code ("invalid_argument") and its HTTP status.
std::string_view connect_code(grpc::StatusCode code);
int http_status_of(grpc::StatusCode code);

}  // namespace strata::mgmt
