// redis:// and unix:// addresses of a store (tensordict-inspect, examples,
// command lines): td::redis::parse_url.
#include <tensordict/errors.h>
#include <tensordict/storage/redis.h>

#include <sys/stat.h>

#include <charconv>
#include <string>
#include <string_view>

namespace tensordict::redis {
namespace {

[[noreturn]] void bad(std::string_view url, const std::string& why) {
  throw ValueError("Redis address '" + std::string(url) + "': " + why +
                   " (expected redis://[[user]:password@]host[:port][/td_id][?db=N&prefix=P] or "
                   "unix://<socket path>[/td_id][?db=N&prefix=P])");
}

int to_int(std::string_view url, std::string_view text, const char* what, int lo, int hi) {
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi)
    bad(url, std::string(what) + " '" + std::string(text) + "' is not a number in " +
                 std::to_string(lo) + "-" + std::to_string(hi));
  return v;
}

std::int64_t to_int64(std::string_view url, std::string_view text, const char* what) {
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0)
    bad(url, std::string(what) + " '" + std::string(text) + "' is not a count of bytes");
  return v;
}

// %XX escapes, as in user names and passwords with reserved characters.
std::string decode(std::string_view url, std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) bad(url, "a '%' escape is cut short");
    int v = 0;
    auto [end, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16);
    if (ec != std::errc() || end != s.data() + i + 3)
      bad(url, "a '%' escape is not two hex digits");
    out += static_cast<char>(v);
    i += 2;
  }
  return out;
}

}  // namespace

storage::Redis parse_url(std::string_view url) {
  storage::Redis r;
  std::string_view rest;
  const bool unix_socket = url.starts_with("unix://");
  if (unix_socket)
    rest = url.substr(7);
  else if (url.starts_with("redis://"))
    rest = url.substr(8);
  else
    bad(url, "unknown scheme");
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    std::string_view query = rest.substr(q + 1);
    rest = rest.substr(0, q);
    while (!query.empty()) {
      const auto amp = query.find('&');
      std::string_view item = query.substr(0, amp);
      query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
      const auto eq = item.find('=');
      if (eq == std::string_view::npos)
        bad(url, "query item '" + std::string(item) + "' has no '='");
      const std::string_view k = item.substr(0, eq), v = item.substr(eq + 1);
      if (k == "db")
        r.db = to_int(url, v, "db", 0, 1 << 20);
      else if (k == "prefix")
        r.prefix = decode(url, v);
      else if (k == "td_id")
        r.td_id = decode(url, v);
      else if (k == "timeout")  // whole seconds; 0 = no limit
        r.timeout = to_int(url, v, "timeout", 0, 1 << 20);
      else if (k == "connect_timeout")
        r.connect_timeout = to_int(url, v, "connect_timeout", 0, 1 << 20);
      else if (k == "max_reply_bytes")  // 0 = no limit
        r.max_reply_bytes = to_int64(url, v, "max_reply_bytes");
      else
        bad(url, "unknown query item '" + std::string(k) +
                     "' (db, prefix, td_id, timeout, connect_timeout, max_reply_bytes are "
                     "known)");
    }
  }
  if (unix_socket) {
    // unix:///run/redis.sock/<td_id>: when the whole path is not a socket,
    // its last component is the td_id (ids never hold '/').
    if (rest.empty() || rest.front() != '/') bad(url, "the socket path must be absolute");
    std::string path(rest);
    struct stat st {};
    const bool is_socket = ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
    if (!is_socket && r.td_id.empty()) {
      const auto slash = path.rfind('/');
      if (slash == 0 || slash + 1 == path.size()) bad(url, "no socket path before the td_id");
      r.td_id = path.substr(slash + 1);
      path.resize(slash);
    }
    r.unix_socket = path;
    return r;
  }
  std::string_view authority = rest, tail;
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    authority = rest.substr(0, slash);
    tail = rest.substr(slash + 1);
  }
  if (auto at = authority.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    if (auto colon = userinfo.find(':'); colon != std::string_view::npos) {
      r.username = decode(url, userinfo.substr(0, colon));
      r.password = decode(url, userinfo.substr(colon + 1));
    } else {
      r.password = decode(url, userinfo);  // redis://secret@host: requirepass
    }
  }
  if (authority.starts_with('[')) {  // [::1]:6379
    const auto close = authority.find(']');
    if (close == std::string_view::npos) bad(url, "an IPv6 host misses ']'");
    r.host = std::string(authority.substr(1, close - 1));
    authority = authority.substr(close + 1);
    if (!authority.empty()) {
      if (authority.front() != ':') bad(url, "junk after the IPv6 host");
      r.port = to_int(url, authority.substr(1), "port", 1, 65535);
    }
  } else {
    const auto colon = authority.rfind(':');
    r.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos)
      r.port = to_int(url, authority.substr(colon + 1), "port", 1, 65535);
  }
  if (r.host.empty()) bad(url, "no host");
  if (!tail.empty()) {
    if (tail.find('/') != std::string_view::npos) bad(url, "the path must be one td_id");
    if (r.td_id.empty()) r.td_id = decode(url, tail);
  }
  return r;
}

}  // namespace tensordict::redis
