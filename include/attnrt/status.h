// Status and StatusOr<T>: the one error model of attnrt. No exception crosses the public API;
// every fallible call returns one of these, with a message naming the offending field and value.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <attnrt/export.h>

namespace attnrt {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kResourceExhausted,
  kFailedPrecondition,
  kUnavailable,
  kDeadlineExceeded,
  kCancelled,
  kInternal,
  kUnimplemented,
};

ATTNRT_EXPORT std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: q has 4096 elements, expected H*D = 8192" or "OK".
  ATTNRT_EXPORT std::string ToString() const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

ATTNRT_EXPORT Status InvalidArgumentError(std::string message);
ATTNRT_EXPORT Status NotFoundError(std::string message);
ATTNRT_EXPORT Status AlreadyExistsError(std::string message);
ATTNRT_EXPORT Status ResourceExhaustedError(std::string message);
ATTNRT_EXPORT Status FailedPreconditionError(std::string message);
ATTNRT_EXPORT Status UnavailableError(std::string message);
ATTNRT_EXPORT Status DeadlineExceededError(std::string message);
ATTNRT_EXPORT Status CancelledError(std::string message);
ATTNRT_EXPORT Status InternalError(std::string message);
ATTNRT_EXPORT Status UnimplementedError(std::string message);

// Holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : rep_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : rep_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(rep_).ok() && "StatusOr built from an OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(rep_); }
  Status status() const { return ok() ? Status() : std::get<Status>(rep_); }

  T& value() & { return std::get<T>(rep_); }
  const T& value() const& { return std::get<T>(rep_); }
  T&& value() && { return std::get<T>(std::move(rep_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> rep_;
};

}  // namespace attnrt

#define ATTNRT_CONCAT_INNER_(a, b) a##b
#define ATTNRT_CONCAT_(a, b) ATTNRT_CONCAT_INNER_(a, b)

#define ATTNRT_RETURN_IF_ERROR(expr)            \
  do {                                          \
    ::attnrt::Status attnrt_status_ = (expr);   \
    if (!attnrt_status_.ok()) return attnrt_status_; \
  } while (0)

#define ATTNRT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

// ATTNRT_ASSIGN_OR_RETURN(auto x, MakeX());
#define ATTNRT_ASSIGN_OR_RETURN(lhs, expr) \
  ATTNRT_ASSIGN_OR_RETURN_IMPL_(ATTNRT_CONCAT_(attnrt_statusor_, __LINE__), lhs, expr)
