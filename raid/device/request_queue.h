// Queues of requests for device implementations, with no allocation: the
// link lives in the request (request::next_in_device), so a device can hold
// any number of its callers' requests without a container of its own.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/post.hpp>
#include <cstddef>
#include <functional>

#include "raid/device/block_device.h"

namespace strata::device {

// FIFO of requests linked through next_in_device. A request is in at most
// one list at a time.
class request_list {
 public:
  bool empty() const noexcept { return head_ == nullptr; }
  std::size_t size() const noexcept { return size_; }
  request* front() const noexcept { return head_; }

  void push_back(request& req) noexcept {
    req.next_in_device = nullptr;
    if (tail_ != nullptr) {
      tail_->next_in_device = &req;
    } else {
      head_ = &req;
    }
    tail_ = &req;
    ++size_;
  }

  request* pop_front() noexcept {
    request* req = head_;
    if (req == nullptr) return nullptr;
    head_ = req->next_in_device;
    if (head_ == nullptr) tail_ = nullptr;
    req->next_in_device = nullptr;
    --size_;
    return req;
  }

  // Unlinks `req`, which must be in this list. Linear; for rare paths (cancel).
  void erase(request& req) noexcept {
    request* prev = nullptr;
    for (request* r = head_; r != nullptr; prev = r, r = r->next_in_device) {
      if (r != &req) continue;
      (prev != nullptr ? prev->next_in_device : head_) = r->next_in_device;
      if (tail_ == r) tail_ = prev;
      r->next_in_device = nullptr;
      --size_;
      return;
    }
  }

  // Moves every request out, leaving this list empty.
  request_list take_all() noexcept {
    request_list all = *this;
    *this = request_list{};
    return all;
  }

 private:
  request* head_ = nullptr;
  request* tail_ = nullptr;
  std::size_t size_ = 0;
};

// Completes requests later, from the executor, in the order they were
// queued: how a device answers a request it rejects (or finishes) on sight
// without completing inside submit(). One handler is posted per batch, not
// per request.
class completion_queue {
 public:
  // `execute`, when given, runs on each request just before its completion,
  // if the request has no error yet, and its return value becomes the result
  // (the memory device does its copying there, so that the copy happens
  // after submit() returns, as with a real device).
  explicit completion_queue(boost::asio::any_io_executor executor,
                            std::function<std::error_code(request&)> execute = {})
      : executor_(std::move(executor)), execute_(std::move(execute)) {}

  completion_queue(const completion_queue&) = delete;
  completion_queue& operator=(const completion_queue&) = delete;

  void complete_later(request& req, std::error_code result) noexcept {
    req.result = result;
    pending_.push_back(req);
    if (drain_posted_) return;
    drain_posted_ = true;
    boost::asio::post(executor_, [this] { drain(); });
  }

 private:
  void drain() noexcept {
    drain_posted_ = false;
    // Take the batch first: completions may queue more (delivered by the next
    // drain) or, after the last one, destroy the device that owns this queue.
    request_list batch = pending_.take_all();
    while (request* req = batch.pop_front()) {
      if (execute_ && !req->result) req->result = execute_(*req);
      req->on_complete(*req);
    }
  }

  boost::asio::any_io_executor executor_;
  std::function<std::error_code(request&)> execute_;
  request_list pending_;
  bool drain_posted_ = false;
};

}  // namespace strata::device
