// The bounded torch-archive reader: see pickle_reader.h. A zip directory
// walk (stored records only, as torch writes them) and a stack machine for
// the pickle subset of a dict of tensors. Every read is checked against the
// buffer; containers are sealed once placed in another one (pickle builds a
// child before its parent), so depths are exact and cycles impossible.
#include "formats/pickle_reader.h"

#include "io/json_io.h"

#include <tensordict/dtype.h>
#include <tensordict/errors.h>

#include <ATen/ATen.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace tensordict::detail {

namespace {

// ---- zip -----------------------------------------------------------------------------------

struct Record {
  std::size_t offset = 0;
  std::size_t size = 0;
};

class Zip {
 public:
  Zip(std::string_view bytes, const std::string& what) : b_(bytes), what_(what) { parse(); }

  const std::map<std::string, Record>& records() const { return records_; }

  [[noreturn]] void fail(const std::string& why) const {
    throw FormatError(
        what_ + ": not a pickle archive written by torch.save or torch::pickle_save (" + why + ")");
  }

 private:
  uint64_t le(std::size_t at, int n) const {
    if (at > b_.size() || static_cast<std::size_t>(n) > b_.size() - at)
      fail("a field at byte " + std::to_string(at) + " lies past the end of the file");
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b_[at + i]);
    return v;
  }

  void parse() {
    if (b_.size() < 22) fail("shorter than a zip directory");
    // The end-of-directory record, within the last 64 KiB + 22 bytes.
    std::size_t eocd = std::string::npos;
    const std::size_t lowest = b_.size() > 22 + 65535 ? b_.size() - 22 - 65535 : 0;
    for (std::size_t i = b_.size() - 22 + 1; i-- > lowest;)
      if (le(i, 4) == 0x06054b50) {
        eocd = i;
        break;
      }
    if (eocd == std::string::npos) fail("no zip end-of-directory record");
    uint64_t count = le(eocd + 10, 2), cd_size = le(eocd + 12, 4), cd_offset = le(eocd + 16, 4);
    if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
      if (eocd < 20 || le(eocd - 20, 4) != 0x07064b50) fail("a zip64 directory without locator");
      const uint64_t z = le(eocd - 20 + 8, 8);
      if (z > b_.size() || le(z, 4) != 0x06064b50) fail("a bad zip64 end-of-directory record");
      count = le(z + 32, 8);
      cd_size = le(z + 40, 8);
      cd_offset = le(z + 48, 8);
    }
    if (cd_offset > b_.size() || cd_size > b_.size() - cd_offset)
      fail("the zip directory lies outside the file");
    if (count > cd_size / 46) fail("more zip entries than the directory holds");
    std::size_t at = cd_offset;
    for (uint64_t i = 0; i < count; ++i) {
      if (le(at, 4) != 0x02014b50) fail("a bad zip directory entry");
      const uint64_t method = le(at + 10, 2);
      uint64_t csize = le(at + 20, 4), usize = le(at + 24, 4);
      const uint64_t name_len = le(at + 28, 2), extra_len = le(at + 30, 2),
                     comment_len = le(at + 32, 2);
      uint64_t local = le(at + 42, 4);
      const std::size_t name_at = at + 46;
      if (name_at > b_.size() || name_len > b_.size() - name_at)
        fail("a zip entry name past the end");
      std::string name(b_.substr(name_at, name_len));
      // zip64 sizes and offset, in that order, for the fields saturated above.
      std::size_t x = name_at + name_len;
      const std::size_t x_end = x + extra_len;
      while (x + 4 <= x_end) {
        const uint64_t id = le(x, 2), len = le(x + 2, 2);
        if (id == 0x0001) {
          std::size_t f = x + 4;
          if (usize == 0xFFFFFFFF) usize = le(f, 8), f += 8;
          if (csize == 0xFFFFFFFF) csize = le(f, 8), f += 8;
          if (local == 0xFFFFFFFF) local = le(f, 8), f += 8;
        }
        x += 4 + len;
      }
      if (method != 0 || csize != usize)
        fail("the record " + name + " is compressed (torch archives store records)");
      if (le(local, 4) != 0x04034b50) fail("a bad local header for " + name);
      const uint64_t data = local + 30 + le(local + 26, 2) + le(local + 28, 2);
      if (data > b_.size() || usize > b_.size() - data)
        fail("the record " + name + " is truncated");
      records_[name] = Record{static_cast<std::size_t>(data), static_cast<std::size_t>(usize)};
      at = x_end + comment_len;
    }
  }

  std::string_view b_;
  std::string what_;
  std::map<std::string, Record> records_;
};

// ---- pickle --------------------------------------------------------------------------------

struct Item {
  c10::IValue value;
  std::string global;  // a GLOBAL (module.name), when not a value
  int depth = 0;       // containers: 1 + the deepest child
};

constexpr std::size_t kMaxStack = 1u << 20;
constexpr std::size_t kMaxMemo = 1u << 20;

std::optional<at::ScalarType> storage_dtype(const std::string& global) {
  static const std::unordered_map<std::string, at::ScalarType> types = {
      {"torch.FloatStorage", at::kFloat},
      {"torch.DoubleStorage", at::kDouble},
      {"torch.HalfStorage", at::kHalf},
      {"torch.BFloat16Storage", at::kBFloat16},
      {"torch.LongStorage", at::kLong},
      {"torch.IntStorage", at::kInt},
      {"torch.ShortStorage", at::kShort},
      {"torch.CharStorage", at::kChar},
      {"torch.ByteStorage", at::kByte},
      {"torch.BoolStorage", at::kBool},
      {"torch.ComplexFloatStorage", at::kComplexFloat},
      {"torch.ComplexDoubleStorage", at::kComplexDouble}};
  auto it = types.find(global);
  if (it == types.end()) return std::nullopt;
  return it->second;
}

class Machine {
 public:
  Machine(const at::Tensor& file, std::string_view bytes, const Zip& zip, const std::string& prefix,
          const std::string& what)
      : file_(file), b_(bytes), zip_(zip), prefix_(prefix), what_(what) {}

  c10::IValue run(std::size_t begin, std::size_t end) {
    p_ = begin;
    end_ = end;
    while (true) {
      const unsigned char op = u8();
      switch (op) {
        case 0x80:  // PROTO
          if (u8() > 5) fail("unknown pickle protocol");
          break;
        case 0x95:  // FRAME
          take(8);
          break;
        case '.':  // STOP
          if (stack_.size() != 1 || !marks_.empty() || !stack_[0].global.empty())
            fail("the pickle does not end with one object");
          return stack_[0].value;
        case 'c': {  // GLOBAL
          std::string module = line(), name = line();
          push(Item{c10::IValue(), module + "." + name, 0});
          break;
        }
        case 'q':
          memo_put(u8());
          break;
        case 'r':
          memo_put(static_cast<uint32_t>(le(4)));
          break;
        case 0x94:
          memo_put(static_cast<uint32_t>(memo_.size()));
          break;
        case 'h':
          memo_get(u8());
          break;
        case 'j':
          memo_get(static_cast<uint32_t>(le(4)));
          break;
        case '}':
          push(Item{c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get()), "", 1});
          break;
        case ']':
          push(Item{c10::impl::GenericList(c10::AnyType::get()), "", 1});
          break;
        case ')':
          push(Item{c10::ivalue::Tuple::create({}), "", 1});
          break;
        case '(':
          if (marks_.size() >= kMaxStack) fail("too many marks");
          marks_.push_back(stack_.size());
          break;
        case 'X':
          push(str(le(4)));
          break;
        case 0x8c:
          push(str(u8()));
          break;
        case 0x8d:
          push(str(le(8)));
          break;
        case 'J':
          push(Item{c10::IValue(static_cast<int64_t>(static_cast<int32_t>(le(4)))), "", 0});
          break;
        case 'K':
          push(Item{c10::IValue(static_cast<int64_t>(u8())), "", 0});
          break;
        case 'M':
          push(Item{c10::IValue(static_cast<int64_t>(le(2))), "", 0});
          break;
        case 0x8a: {  // LONG1
          const int n = u8();
          if (n > 8) fail("an integer wider than 64 bits");
          uint64_t v = n ? le(n) : 0;
          if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);  // sign
          push(Item{c10::IValue(static_cast<int64_t>(v)), "", 0});
          break;
        }
        case 'G': {  // BINFLOAT, big-endian
          uint64_t v = 0;
          for (unsigned char c : take(8)) v = (v << 8) | c;
          double d;
          std::memcpy(&d, &v, 8);
          push(Item{c10::IValue(d), "", 0});
          break;
        }
        case 0x88:
          push(Item{c10::IValue(true), "", 0});
          break;
        case 0x89:
          push(Item{c10::IValue(false), "", 0});
          break;
        case 'N':
          push(Item{c10::IValue(), "", 0});
          break;
        case 't':
          push(tuple(pop_mark()));
          break;
        case 0x85:
          push(tuple(pop_n(1)));
          break;
        case 0x86:
          push(tuple(pop_n(2)));
          break;
        case 0x87:
          push(tuple(pop_n(3)));
          break;
        case 'a':
          append(pop_n(1));
          break;
        case 'e':
          append(pop_mark());
          break;
        case 's':
          setitems(pop_n(2));
          break;
        case 'u':
          setitems(pop_mark());
          break;
        case 'Q':
          push(persistent(pop_n(1)[0]));
          break;
        case 'R': {
          auto both = pop_n(2);
          push(reduce(both[0], both[1]));
          break;
        }
        case 'b':
          build(pop_n(1)[0]);
          break;
        default:
          fail("the pickle opcode 0x" + hex(op) +
               " is not one torch.save writes for a dict of "
               "tensors");
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw FormatError(what_ + ": not a state dict archive this library reads (" + why +
                      ", at byte " + std::to_string(p_) + " of the pickle)");
  }
  static std::string hex(unsigned v) {
    const char* d = "0123456789abcdef";
    return std::string{d[(v >> 4) & 15], d[v & 15]};
  }

  std::string_view take(uint64_t n) {
    if (n > end_ - p_) fail("truncated");
    std::string_view out(b_.data() + p_, static_cast<std::size_t>(n));
    p_ += static_cast<std::size_t>(n);
    return out;
  }
  unsigned char u8() { return static_cast<unsigned char>(take(1)[0]); }
  uint64_t le(int n) {
    auto s = take(static_cast<uint64_t>(n));
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[i]);
    return v;
  }
  std::string line() {
    std::string out;
    while (true) {
      const char c = static_cast<char>(u8());
      if (c == '\n') return out;
      if (out.size() >= 256) fail("a global name longer than 256 bytes");
      out += c;
    }
  }
  Item str(uint64_t n) { return Item{c10::IValue(std::string(take(n))), "", 0}; }

  void push(Item it) {
    if (stack_.size() >= kMaxStack)
      fail("the pickle stack grows past " + std::to_string(kMaxStack));
    stack_.push_back(std::move(it));
  }
  std::vector<Item> pop_n(std::size_t n) {
    const std::size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + n) fail("the pickle stack underflows");
    std::vector<Item> out(std::make_move_iterator(stack_.end() - static_cast<std::ptrdiff_t>(n)),
                          std::make_move_iterator(stack_.end()));
    stack_.resize(stack_.size() - n);
    return out;
  }
  std::vector<Item> pop_mark() {
    if (marks_.empty()) fail("no mark to pop to");
    const std::size_t at = marks_.back();
    marks_.pop_back();
    std::vector<Item> out(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(at)),
                          std::make_move_iterator(stack_.end()));
    stack_.resize(at);
    return out;
  }
  Item& top() {
    const std::size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= floor) fail("the pickle stack underflows");
    return stack_.back();
  }

  void memo_put(uint32_t i) {
    if (memo_.size() >= kMaxMemo && !memo_.count(i)) fail("too many memo entries");
    memo_[i] = top();
  }
  void memo_get(uint32_t i) {
    auto it = memo_.find(i);
    if (it == memo_.end()) fail("a memo entry that was never stored");
    push(it->second);
  }

  // A value placed into a container: not a GLOBAL, within the depth limit;
  // a container is sealed (it may not change again).
  const c10::IValue& child(const Item& it, int& depth) {
    if (!it.global.empty()) fail("a class (" + it.global + ") used as a value");
    depth = std::max(depth, it.depth + 1);
    if (depth > kMaxNestingDepth)
      fail("objects nested deeper than " + std::to_string(kMaxNestingDepth) + " levels");
    // (Held, so that its address is not reused by a new container.)
    if (it.value.isGenericDict() || it.value.isList())
      sealed_.emplace(it.value.internalToPointer(), it.value);
    return it.value;
  }
  void check_open(const Item& target) {
    if (sealed_.count(target.value.internalToPointer()))
      fail("a container changed after it was placed in another one");
  }

  Item tuple(const std::vector<Item>& items) {
    Item out{c10::IValue(), "", 1};
    std::vector<c10::IValue> elems;
    elems.reserve(items.size());
    // A class in a tuple (the storage type of a persistent id) by its name.
    for (const auto& it : items)
      elems.push_back(it.global.empty() ? child(it, out.depth) : c10::IValue(it.global));
    out.value = c10::ivalue::Tuple::create(std::move(elems));
    return out;
  }
  void append(const std::vector<Item>& items) {
    Item& l = top();
    if (!l.value.isList()) fail("APPEND to something that is not a list");
    check_open(l);
    auto list = l.value.toList();
    for (const auto& it : items) {
      if (it.value.isList() && it.value.internalToPointer() == l.value.internalToPointer())
        fail("a list inside itself");
      list.push_back(child(it, l.depth));
    }
  }
  void setitems(const std::vector<Item>& items) {
    if (items.size() % 2) fail("SETITEMS with an odd number of values");
    Item& d = top();
    if (!d.value.isGenericDict()) fail("SETITEM on something that is not a dict");
    check_open(d);
    auto dict = d.value.toGenericDict();
    for (std::size_t i = 0; i < items.size(); i += 2) {
      const auto& k = items[i].value;
      if (!items[i].global.empty() || !(k.isString() || k.isInt()))
        fail("a dict key that is not a string or an integer");
      if (items[i + 1].value.isGenericDict() &&
          items[i + 1].value.internalToPointer() == d.value.internalToPointer())
        fail("a dict inside itself");
      dict.insert_or_assign(k, child(items[i + 1], d.depth));
    }
  }

  // ('storage', <storage class>, key, location, numel) -> the storage's
  // elements, copied out of the archive (one tensor per key).
  Item persistent(const Item& pid) {
    if (!pid.value.isTuple()) fail("a persistent id that is not a tuple");
    const auto& e = pid.value.toTupleRef().elements();
    if (e.size() != 5 || !e[0].isString() || e[0].toStringRef() != "storage" || !e[2].isString() ||
        !e[4].isInt())
      fail("a persistent id that is not ('storage', type, key, location, numel)");
    // torch.storage.UntypedStorage (the dtypes without a typed storage class,
    // _rebuild_tensor_v3): numel counts bytes, the dtype comes with the tensor.
    const std::string type = e[1].isString() ? e[1].toStringRef() : std::string();
    auto dtype = type == "torch.storage.UntypedStorage" ? std::optional<at::ScalarType>(at::kByte)
                                                        : storage_dtype(type);
    if (!dtype) fail("an unknown storage type");
    const std::string& key = e[2].toStringRef();
    const int64_t numel = e[4].toInt();
    if (numel < 0) fail("a storage of negative size");
    auto cached = storages_.find(key);
    if (cached != storages_.end()) {
      if (cached->second.scalar_type() != *dtype || cached->second.numel() != numel)
        fail("the storage '" + key + "' used with two types or sizes");
      return Item{cached->second, "", 0};
    }
    auto rec = zip_.records().find(prefix_ + "data/" + key);
    if (rec == zip_.records().end()) fail("the storage '" + key + "' has no record in the archive");
    const auto item = static_cast<uint64_t>(c10::elementSize(*dtype));
    if (static_cast<uint64_t>(numel) > rec->second.size / item)
      fail("the storage '" + key + "' holds " + std::to_string(rec->second.size) +
           " bytes, fewer than " + std::to_string(numel) + " elements");
    // A view of the file's bytes (no copy) when the record is aligned for
    // the dtype: torch.save aligns every record to 64 bytes.
    const auto offset = static_cast<int64_t>(rec->second.offset);
    at::Tensor t;
    if (numel == 0)
      t = at::empty({0}, at::TensorOptions().dtype(*dtype));
    else if (offset % static_cast<int64_t>(item) == 0)
      t = file_.narrow(0, offset, numel * static_cast<int64_t>(item)).view(*dtype);
    else
      t = file_.narrow(0, offset, numel * static_cast<int64_t>(item)).clone().view(*dtype);
    storages_.emplace(key, t);
    return Item{t, "", 0};
  }

  std::vector<int64_t> ints(const c10::IValue& v, const char* what) {
    std::vector<int64_t> out;
    if (!v.isTuple()) fail(std::string(what) + " is not a tuple");
    for (const auto& e : v.toTupleRef().elements()) {
      if (!e.isInt() || e.toInt() < 0) fail(std::string(what) + " holds a non-negative integer");
      out.push_back(e.toInt());
    }
    return out;
  }

  // storage[offset] viewed with size and stride, every element inside it.
  Item rebuild_tensor(const std::vector<c10::IValue>& a) {
    if (a.size() < 4 || !a[0].isTensor() || !a[1].isInt())
      fail("_rebuild_tensor with unexpected arguments");
    const at::Tensor& storage = a[0].toTensor();
    const int64_t offset = a[1].toInt();
    const auto size = ints(a[2], "a tensor size"), stride = ints(a[3], "a tensor stride");
    if (size.size() != stride.size()) fail("a tensor size and stride of different lengths");
    if (offset < 0) fail("a negative storage offset");
    int64_t last = offset, count = 1;
    for (std::size_t i = 0; i < size.size(); ++i) {
      if (size[i] == 0) count = 0;
      if (size[i] > 0 && stride[i] > 0 &&
          (size[i] - 1 > (std::numeric_limits<int64_t>::max() - last) / stride[i]))
        fail("a tensor extent that overflows int64");
      if (size[i] > 0) last += (size[i] - 1) * stride[i];
    }
    if (count != 0 && last >= storage.numel())
      fail("a tensor reaching element " + std::to_string(last) + " of a storage of " +
           std::to_string(storage.numel()));
    if (a.size() >= 5 && !a[4].isBool()) fail("requires_grad is not a bool");
    // as_strided's offset counts from the start of the underlying buffer,
    // where this storage (a view of the file) starts at its own offset.
    at::Tensor t = count == 0 ? at::empty(size, storage.options())
                              : storage.as_strided(size, stride, storage.storage_offset() + offset);
    return Item{t, "", 0};
  }

  Item reduce(const Item& callable, const Item& args) {
    const std::string& f = callable.global;
    if (f.empty()) fail("REDUCE of something that is not a class or function");
    if (!args.value.isTuple()) fail("REDUCE arguments are not a tuple");
    const auto& a = args.value.toTupleRef().elements();
    if (f == "torch._utils._rebuild_tensor_v2" || f == "torch._utils._rebuild_tensor")
      return rebuild_tensor(std::vector<c10::IValue>(a.begin(), a.end()));
    if (f == "torch._utils._rebuild_tensor_v3") {
      // (untyped storage, offset, size, stride, requires_grad, hooks, dtype):
      // the storage's bytes viewed as dtype, then as v2.
      if (a.size() != 7 || !a[0].isTensor() || !a[6].isString())
        fail("_rebuild_tensor_v3 with unexpected arguments");
      const std::string& name = a[6].toStringRef();
      at::ScalarType dtype;
      try {
        dtype = dtype_from_string(name);
      } catch (const FormatError&) {
        fail("_rebuild_tensor_v3 of an unknown dtype " + name);
      }
      const at::Tensor bytes = a[0].toTensor();
      const auto item = static_cast<int64_t>(c10::elementSize(dtype));
      if (bytes.numel() % item != 0)
        fail("a storage of " + std::to_string(bytes.numel()) + " bytes for elements of " +
             std::to_string(item));
      std::vector<c10::IValue> v2(a.begin(), a.begin() + 6);
      // A byte view of the file is viewed as dtype in place when aligned.
      v2[0] = bytes.numel() == 0                   ? at::empty({0}, bytes.options().dtype(dtype))
              : bytes.storage_offset() % item == 0 ? bytes.view(dtype)
                                                   : bytes.clone().view(dtype);
      return rebuild_tensor(v2);
    }
    if (f == "torch._utils._rebuild_parameter") {
      // nn.Parameter(tensor, requires_grad, hooks): a state dict saved with
      // keep_vars; the values are what is read.
      if (a.size() != 3 || !a[0].isTensor() || !a[1].isBool())
        fail("_rebuild_parameter with unexpected arguments");
      return Item{a[0], "", 0};
    }
    if (f == "collections.OrderedDict") {
      if (!a.empty()) fail("OrderedDict built from arguments");
      return Item{c10::impl::GenericDict(c10::AnyType::get(), c10::AnyType::get()), "", 1};
    }
    if (f == "torch.jit._pickle.restore_type_tag") {
      if (a.size() != 2) fail("restore_type_tag with unexpected arguments");
      return Item{a[0], "", args.depth - 1};
    }
    if (f.rfind("torch.jit._pickle.build_", 0) == 0) {
      if (a.size() != 1 || !a[0].isList()) fail(f + " of something that is not a list");
      return Item{a[0], "", args.depth - 1};
    }
    if (f == "torch.Size") {
      if (a.size() != 1 || !(a[0].isTuple() || a[0].isList())) fail("torch.Size of a non-sequence");
      std::vector<c10::IValue> dims;
      if (a[0].isTuple())
        for (const auto& d : a[0].toTupleRef().elements()) dims.push_back(d);
      else
        for (const auto& d : a[0].toListRef()) dims.push_back(d);
      for (const auto& d : dims)
        if (!d.isInt()) fail("torch.Size of non-integers");
      return Item{c10::ivalue::Tuple::create(std::move(dims)), "", 1};
    }
    if (f == "torch.device") {
      if (a.empty() || a.size() > 2 || !a[0].isString() || (a.size() == 2 && !a[1].isInt()))
        fail("torch.device with unexpected arguments");
      std::string s = a[0].toStringRef();
      if (a.size() == 2) s += ":" + std::to_string(a[1].toInt());
      try {
        return Item{c10::IValue(c10::Device(s)), "", 0};
      } catch (const c10::Error&) {
        fail("an invalid device '" + s + "'");
      }
    }
    fail("the global " + f + " is not one torch.save writes for a dict of tensors");
  }

  // An OrderedDict's attributes (Python's state_dict()._metadata): kept as
  // the "_metadata" item, the layout state_dict_from_ivalue reads.
  void build(const Item& state) {
    Item& target = top();
    if (!target.value.isGenericDict()) fail("BUILD of something that is not a dict");
    check_open(target);
    if (state.value.isNone()) return;
    if (!state.value.isGenericDict()) fail("BUILD with a state that is not a dict");
    auto dict = target.value.toGenericDict();
    for (const auto& e : state.value.toGenericDict())
      if (e.key().isString() && e.key().toStringRef() == "_metadata" && !dict.contains(e.key())) {
        int depth = target.depth;
        child(Item{e.value(), "", state.depth - 1}, depth);
        target.depth = depth;
        dict.insert(e.key(), e.value());
      }
  }

  const at::Tensor& file_;
  std::string_view b_;
  const Zip& zip_;
  std::string prefix_;
  std::string what_;
  std::size_t p_ = 0, end_ = 0;
  std::vector<Item> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<uint32_t, Item> memo_;
  std::unordered_map<const void*, c10::IValue> sealed_;
  std::map<std::string, at::Tensor> storages_;
};

}  // namespace

c10::IValue read_torch_archive(const at::Tensor& file, const std::string& what) {
  const std::string_view bytes(static_cast<const char*>(file.data_ptr()),
                               static_cast<std::size_t>(file.numel()));
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x80)
    throw FormatError(what +
                      ": a legacy (non-zip) torch.save file, written by PyTorch before 1.6 or "
                      "with _use_new_zipfile_serialization=False; save it again with a newer "
                      "PyTorch");
  Zip zip(bytes, what);
  const Record* pkl = nullptr;
  std::string prefix;
  for (const auto& [name, rec] : zip.records()) {
    const std::string suffix = "data.pkl";
    if (name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        name.find('/') == name.size() - suffix.size() - 1) {
      if (pkl) zip.fail("two data.pkl records");
      pkl = &rec;
      prefix = name.substr(0, name.size() - suffix.size());
    }
  }
  if (!pkl) zip.fail("no <name>/data.pkl record");
  Machine m(file, bytes, zip, prefix, what);
  return m.run(pkl->offset, pkl->offset + pkl->size);
}

}  // namespace tensordict::detail
