// JSON as Python writes it (docs/formats.md, "JSON"): see json_io.h.
#include "io/json_io.h"
#include "io/files.h"

#include <tensordict/errors.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>
#include <vector>

namespace tensordict::detail {

using ojson = nlohmann::ordered_json;

namespace {

const char* kNaN = "\x01tensordict:NaN";
const char* kInf = "\x01tensordict:Infinity";
const char* kNegInf = "\x01tensordict:-Infinity";

// Python's json writes NaN/Infinity/-Infinity tokens; nlohmann does not read
// them. Replace them (outside strings) by sentinel strings, then restore.
std::string quote_special_numbers(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size())
        out += text[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
    } else if (text.compare(i, 3, "NaN") == 0) {
      out += std::string("\"") + "\\u0001tensordict:NaN\"";
      i += 2;
    } else if (text.compare(i, 8, "Infinity") == 0) {
      out += std::string("\"") + "\\u0001tensordict:Infinity\"";
      i += 7;
    } else if (text.compare(i, 9, "-Infinity") == 0) {
      out += std::string("\"") + "\\u0001tensordict:-Infinity\"";
      i += 8;
    } else {
      out += c;
    }
  }
  return out;
}

void restore_special_numbers(ojson& j) {
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s == kNaN)
      j = std::numeric_limits<double>::quiet_NaN();
    else if (s == kInf)
      j = std::numeric_limits<double>::infinity();
    else if (s == kNegInf)
      j = -std::numeric_limits<double>::infinity();
  } else if (j.is_structured()) {
    for (auto& v : j) restore_special_numbers(v);
  }
}

// The deepest nesting of lists/objects in `text`, stopping past `limit`:
// checked before parsing, as the copies, conversions and loaders after the
// parse recurse once per level.
int text_depth(const std::string& text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

const char* file_kind(mode_t mode) {
  return S_ISREG(mode)    ? "a regular file"
         : S_ISDIR(mode)  ? "a directory"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISSOCK(mode) ? "a socket"
                          : "a special file";
}

std::size_t read_regular_file_into(const std::string& path, const std::string& what,
                                   const std::function<char*(std::size_t)>& allocate) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw FormatError("cannot open " + what + " " + path + ": " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw FormatError("cannot read " + what + " " + path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw FormatError("cannot read " + what + " " + path + ": not a regular file (" +
                      file_kind(st.st_mode) + ")");
  const auto size = static_cast<std::size_t>(st.st_size);
  char* out = allocate(size);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, out + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw FormatError("cannot read " + what + " " + path + ": " + std::strerror(errno));
    if (n == 0) break;  // shrunk meanwhile: what is there
    done += static_cast<std::size_t>(n);
  }
  return done;
}

std::string read_regular_file(const std::string& path, const std::string& what) {
  std::string out;
  out.resize(read_regular_file_into(path, what, [&out](std::size_t size) {
    out.resize(size);
    return out.data();
  }));
  return out;
}

void replace_file_atomically(const std::string& path, const char* data, std::size_t size,
                             const std::string& op, bool durable) {
  replace_file_atomically(
      path, [&](const ByteSink& sink) { sink(data, size); }, op, durable);
}

void replace_file_atomically(const std::string& path,
                             const std::function<void(const ByteSink&)>& produce,
                             const std::string& op, bool durable) {
  namespace fs = std::filesystem;
  fs::path target(path);
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
    std::error_code ec;
    target = fs::weakly_canonical(target, ec);
    if (ec) throw StorageError(op + ": cannot resolve " + path + ": " + ec.message());
  }
  static std::atomic<uint64_t> counter{0};
  const fs::path tmp =
      target.parent_path() / ("." + target.filename().string() + ".tdtmp-" +
                              std::to_string(::getpid()) + "-" + std::to_string(counter++));
  // Durable: the bytes reach the disk before the name does, so a power loss
  // after the rename cannot leave an empty or partial file at `path`.
  try {
    write_new_file(tmp.string(), produce, durable, op);
    if (::rename(tmp.c_str(), target.c_str()) != 0)
      throw StorageError(op + ": cannot rename " + tmp.string() + " to " + target.string() + ": " +
                         std::strerror(errno));
  } catch (const StorageError& e) {
    ::unlink(tmp.c_str());
    throw StorageError(std::string(e.what()) + " (" + path + " is left as it was)");
  } catch (...) {  // what `produce` throws
    ::unlink(tmp.c_str());
    throw;
  }
  if (durable) {
    // The rename itself is made durable by syncing the directory holding it.
    const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
    try {
      fsync_path(dir.string(), op);
    } catch (const StorageError& e) {
      throw StorageError(std::string(e.what()) + " (" + path +
                         " holds the new content, but its rename may not survive a power loss)");
    }
  }
}

ojson parse_python_json(const std::string& text, const std::string& where) {
  if (text_depth(text, kMaxNestingDepth) > kMaxNestingDepth)
    throw FormatError((where.empty() ? std::string("JSON") : where) + ": nested deeper than " +
                      std::to_string(kMaxNestingDepth) +
                      " levels (the limit of this library, docs/errors.md)");
  // nlohmann's parser takes a NUL byte for the end of the input, so that
  // "[4]\0garbage" would read as [4]; JSON text never holds one raw.
  if (const auto nul = text.find('\0'); nul != std::string::npos)
    throw FormatError((where.empty() ? std::string("JSON") : where) +
                      ": is not valid JSON: a NUL byte at offset " + std::to_string(nul));
  ojson j = ojson::parse(quote_special_numbers(text));
  restore_special_numbers(j);
  return j;
}

// Converted element by element: a dump()/parse() round trip would turn the
// NaN/Infinity values read above into null.
nlohmann::json to_plain(const ojson& j) {
  if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto it = j.begin(); it != j.end(); ++it) out[it.key()] = to_plain(it.value());
    return out;
  }
  if (j.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : j) out.push_back(to_plain(v));
    return out;
  }
  switch (j.type()) {
    case ojson::value_t::null:
      return nullptr;
    case ojson::value_t::boolean:
      return j.get<bool>();
    case ojson::value_t::string:
      return j.get<std::string>();
    case ojson::value_t::number_integer:
      return j.get<int64_t>();
    case ojson::value_t::number_unsigned:
      return j.get<uint64_t>();
    case ojson::value_t::number_float:
      return j.get<double>();
    default:
      return nlohmann::json::parse(j.dump());
  }
}

}  // namespace tensordict::detail
