#include "storage/redis/reply.h"

#include <tensordict/errors.h>

#include <hiredis/hiredis.h>

namespace tensordict::detail::redis {
namespace {

bool has_type(const redisReply* r, int type) noexcept { return r != nullptr && r->type == type; }

[[noreturn]] void wrong_type(const ReplyView& got, std::string_view what, const char* expected) {
  std::string message =
      "Redis: " + std::string(what) + ": expected " + expected + ", got " + got.type_name();
  if (got.is_error()) message += " ('" + std::string(got.error_text().substr(0, 200)) + "')";
  throw FormatError(message);
}

}  // namespace

bool ReplyView::is_nil() const noexcept { return has_type(r_, REDIS_REPLY_NIL); }
bool ReplyView::is_error() const noexcept { return has_type(r_, REDIS_REPLY_ERROR); }
bool ReplyView::is_integer() const noexcept { return has_type(r_, REDIS_REPLY_INTEGER); }
bool ReplyView::is_array() const noexcept { return has_type(r_, REDIS_REPLY_ARRAY); }
bool ReplyView::is_text() const noexcept {
  return has_type(r_, REDIS_REPLY_STRING) || has_type(r_, REDIS_REPLY_STATUS);
}

std::string ReplyView::type_name() const {
  if (r_ == nullptr) return "no reply";
  switch (r_->type) {
    case REDIS_REPLY_STRING:
      return "a string reply";
    case REDIS_REPLY_ARRAY:
      return "an array reply";
    case REDIS_REPLY_INTEGER:
      return "an integer reply";
    case REDIS_REPLY_NIL:
      return "nil";
    case REDIS_REPLY_STATUS:
      return "a status reply";
    case REDIS_REPLY_ERROR:
      return "an error reply";
    default:
      return "a reply of type " + std::to_string(r_->type);
  }
}

std::string_view ReplyView::text(std::string_view what) const {
  if (!is_text()) wrong_type(*this, what, "a string reply");
  return {r_->str, r_->len};
}

// One test of the type: this reads every row run of a leaf.
std::string_view ReplyView::text_or_nil(std::string_view what) const {
  if (r_ != nullptr) {
    if (r_->type == REDIS_REPLY_STRING || r_->type == REDIS_REPLY_STATUS) return {r_->str, r_->len};
    if (r_->type == REDIS_REPLY_NIL) return {};
  }
  wrong_type(*this, what, "a string reply");
}

long long ReplyView::integer(std::string_view what) const {
  if (!is_integer()) wrong_type(*this, what, "an integer reply");
  return r_->integer;
}

long long ReplyView::integer_or(long long otherwise) const noexcept {
  return is_integer() ? r_->integer : otherwise;
}

ReplyArray ReplyView::array(std::string_view what) const {
  if (!is_array()) wrong_type(*this, what, "an array reply");
  return ReplyArray(r_->element, r_->elements);
}

std::map<std::string, std::string> ReplyView::hash(std::string_view what) const {
  const ReplyArray pairs = array(what);
  std::map<std::string, std::string> out;
  for (std::size_t i = 0; i + 1 < pairs.size(); i += 2)
    out[std::string(pairs[i].text(what))] = std::string(pairs[i + 1].text(what));
  return out;
}

std::string_view ReplyView::error_text() const noexcept {
  if (!is_error()) return {};
  return {r_->str, r_->len};
}

Reply::~Reply() {
  if (r_ != nullptr) freeReplyObject(const_cast<redisReply*>(r_));
}

Reply& Reply::operator=(Reply&& other) noexcept {
  if (this != &other) {
    if (r_ != nullptr) freeReplyObject(const_cast<redisReply*>(r_));
    r_ = other.r_;
    other.r_ = nullptr;
  }
  return *this;
}

std::vector<Reply> Reply::take_elements(std::string_view what) {
  if (!is_array()) wrong_type(*this, what, "an array reply");
  redisReply* const array = const_cast<redisReply*>(r_);
  std::vector<Reply> out;
  out.reserve(array->elements);
  for (std::size_t k = 0; k < array->elements; ++k) {
    out.emplace_back(array->element[k]);
    array->element[k] = nullptr;  // now owned by out[k]; freeReplyObject skips it
  }
  return out;
}

}  // namespace tensordict::detail::redis
