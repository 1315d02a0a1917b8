// Management changes made through controller b's API, carried over the
// partner link to controller a, which makes them (checks, applies,
// records, replicates back to b) and answers: so that one controller
// changes the array at a time and the two configurations never diverge,
// while either controller's API takes changes (README.md, "Two
// controllers"). The call is the API's method name and its request
// message; the answer, its response message or the refusal.
#pragma once

#include <google/protobuf/message.h>

#include <span>
#include <string>
#include <string_view>

#include "controller/management.h"
#include "controller/partner_link.h"

namespace strata::controller {

namespace link_type {
// Request: encode_call. Answer: encode_answer's bytes.
constexpr std::uint16_t management_call = partner_link::first_user_type + 3;
// The same, a call the partner hands over because this controller serves
// the pool it is about (management::delegated_call): made here, never
// handed on.
constexpr std::uint16_t management_delegated = partner_link::first_user_type + 9;
}  // namespace link_type

// Controller b: the call, and what came back (the response message's
// bytes, or the refusal).
link_bytes encode_call(std::string_view method, const google::protobuf::Message& request);
outcome<std::string> decode_answer(std::span<const std::uint8_t> bytes);

// Makes the call through `m` (blocking: the caller's thread waits for the
// loop, as a gRPC handler's does) and encodes the answer: on controller a
// a change b's API took, on either a call about a pool it serves
// (`delegated`). A call it cannot read, or a method it does not know, is
// refused.
link_bytes answer_call(management& m, std::span<const std::uint8_t> call, bool delegated = false);

}  // namespace strata::controller
