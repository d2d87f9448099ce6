#pragma once
// Typed reading of the server's replies. The only way the Redis component
// reads a reply: each accessor checks the reply's type and throws a
// FormatError naming what was being read, the type expected and the type
// received. Only reply.cpp and link.cpp (which makes replies) see hiredis's
// redisReply.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

struct redisReply;  // hiredis; its fields are read in reply.cpp only

namespace tensordict::detail::redis {

class ReplyArray;

/// A reply (or an element of an array reply) owned elsewhere. An empty view
/// stands for "no reply" and fails every typed accessor.
class ReplyView {
 public:
  ReplyView() = default;
  explicit ReplyView(const redisReply* reply) noexcept : r_(reply) {}

  bool is_nil() const noexcept;
  bool is_error() const noexcept;
  bool is_integer() const noexcept;
  bool is_array() const noexcept;
  /// A bulk string or a status reply (what text() accepts).
  bool is_text() const noexcept;
  /// "a string reply", "an integer reply", "nil"... for messages.
  std::string type_name() const;

  /// The bytes of a string or status reply; FormatError naming `what` otherwise.
  std::string_view text(std::string_view what) const;
  /// As text(), but nil reads as no bytes (a GET of a missing key).
  std::string_view text_or_nil(std::string_view what) const;
  /// The value of an integer reply; FormatError naming `what` otherwise.
  long long integer(std::string_view what) const;
  /// The value of an integer reply, `otherwise` for any other reply (the
  /// size a STRLEN check reports).
  long long integer_or(long long otherwise) const noexcept;
  /// The elements of an array reply; FormatError naming `what` otherwise.
  ReplyArray array(std::string_view what) const;
  /// An HGETALL reply (field, value, field, value...) as field -> value;
  /// FormatError naming `what` for another reply or a field that is not text.
  std::map<std::string, std::string> hash(std::string_view what) const;
  /// The message of an error reply; empty for any other reply.
  std::string_view error_text() const noexcept;

 protected:
  const redisReply* r_ = nullptr;
};

/// The elements of an array reply, as views.
class ReplyArray {
 public:
  ReplyArray(redisReply* const* elements, std::size_t size) noexcept
      : elements_(elements), size_(size) {}
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  ReplyView operator[](std::size_t i) const noexcept { return ReplyView(elements_[i]); }

 private:
  redisReply* const* elements_ = nullptr;
  std::size_t size_ = 0;
};

/// An owned reply (hiredis frees it with its elements). Move-only.
class Reply : public ReplyView {
 public:
  Reply() = default;
  /// Takes ownership of a reply hiredis returned (link.cpp).
  explicit Reply(redisReply* owned) noexcept : ReplyView(owned) {}
  ~Reply();
  Reply(Reply&& other) noexcept : ReplyView(other.r_) { other.r_ = nullptr; }
  Reply& operator=(Reply&& other) noexcept;
  Reply(const Reply&) = delete;
  Reply& operator=(const Reply&) = delete;

  explicit operator bool() const noexcept { return r_ != nullptr; }
  /// The elements of an array reply (EXEC's), each moved into its own
  /// Reply; FormatError naming `what` for another reply.
  std::vector<Reply> take_elements(std::string_view what);
};

}  // namespace tensordict::detail::redis
