#include "mgmt/json_api.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/util/json_util.h>

#include <memory>

#include "strata/v1/array.grpc.pb.h"
#include "strata/v1/operations.pb.h"

namespace strata::mgmt {

namespace {

namespace pb = google::protobuf;

constexpr std::string_view service_name = "strata.v1.Array";

// Connect's unpadded standard base64 (its error details' "value").
std::string base64(std::string_view bytes) {
  static constexpr char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const unsigned v = static_cast<unsigned char>(bytes[i]) << 16 |
                       static_cast<unsigned char>(bytes[i + 1]) << 8 |
                       static_cast<unsigned char>(bytes[i + 2]);
    for (int shift : {18, 12, 6, 0}) out.push_back(alphabet[(v >> shift) & 63]);
  }
  if (const std::size_t left = bytes.size() - i; left > 0) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (left == 2) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out.push_back(alphabet[(v >> 18) & 63]);
    out.push_back(alphabet[(v >> 12) & 63]);
    if (left == 2) out.push_back(alphabet[(v >> 6) & 63]);
  }
  return out;
}

// A JSON string literal.
std::string quoted(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char hex[] = "0123456789abcdef";
          out += "\\u00";
          out.push_back(hex[(c >> 4) & 15]);
          out.push_back(hex[c & 15]);
        } else {
          out.push_back(c);
        }
    }
  }
  return out + "\"";
}

std::unique_ptr<pb::Message> blank(const pb::Descriptor* type) {
  const pb::Message* prototype = pb::MessageFactory::generated_factory()->GetPrototype(type);
  return std::unique_ptr<pb::Message>(prototype->New());
}

}  // namespace

std::string_view connect_code(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "ok";
    case grpc::StatusCode::CANCELLED:
      return "canceled";
    case grpc::StatusCode::UNKNOWN:
      return "unknown";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "invalid_argument";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "deadline_exceeded";
    case grpc::StatusCode::NOT_FOUND:
      return "not_found";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "already_exists";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "permission_denied";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "resource_exhausted";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "failed_precondition";
    case grpc::StatusCode::ABORTED:
      return "aborted";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "out_of_range";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "unimplemented";
    case grpc::StatusCode::INTERNAL:
      return "internal";
    case grpc::StatusCode::UNAVAILABLE:
      return "unavailable";
    case grpc::StatusCode::DATA_LOSS:
      return "data_loss";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "unauthenticated";
    default:
      return "unknown";
  }
}

// The Connect protocol's table (its "Error Codes" section).
int http_status_of(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return 200;
    case grpc::StatusCode::CANCELLED:
      return 499;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
      return 400;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 504;
    case grpc::StatusCode::NOT_FOUND:
      return 404;
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::ABORTED:
      return 409;
    case grpc::StatusCode::PERMISSION_DENIED:
      return 403;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return 429;
    case grpc::StatusCode::UNIMPLEMENTED:
      return 501;
    case grpc::StatusCode::UNAVAILABLE:
      return 503;
    case grpc::StatusCode::UNAUTHENTICATED:
      return 401;
    default:
      return 500;
  }
}

const pb::MethodDescriptor* find_method(std::string_view path) {
  if (!path.starts_with('/')) return nullptr;
  path.remove_prefix(1);
  const std::size_t slash = path.find('/');
  if (slash == std::string_view::npos || path.substr(0, slash) != service_name) return nullptr;
  // Linked in by the generated code: the pool holds strata.v1 whenever this
  // file is in the program.
  const pb::ServiceDescriptor* service =
      v1::GetVersionRequest::descriptor()->file()->FindServiceByName("Array");
  return service->FindMethodByName(std::string(path.substr(slash + 1)));
}

std::expected<std::string, json_answer> request_from_json(const pb::MethodDescriptor& method,
                                                          std::string_view json) {
  const std::unique_ptr<pb::Message> request = blank(method.input_type());
  if (json.find_first_not_of(" \t\r\n") != std::string_view::npos) {
    pb::util::JsonParseOptions options;
    options.ignore_unknown_fields = false;  // a misspelt field is an error, not a default
    const auto parsed = pb::util::JsonStringToMessage(pb::StringPiece(json.data(), json.size()),
                                                      request.get(), options);
    if (!parsed.ok()) {
      return std::unexpected(error_json(grpc::StatusCode::INVALID_ARGUMENT,
                                        "the body is not a " + method.input_type()->full_name() +
                                            " in JSON: " + std::string(parsed.message())));
    }
  }
  return request->SerializeAsString();
}

json_answer response_to_json(const pb::MethodDescriptor& method, const std::string& bytes) {
  const std::unique_ptr<pb::Message> response = blank(method.output_type());
  if (!response->ParseFromString(bytes)) {
    return error_json(grpc::StatusCode::INTERNAL,
                      "the server's answer is not a " + method.output_type()->full_name());
  }
  pb::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string json;
  if (const auto printed = pb::util::MessageToJsonString(*response, &json, options);
      !printed.ok()) {
    return error_json(grpc::StatusCode::INTERNAL,
                      "cannot write the answer as JSON: " + std::string(printed.message()));
  }
  return {200, std::move(json)};
}

json_answer error_json(grpc::StatusCode code, const std::string& message) {
  return {http_status_of(code),
          "{\"code\":" + quoted(connect_code(code)) + ",\"message\":" + quoted(message) + "}"};
}

json_answer error_json(const grpc::Status& status) {
  json_answer out = error_json(status.error_code(), status.error_message());
  v1::Status rich;
  if (status.error_details().empty() || !rich.ParseFromString(status.error_details())) return out;
  std::string details;
  for (const auto& any : rich.details()) {
    v1::ErrorInfo info;
    if (!any.UnpackTo(&info)) continue;
    // "debug" carries the detail as JSON as well, for clients (the console)
    // that would rather not decode protobuf.
    details +=
        std::string(details.empty() ? "" : ",") +
        "{\"type\":\"strata.v1.ErrorInfo\",\"value\":" + quoted(base64(info.SerializeAsString())) +
        ",\"debug\":{\"field\":" + quoted(info.field()) + ",\"reason\":" + quoted(info.reason()) +
        "}}";
  }
  if (details.empty()) return out;
  out.body.pop_back();  // the closing brace
  out.body += ",\"details\":[" + details + "]}";
  return out;
}

}  // namespace strata::mgmt
