// The typed reply layer (src/storage/redis/reply.h) on replies of a real
// server: each accessor given a reply of another type throws a FormatError
// naming what was read, the type expected and the type received.

#include "support/redis_server.h"

#include "storage/redis/connection.h"
#include "storage/redis/reply.h"

#include <tensordict/errors.h>
#include <tensordict/storage/redis.h>

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>

namespace td = tensordict;
using td::detail::redis::Batch;
using td::detail::redis::Connection;
using td::detail::redis::Reply;
using td::detail::redis::ReplyArray;
using td::detail::redis::ReplyView;
using td_test::RedisServer;

namespace {

td::storage::Redis options_of(const RedisServer& server) {
  td::storage::Redis r;
  r.host = "127.0.0.1";
  r.port = server.port();
  return r;
}

// The message of the FormatError `read` throws; a test failure when it throws
// nothing or another error.
std::string format_error(const std::function<void()>& read) {
  try {
    read();
  } catch (const td::FormatError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a FormatError, got: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected a FormatError, nothing was thrown";
  return {};
}

class RedisReply : public ::testing::Test {
 protected:
  RedisServer server;
  Connection conn{options_of(server)};
};

}  // namespace

TEST_F(RedisReply, ReadsEachTypeThroughItsAccessor) {
  Batch b;
  b.add({"SET", "s", std::string_view("a\0b", 3)}).add({"GET", "s"}).add({"INCR", "n"});
  b.add({"GET", "missing"}).add({"RPUSH", "l", "x", "yz"}).add({"LRANGE", "l", "0", "-1"});
  auto r = conn.send(b, "typed reads");
  ASSERT_EQ(r.size(), 6u);
  EXPECT_EQ(r[0].text("SET"), "OK");  // a status reply reads as text
  EXPECT_EQ(r[1].text("GET s"), std::string_view("a\0b", 3));
  EXPECT_EQ(r[2].integer("INCR n"), 1);
  EXPECT_EQ(r[2].integer_or(-1), 1);
  EXPECT_TRUE(r[3].is_nil());
  EXPECT_EQ(r[3].text_or_nil("GET missing").size(), 0u);
  EXPECT_EQ(r[1].text_or_nil("GET s"), std::string_view("a\0b", 3));
  const ReplyArray list = r[5].array("LRANGE l");
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].text("LRANGE l"), "x");
  EXPECT_EQ(list[1].text("LRANGE l"), "yz");
  EXPECT_EQ(r[1].integer_or(-1), -1);
  // A hash reads as field -> value.
  conn.call({"HSET", "h", "shape", "[2]", "dtype", "float32"}, "setup");
  Reply fields = conn.call({"HGETALL", "h"}, "HGETALL h");
  const auto hash = fields.hash("HGETALL h");
  EXPECT_EQ(hash, (std::map<std::string, std::string>{{"dtype", "float32"}, {"shape", "[2]"}}));
}

TEST_F(RedisReply, WrongTypeNamesWhatWasExpectedAndWhatCame) {
  conn.call({"HSET", "h", "f", "v"}, "setup");
  conn.call({"SET", "s", "text"}, "setup");
  // HGETALL of a hash: an array, read as text.
  Reply hash = conn.call({"HGETALL", "h"}, "HGETALL h");
  EXPECT_EQ(format_error([&] { hash.text("reading 'h'"); }),
            "Redis: reading 'h': expected a string reply, got an array reply");
  // INCR's integer read as text, a string read as an integer or an array.
  Reply counter = conn.call({"INCR", "n"}, "INCR n");
  EXPECT_EQ(format_error([&] { counter.text("the counter"); }),
            "Redis: the counter: expected a string reply, got an integer reply");
  Reply str = conn.call({"GET", "s"}, "GET s");
  EXPECT_EQ(format_error([&] { str.integer("the size of 's'"); }),
            "Redis: the size of 's': expected an integer reply, got a string reply");
  EXPECT_EQ(format_error([&] { str.array("the fields of 's'"); }),
            "Redis: the fields of 's': expected an array reply, got a string reply");
  EXPECT_EQ(format_error([&] { counter.hash("the metadata 'n'"); }),
            "Redis: the metadata 'n': expected an array reply, got an integer reply");
  // A missing key is nil: text() refuses it, text_or_nil() reads no bytes.
  Reply missing = conn.call({"GET", "missing"}, "GET missing");
  EXPECT_EQ(format_error([&] { missing.text("'missing'"); }),
            "Redis: 'missing': expected a string reply, got nil");
  // An element of an array names the same way.
  const ReplyArray fields = hash.array("HGETALL h");
  ASSERT_EQ(fields.size(), 2u);
  EXPECT_EQ(format_error([&] { fields[1].integer("field f"); }),
            "Redis: field f: expected an integer reply, got a string reply");
  // No reply at all (a default Reply) fails every accessor the same way.
  const Reply none;
  EXPECT_EQ(format_error([&] { none.text("nothing"); }),
            "Redis: nothing: expected a string reply, got no reply");
}

TEST_F(RedisReply, ErrorRepliesAreTheirOwnType) {
  // send() throws a StorageError for an error reply; call_each_node returns
  // it as such: its text is error_text(), and a typed read quotes it.
  conn.call({"SET", "s", "text"}, "setup");
  auto replies = conn.call_each_node({"CONFIG", "GET"}, "a CONFIG GET without a pattern");
  ASSERT_EQ(replies.size(), 1u);
  const Reply& error = replies.front();
  ASSERT_TRUE(error.is_error());
  EXPECT_NE(error.error_text().find("wrong number of arguments"), std::string_view::npos)
      << error.error_text();
  const std::string message = format_error([&] { error.integer("CONFIG GET"); });
  EXPECT_EQ(message.rfind("Redis: CONFIG GET: expected an integer reply, got an error reply ('", 0),
            0u)
      << message;
  EXPECT_NE(message.find("wrong number of arguments"), std::string::npos) << message;
  // Other replies have no error text.
  Reply ok = conn.call({"GET", "s"}, "GET s");
  EXPECT_FALSE(ok.is_error());
  EXPECT_TRUE(ok.error_text().empty());
  // INCR of a string is refused by the server: a StorageError from send().
  EXPECT_THROW(conn.call({"INCR", "s"}, "INCR s"), td::StorageError);
}

TEST_F(RedisReply, OwnershipMovesWithTheReply) {
  conn.call({"SET", "s", "kept"}, "setup");
  Reply first = conn.call({"GET", "s"}, "GET s");
  Reply moved = std::move(first);
  EXPECT_FALSE(static_cast<bool>(first));
  EXPECT_EQ(moved.text("GET s"), "kept");
  Reply other = conn.call({"GET", "s"}, "GET s");
  other = std::move(moved);  // frees the reply `other` held
  EXPECT_EQ(other.text("GET s"), "kept");
  const ReplyView view = other;  // a view reads the same bytes
  EXPECT_EQ(view.text("GET s"), "kept");
}
