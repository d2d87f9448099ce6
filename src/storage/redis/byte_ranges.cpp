#include "storage/redis/byte_ranges.h"

#include <ATen/Functions.h>

#include <algorithm>
#include <cstring>

namespace tensordict::detail::redis {
namespace {

// CheckedWrite's script. KEYS: data keys. ARGV, per key: the bytes it must
// hold, the number n of its ranges, then n (offset, bytes) pairs. Every
// length (and that each key is still a string) is checked before the first
// SETRANGE, and a failed check is a TDSIZE error reply, which send_checked
// tells apart; the server refuses a script's first write, not
// a later one, when out of memory, so a refused script writes nothing.
constexpr const char* kCheckedWrite = R"lua(
local a = 1
for k = 1, #KEYS do
  local want = tonumber(ARGV[a])
  local have = redis.pcall('STRLEN', KEYS[k])
  if type(have) == 'table' then
    return redis.error_reply('TDSIZE ' .. KEYS[k] .. ' is no longer a string')
  end
  if have ~= want then
    return redis.error_reply('TDSIZE ' .. KEYS[k] .. ' holds ' .. have ..
      ' bytes where its metadata needs ' .. want)
  end
  a = a + 2 + 2 * tonumber(ARGV[a + 1])
end
a = 1
for k = 1, #KEYS do
  local n = tonumber(ARGV[a + 1])
  a = a + 2
  for j = 1, n do
    redis.call('SETRANGE', KEYS[k], ARGV[a], ARGV[a + 1])
    a = a + 2
  end
end
return #KEYS
)lua";

}  // namespace

std::optional<ByteRuns> selected_runs(const RowSelection& rows, at::IntArrayRef shape,
                                      int64_t item) {
  ByteRuns out;
  switch (rows.kind()) {
    case RowSelection::Kind::All: {
      int64_t n = item;
      for (auto d : shape) n *= d;
      add_run(out, 0, n);
      return out;
    }
    case RowSelection::Kind::Rows: {
      int64_t row = item;
      for (std::size_t d = 1; d < shape.size(); ++d) row *= shape[d];
      at::Tensor r = rows.rows().to(at::kLong).contiguous();
      const int64_t* p = r.data_ptr<int64_t>();
      for (int64_t i = 0; i < r.numel(); ++i) add_run(out, p[i] * row, row);
      return out;
    }
    case RowSelection::Kind::Box: {
      const auto ranges = rows.ranges().slice(0, std::min(rows.ranges().size(), shape.size()));
      const std::size_t k = ranges.size();
      int64_t inner = item;
      for (std::size_t d = k; d < shape.size(); ++d) inner *= shape[d];
      if (k == 1) {
        const auto& r = ranges[0];
        if (r.step == 1)
          add_run(out, r.start * inner, r.count() * inner);
        else
          for (int64_t i = r.start; i < r.stop; i += r.step) add_run(out, i * inner, inner);
        return out;
      }
      // Several dims: the flat indices of the selected items, in order.
      std::vector<int64_t> lead(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(k));
      int64_t n = 1;
      for (auto d : lead) n *= d;
      at::Tensor idx = at::arange(n, at::kLong).view(lead);
      int64_t dim = 0;
      for (const auto& r : ranges) {
        if (r.drop) {
          idx = idx.select(dim, r.start);
        } else {
          idx = idx.slice(dim, r.start, std::max(r.start, r.stop), r.step);
          ++dim;
        }
      }
      idx = idx.contiguous();
      const int64_t* p = idx.data_ptr<int64_t>();
      for (int64_t i = 0; i < idx.numel(); ++i) add_run(out, p[i] * inner, inner);
      return out;
    }
    case RowSelection::Kind::General:
      return std::nullopt;
  }
  return std::nullopt;
}

// ---- CheckedReads -------------------------------------------------------------------

std::size_t CheckedReads::leaf() {
  Leaf l;
  l.first_key = l.end_key = keys_.size();
  l.first_run = l.end_run = runs_.size();
  leaves_.push_back(l);
  return leaves_.size() - 1;
}

std::size_t CheckedReads::key(Batch& b, std::string_view key, int64_t size) {
  keys_.push_back(Key{key, size, b.size()});
  b.add({"STRLEN", key});
  Leaf& l = leaves_.back();
  ++l.end_key;
  return keys_.size() - 1 - l.first_key;
}

void CheckedReads::range(Batch& b, std::size_t k, int64_t off, int64_t len, int64_t dest) {
  Leaf& l = leaves_.back();
  const std::size_t key = l.first_key + k;
  runs_.push_back(Run{key, len, dest, b.size()});
  b.add({"GETRANGE", keys_[key].key, b.own(std::to_string(off)),
         b.own(std::to_string(off + len - 1))});
  ++l.end_run;
  l.bytes = std::max(l.bytes, dest + len);
}

void CheckedReads::whole(Batch& b, std::size_t k, int64_t dest) {
  Leaf& l = leaves_.back();
  const std::size_t key = l.first_key + k;
  runs_.push_back(Run{key, keys_[key].size, dest, b.size()});
  b.add({"GET", keys_[key].key});
  ++l.end_run;
  l.bytes = std::max(l.bytes, dest + keys_[key].size);
}

std::size_t CheckedReads::leaf(Batch& b, std::string_view key_name, int64_t size,
                               const ByteRuns& runs, bool as_whole) {
  const std::size_t i = leaf();
  if (runs.empty()) return i;  // an empty selection sends nothing
  // The key's size first: a leaf another process replaced with another
  // shape is refused instead of read as garbage.
  const std::size_t k = key(b, key_name, size);
  // Grown geometrically: a sample of many rows plans thousands of runs.
  if (runs_.capacity() < runs_.size() + runs.size())
    runs_.reserve(std::max(2 * runs_.capacity(), runs_.size() + runs.size()));
  int64_t dest = 0;
  for (const auto& [off, len] : runs) {
    if (as_whole)
      whole(b, k, dest);
    else
      range(b, k, off, len, dest);
    dest += len;
  }
  return i;
}

std::optional<std::string> CheckedReads::size_mismatch(std::size_t i,
                                                       const std::vector<Reply>& replies) const {
  const Leaf& l = leaves_[i];
  for (std::size_t k = l.first_key; k < l.end_key; ++k) {
    const ReplyView size = replies[keys_[k].reply];
    if (!size.is_integer() || size.integer_or(0) != keys_[k].size)
      return owner_ + ": '" + std::string(keys_[k].key) + "' has " +
             std::to_string(size.integer_or(0)) + " bytes where its metadata needs " +
             std::to_string(keys_[k].size);
  }
  return std::nullopt;
}

std::optional<std::string> CheckedReads::copy(std::size_t i, const std::vector<Reply>& replies,
                                              char* out) const {
  const Leaf& l = leaves_[i];
  for (std::size_t j = l.first_run; j < l.end_run; ++j) {
    const Run& run = runs_[j];
    // nil (a key gone between the commands) reads as no bytes.
    const std::string_view bytes = replies[run.reply].text_or_nil(keys_[run.key].key);
    if (static_cast<int64_t>(bytes.size()) != run.len)
      return owner_ + ": '" + std::string(keys_[run.key].key) + "' returned " +
             std::to_string(bytes.size()) + " bytes where its metadata needs " +
             std::to_string(run.len);
    if (run.len > 0) std::memcpy(out + run.dest, bytes.data(), bytes.size());
  }
  return std::nullopt;
}

// ---- writes -------------------------------------------------------------------------

void CheckedWrite::key(Batch& b, std::string_view data_key, int64_t expected) {
  keys_.push_back(data_key);
  expected_.push_back(b.own(std::to_string(expected)));
  ranges_.emplace_back();
}

void CheckedWrite::add_to(Batch& b) {
  if (keys_.empty()) return;
  std::vector<std::string_view> args{"EVAL", kCheckedWrite, b.own(std::to_string(keys_.size()))};
  args.insert(args.end(), keys_.begin(), keys_.end());
  for (std::size_t k = 0; k < keys_.size(); ++k) {
    args.push_back(expected_[k]);
    args.push_back(b.own(std::to_string(ranges_[k].size())));
    for (const auto& [off, bytes] : ranges_[k]) args.push_back(off), args.push_back(bytes);
  }
  b.add(std::move(args));
}

void RangeWrites::key(Batch& b, std::string_view key, int64_t size, std::size_t group) {
  key_ = key;
  if (!checked_) return;
  script_ = &scripts_[group];
  script_->key(b, key, size);
}

void RangeWrites::range(Batch& b, int64_t off, std::string_view bytes) {
  if (off != last_off_) last_off_ = off, last_text_ = b.own(std::to_string(off));
  if (checked_)
    script_->range(last_text_, bytes);
  else
    b.add({"SETRANGE", key_, last_text_, bytes});
}

void RangeWrites::runs(Batch& b, const ByteRuns& runs, const char* data) {
  int64_t pos = 0;
  for (const auto& [off, len] : runs) {
    range(b, off, std::string_view(data + pos, static_cast<std::size_t>(len)));
    pos += len;
  }
}

void RangeWrites::finish(Batch& b) {
  for (auto& script : scripts_) script.add_to(b);
}

void add_zeroed(Batch& b, std::string_view key, int64_t bytes) {
  if (bytes > 0)
    b.add({"SETRANGE", key, b.own(std::to_string(bytes - 1)), std::string_view("\0", 1)});
}

void throw_size_mismatch(const std::string& message, bool metadata_unchanged) {
  if (metadata_unchanged)
    throw FormatError(message +
                      ", and the metadata is unchanged: the stored value is missing, "
                      "truncated or not this store's");
  throw ConflictError(message + ": changed by another process; metadata refreshed, retry");
}

}  // namespace tensordict::detail::redis
