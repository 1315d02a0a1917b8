// The login phase (RFC 7143 6): the security stage (CHAP), operational
// negotiation, and entering the full feature phase in a new session or
// joining an existing one (MC/S), with reinstatement of either.
#include "target/iscsi/connection.h"

namespace strata::iscsi {

asio::awaitable<bool> connection::login() {
  bool first = true;
  for (;;) {
    bhs h;
    if (const bool ok = co_await read_header(h); !ok) co_return false;
    std::vector<std::uint8_t> data(h.data_segment_bytes());
    if (const bool ok = co_await read_data(h, data); !ok) co_return false;
    bhs r;
    r.set_opcode(opcode::login_response);
    std::memcpy(r.wire().data() + field::isid, h.wire().data() + field::isid, 6);
    r.set_initiator_task_tag(h.initiator_task_tag());
    auto fail = [&](std::uint16_t status, const std::string& why) {
      r.set_byte(field::status_class, static_cast<std::uint8_t>(status >> 8));
      r.set_byte(field::status_detail, static_cast<std::uint8_t>(status));
      stamp(r, true);
      send({r, {}, {}, nullptr, true});
      log("iscsi: login of " +
          (params_.initiator_name.empty() ? "an initiator"
                                          : "initiator " + params_.initiator_name) +
          " from " + peer_ + " refused: " + why);
      return false;
    };
    if (h.opcode() != opcode::login_request)
      co_return fail(login_status::invalid_during_login,
                     "a PDU other than Login Request during login");
    if (!session_) login_exp_cmd_sn_ = h.u32(field::cmd_sn);
    stat_sn_ = h.u32(field::exp_stat_sn);
    if (h.byte(3) > 0)
      co_return fail(login_status::unsupported_version, "iSCSI version-min above 0");
    const std::uint16_t tsih = h.u16(field::tsih);
    if (first) {
      std::memcpy(isid_.data(), h.wire().data() + field::isid, isid_.size());
      cid_ = h.u16(field::cid);
    }
    const unsigned csg = login_flags::csg(h.flags());
    const unsigned nsg = login_flags::nsg(h.flags());
    bool transit = (h.flags() & login_flags::transit) != 0;
    if (csg != security_negotiation && csg != operational_negotiation)
      co_return fail(login_status::initiator_error, "login stage " + std::to_string(csg));
    if (transit && (nsg == 2 || nsg <= csg))
      co_return fail(login_status::initiator_error,
                     "a transit to reserved or earlier stage " + std::to_string(nsg));
    // Keys continued in the next PDU (C bit): each such PDU gets an empty
    // response, and the keys are read once they are whole.
    text_in_.insert(text_in_.end(), data.begin(), data.end());
    if (text_in_.size() > max_text_bytes)
      co_return fail(login_status::initiator_error, "login keys over 64 KiB");
    if ((h.flags() & login_flags::continue_) != 0) {
      if (transit)
        co_return fail(login_status::initiator_error, "a Login Request with both C and T set");
      r.set_flags(login_flags::make(false, csg, csg));
      stamp(r, true);
      send({r, {}, {}, nullptr, false});
      continue;
    }
    auto keys = parse_text(text_in_);
    text_in_.clear();
    if (!keys) co_return fail(login_status::initiator_error, keys.error());
    for (const auto& [k, v] : *keys) {
      if (k == "SessionType" && v != "Normal" && v != "Discovery") {
        co_return fail(login_status::session_type_not_supported,
                       "SessionType=" + v.substr(0, 64) + " is not supported");
      }
      // A connection joining a session runs with what the session's first
      // connection negotiated (SessionType, declarative, may repeat it).
      if (tsih != 0 && is_leading_only_key(k) && k != "SessionType") {
        co_return fail(login_status::initiator_error,
                       k + " on a connection joining a session; only the session's first "
                           "connection negotiates it");
      }
    }
    // The names come in the first PDU, in whichever stage it is.
    key_values answers = negotiate(*keys, server_.options().offer, params_);
    if (first) {
      first = false;
      if (params_.initiator_name.empty())
        co_return fail(login_status::missing_parameter, "no InitiatorName");
      if (params_.type == session_type::normal) {
        if (params_.target_name.empty())
          co_return fail(login_status::missing_parameter, "no TargetName");
        target_ = server_.find_target(params_.target_name);
        if (target_ == nullptr)
          co_return fail(login_status::not_found, "no target " + params_.target_name);
        access_ = target_->access_for(params_.initiator_name);
        if (access_ == nullptr)
          co_return fail(login_status::not_authorized, "not allowed to log in to " + target_->name);
      } else {
        access_ = &server_.options().discovery;
      }
      if (tsih != 0) {
        std::string why;
        if (const std::uint16_t status = find_session_to_join(tsih, why);
            status != login_status::success)
          co_return fail(status, why);
      }
      auth_ = access_->chap ? auth_step::method : auth_step::done;
    }
    if (csg == security_negotiation) {
      std::string why;
      const std::uint16_t status = authenticate(*keys, answers, why);
      if (status != login_status::success) co_return fail(status, why);
      if (auth_ == auth_step::method && transit) {
        co_return fail(
            login_status::authentication_failed,
            "leaving the security stage without AuthMethod; this initiator must use CHAP");
      }
      // The target stays in the security stage until the exchange is done
      // (RFC 7143 6.2: it may refuse the transit).
      if (auth_ != auth_step::done) transit = false;
    } else if (auth_ != auth_step::done) {
      co_return fail(login_status::authentication_failed,
                     "the operational stage before CHAP; this initiator must authenticate");
    }
    if (!portal_group_sent_ && params_.type == session_type::normal) {
      answers.emplace_back(
          "TargetPortalGroupTag",
          std::to_string(server_.options().relative_target_port));  // in the first response only
      portal_group_sent_ = true;
    }
    const bool entering = transit && nsg == full_feature_phase;
    const bool new_session = !session_;
    if (entering) {
      std::string why;
      const std::uint16_t status = co_await enter_session(r, why);
      if (closed_) co_return false;
      if (status != login_status::success) co_return fail(status, why);
    }
    r.set_flags(login_flags::make(transit, csg, transit ? nsg : csg));
    stamp(r, true);
    send({r, {}, format_text(answers), nullptr, false});
    if (entering) {
      header_digest_ = params_.header_digest;
      data_digest_ = params_.data_digest;
      max_incoming_segment_bytes_ = params_.target_max_recv_data_segment_bytes;
      logged_in_ = true;
      if (new_session) session_->announce_nexus();
      co_return true;
    }
  }
}

std::uint16_t connection::find_session_to_join(std::uint16_t tsih, std::string& why) {
  std::shared_ptr<session> found;
  if (!server_alive_.expired()) {
    std::lock_guard hold(server_.mutex_);
    for (const auto& [raw, weak] : server_.sessions_) {
      auto s = weak.lock();
      if (s && s->tsih == tsih && s->is(params_.initiator_name, isid_, target_.get(), params_.type))
        found = std::move(s);
    }
  }
  if (found == nullptr) {
    why = "TSIH " + std::to_string(tsih) + " names no session of this initiator port";
    return login_status::session_does_not_exist;
  }
  if (found->loop != socket_.get_executor()) {
    // Only if the session began after this connection's first PDU was
    // looked at (stay_or_move): a TSIH it could not have known.
    why = "TSIH " + std::to_string(tsih) + " names a session that began after this login";
    return login_status::session_does_not_exist;
  }
  session_ = std::move(found);
  // The session's operational parameters, with this connection's own
  // (digests, data segment lengths) as negotiated so far.
  const session_params own = params_;
  params_ = session_->params;
  params_.header_digest = own.header_digest;
  params_.data_digest = own.data_digest;
  params_.initiator_max_recv_data_segment_bytes = own.initiator_max_recv_data_segment_bytes;
  params_.target_max_recv_data_segment_bytes = own.target_max_recv_data_segment_bytes;
  return login_status::success;
}

asio::awaitable<std::uint16_t> connection::enter_session(bhs& response, std::string& why) {
  if (server_alive_.expired()) {
    close();
    co_return login_status::success;  // the caller sees closed_
  }
  asio::steady_timer wait(socket_.get_executor());
  if (session_) {
    // Joining a session (MC/S). A connection with the same CID is an older
    // one of this initiator's (connection reinstatement, RFC 7143 6.3.4):
    // it ends, its tasks with it, and this one starts once those the
    // units run have finished, so that none of its writes lands after
    // this connection's.
    session& s = *session_;
    if (s.ended) {
      why = "the session ended while this connection logged in";
      co_return login_status::session_does_not_exist;
    }
    connection* older = s.connection_with(cid_);
    if (older == nullptr && s.connections.size() >= s.params.max_connections) {
      why = "the session has its " + std::to_string(s.params.max_connections) +
            " connection(s) (MaxConnections)";
      co_return login_status::too_many_connections;
    }
    s.connections.push_back(this);  // first: the session lives on while the older connection leaves
    joined_ = true;
    if (older != nullptr) {
      log("iscsi: initiator " + params_.initiator_name + " logged in connection " +
          std::to_string(cid_) + " again from " + peer_ + "; the older connection ends");
      auto keep = older->shared_from_this();
      older->close();
      older->leave_session();
      while (keep->executing_ > 0 && !closed_) {
        wait.expires_after(std::chrono::milliseconds(1));
        co_await wait.async_wait(use_tuple);
      }
    }
    response.set_u16(field::tsih, s.tsih);
    co_return login_status::success;
  }
  // A new session. Session reinstatement (RFC 7143 6.3.5): an older
  // session of the same initiator port ends, and the new one starts only
  // once the older one's tasks have finished and its units have heard its
  // nexus is gone, so that none of its writes can land after the new
  // session's. The older one may live on another loop: it is ended there.
  for (;;) {
    std::vector<std::shared_ptr<session>> older;
    {
      std::lock_guard hold(server_.mutex_);
      for (const auto& [raw, weak] : server_.sessions_) {
        auto s = weak.lock();
        if (s && s->is(params_.initiator_name, isid_, target_.get(), params_.type))
          older.push_back(std::move(s));
      }
      if (older.empty()) {
        // None (left): the new session is listed in the same step, so that
        // a login of the same port on another loop finds it.
        auto s = std::make_shared<session>(server_, server_alive_, socket_.get_executor());
        s->target = target_;
        s->access = access_;
        s->params = params_;
        s->isid = isid_;
        s->tsih = server_.next_tsih_locked();
        s->initiator_port = std::make_shared<const std::string>(params_.initiator_name + ",i,0x" +
                                                                encode_hex(isid_).substr(2));
        s->exp_cmd_sn = login_exp_cmd_sn_;
        s->connections.push_back(this);
        server_.sessions_.emplace(s.get(), s);
        session_ = std::move(s);
        break;
      }
    }
    for (const auto& s : older) {
      log("iscsi: initiator " + params_.initiator_name + " logged in again from " + peer_ +
          "; its older session ends");
      asio::dispatch(s->loop, [s] {
        for (connection* c : std::vector<connection*>(s->connections)) c->close();
        s->end();  // now, before the new session announces the same nexus
      });
    }
    for (const auto& s : older) {
      while ((!s->units_released || s->executing > 0) && !closed_) {
        wait.expires_after(std::chrono::milliseconds(1));
        co_await wait.async_wait(use_tuple);
      }
    }
    if (closed_ || server_alive_.expired()) {
      close();
      co_return login_status::success;
    }
  }
  joined_ = true;
  response.set_u16(field::tsih, session_->tsih);
  co_return login_status::success;
}

std::uint16_t connection::authenticate(const key_values& keys, key_values& answers,
                                       std::string& why) {
  auto find = [&](std::string_view name) -> const std::string* {
    for (const auto& [k, v] : keys) {
      if (k == name) return &v;
    }
    return nullptr;
  };
  if (const std::string* methods = find("AuthMethod")) {
    if (auth_ != auth_step::method && auth_ != auth_step::done) {
      why = "AuthMethod offered again in the middle of CHAP";
      return login_status::initiator_error;
    }
    bool none = false;
    bool chap = false;
    for (std::string_view rest = *methods;;) {
      const auto comma = rest.find(',');
      none = none || rest.substr(0, comma) == "None";
      chap = chap || rest.substr(0, comma) == "CHAP";
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    if (access_->chap) {
      if (!chap) {
        why = "this initiator must use CHAP; it offers AuthMethod=" + methods->substr(0, 64);
        return login_status::authentication_failed;
      }
      answers.emplace_back("AuthMethod", "CHAP");
      auth_ = auth_step::algorithm;
      chap_.emplace(*access_->chap, access_->mutual_chap);
    } else {
      if (!none) {
        why = "AuthMethod=" + methods->substr(0, 64) +
              " offered, and no CHAP secret is configured for this initiator";
        return login_status::authentication_failed;
      }
      answers.emplace_back("AuthMethod", "None");
    }
  }
  const bool algorithm = find("CHAP_A") != nullptr;
  const bool response = find("CHAP_N") != nullptr || find("CHAP_R") != nullptr;
  if (algorithm || response) {
    const auth_step expected = algorithm ? auth_step::algorithm : auth_step::response;
    if (auth_ != expected || (algorithm && response)) {
      why = "CHAP keys out of order";
      return login_status::initiator_error;
    }
    auto step = algorithm ? chap_->challenge(keys) : chap_->verify(keys);
    if (!step) {
      why = step.error().reason;
      return step.error().initiator_error ? login_status::initiator_error
                                          : login_status::authentication_failed;
    }
    answers.insert(answers.end(), step->begin(), step->end());
    auth_ = algorithm ? auth_step::response : auth_step::done;
  }
  return login_status::success;
}

}  // namespace strata::iscsi
