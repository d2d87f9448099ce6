// torch.save's layout for a state dict (see pickle_writer.h): pickle protocol
// 2, as Python writes it, in the zip container LibTorch's PyTorchStreamWriter
// writes for torch.save (records aligned to 64 bytes).
#include "formats/pickle_writer.h"

#include <tensordict/dtype.h>
#include <tensordict/errors.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <string>

namespace tensordict::detail {

namespace {

// The typed storage class torch.save names for a dtype (_rebuild_tensor_v2);
// the dtypes without one go through UntypedStorage (_rebuild_tensor_v3).
const char* legacy_storage(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "FloatStorage";
    case at::kDouble:
      return "DoubleStorage";
    case at::kHalf:
      return "HalfStorage";
    case at::kBFloat16:
      return "BFloat16Storage";
    case at::kLong:
      return "LongStorage";
    case at::kInt:
      return "IntStorage";
    case at::kShort:
      return "ShortStorage";
    case at::kChar:
      return "CharStorage";
    case at::kByte:
      return "ByteStorage";
    case at::kBool:
      return "BoolStorage";
    case at::kComplexFloat:
      return "ComplexFloatStorage";
    case at::kComplexDouble:
      return "ComplexDoubleStorage";
    default:
      return nullptr;
  }
}

class Pickler {
 public:
  Pickler() { out_ += "\x80\x02"; }  // PROTO 2

  void global(const std::string& module, const std::string& name) {
    out_ += 'c';
    out_ += module;
    out_ += '\n';
    out_ += name;
    out_ += '\n';
  }
  void mark() { out_ += '('; }
  void tuple() { out_ += 't'; }
  void empty_tuple() { out_ += ')'; }
  void reduce() { out_ += 'R'; }
  void none() { out_ += 'N'; }
  void boolean(bool b) { out_ += b ? '\x88' : '\x89'; }

  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      out_ += 'K';
      out_ += static_cast<char>(v);
    } else if (v >= 0 && v < 65536) {
      out_ += 'M';
      out_ += static_cast<char>(v & 0xff);
      out_ += static_cast<char>(v >> 8);
    } else if (v >= std::numeric_limits<int32_t>::min() &&
               v <= std::numeric_limits<int32_t>::max()) {
      out_ += 'J';
      append_le(static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
    } else {  // LONG1: little-endian two's complement, 8 bytes
      out_ += '\x8a';
      out_ += static_cast<char>(8);
      append_le(static_cast<uint64_t>(v), 8);
    }
  }
  void unsigned_integer(uint64_t v) {
    if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      integer(static_cast<int64_t>(v));
      return;
    }
    out_ += '\x8a';  // 9 bytes: the value, then a zero sign byte
    out_ += static_cast<char>(9);
    append_le(v, 8);
    out_ += '\0';
  }
  void real(double d) {
    out_ += 'G';  // BINFLOAT, big-endian
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    for (int i = 7; i >= 0; --i) out_ += static_cast<char>((bits >> (8 * i)) & 0xff);
  }
  void string(const std::string& s) {
    out_ += 'X';
    append_le(s.size(), 4);
    out_ += s;
  }

  void ordered_dict() {
    global("collections", "OrderedDict");
    empty_tuple();
    reduce();
  }
  void empty_dict() { out_ += '}'; }
  void empty_list() { out_ += ']'; }
  void setitems() { out_ += 'u'; }
  void appends() { out_ += 'e'; }
  void build() { out_ += 'b'; }
  void binpersid() { out_ += 'Q'; }
  void stop() { out_ += '.'; }

  const std::string& bytes() const { return out_; }

 private:
  void append_le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  std::string out_;
};

class StateDictPickler {
 public:
  void dump(const StateDict& sd) {
    ordered_dict(sd, "");
    p_.stop();
  }
  const std::string& pickle() const { return p_.bytes(); }
  const std::vector<at::Tensor>& storages() const { return storages_; }

 private:
  void ordered_dict(const StateDict& sd, const std::string& where) {
    p_.ordered_dict();
    if (!sd.empty()) {
      p_.mark();
      for (const auto& [key, item] : sd.items()) {
        p_.string(key);
        value(item, where + key);
      }
      p_.setitems();
    }
    if (!sd.metadata().empty()) {
      // The `_metadata` attribute, set by BUILD as Python's OrderedDict does.
      p_.empty_dict();
      p_.mark();
      p_.string("_metadata");
      p_.ordered_dict();
      p_.mark();
      for (const auto& [prefix, m] : sd.metadata()) {
        p_.string(prefix);
        metadata(m, where + "_metadata[" + prefix + "]");
      }
      p_.setitems();
      p_.setitems();
      p_.build();
    }
  }

  void metadata(const StateDictMetadata& m, const std::string& where) {
    p_.empty_dict();
    p_.mark();
    p_.string("batch_size");
    size(m.batch_size);
    p_.string("device");
    device(m.device);
    if (!m.type.empty()) {
      p_.string("_type");
      p_.string(m.type);
    }
    if (!m.non_tensor.is_null()) {
      p_.string("_non_tensor");
      json(m.non_tensor, where);
    }
    p_.setitems();
  }

  void value(const StateDictItem& item, const std::string& where) {
    switch (item.kind()) {
      case StateDictItem::Kind::Tensor:
        return tensor(item.tensor(), where);
      case StateDictItem::Kind::Nested:
        return ordered_dict(item.nested(), where + ".");
      case StateDictItem::Kind::BatchSize:
        return size(item.batch_size());
      case StateDictItem::Kind::Device:
        return device(item.device());
      case StateDictItem::Kind::Value:
        return json(item.value(), where);
    }
  }

  void size(const std::vector<int64_t>& dims) {
    p_.global("torch", "Size");
    p_.mark();
    int_tuple(dims);
    p_.tuple();
    p_.reduce();
  }

  void int_tuple(c10::IntArrayRef v) {
    p_.mark();
    for (int64_t d : v) p_.integer(d);
    p_.tuple();
  }

  void device(const std::optional<at::Device>& d) {
    if (!d) return p_.none();
    p_.global("torch", "device");
    p_.mark();
    p_.string(d->str());
    p_.tuple();
    p_.reduce();
  }

  void json(const nlohmann::json& j, const std::string& where) {
    switch (j.type()) {
      case nlohmann::json::value_t::null:
        return p_.none();
      case nlohmann::json::value_t::boolean:
        return p_.boolean(j.get<bool>());
      case nlohmann::json::value_t::number_integer:
        return p_.integer(j.get<int64_t>());
      case nlohmann::json::value_t::number_unsigned:
        return p_.unsigned_integer(j.get<uint64_t>());
      case nlohmann::json::value_t::number_float:
        return p_.real(j.get<double>());
      case nlohmann::json::value_t::string:
        return p_.string(j.get<std::string>());
      case nlohmann::json::value_t::array:
        p_.empty_list();
        if (!j.empty()) {
          p_.mark();
          for (const auto& e : j) json(e, where);
          p_.appends();
        }
        return;
      case nlohmann::json::value_t::object:
        p_.empty_dict();
        if (!j.empty()) {
          p_.mark();
          for (const auto& [k, v] : j.items()) {
            p_.string(k);
            json(v, where);
          }
          p_.setitems();
        }
        return;
      default:
        throw ValueError("save_state_dict: the value of '" + where + "' (" + j.dump() +
                         ") has no pickle form");
    }
  }

  // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)
  // over a typed storage, or _rebuild_tensor_v3(..., dtype) over an untyped
  // one (bytes) for the dtypes without a typed storage class.
  void tensor(const at::Tensor& t, const std::string& where) {
    if (!t.device().is_cpu())
      throw DeviceError("save_state_dict: '" + where + "' is on " + t.device().str() +
                        "; move the state dict to the CPU first");
    const at::Tensor c = t.detach().contiguous();
    const std::string key = std::to_string(storages_.size());
    storages_.push_back(c);
    const char* typed = legacy_storage(c.scalar_type());
    p_.global("torch._utils", typed ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3");
    p_.mark();
    p_.mark();  // the persistent id
    p_.string("storage");
    if (typed)
      p_.global("torch", typed);
    else
      p_.global("torch.storage", "UntypedStorage");
    p_.string(key);
    p_.string("cpu");
    p_.integer(typed ? c.numel() : static_cast<int64_t>(c.nbytes()));
    p_.tuple();
    p_.binpersid();
    p_.integer(0);
    int_tuple(c.sizes());
    int_tuple(c.strides());
    p_.boolean(false);
    p_.ordered_dict();
    if (!typed) p_.global("torch", dtype_to_string(c.scalar_type()).substr(6));  // "torch." off
    p_.tuple();
    p_.reduce();
  }

  Pickler p_;
  std::vector<at::Tensor> storages_;
};

}  // namespace

void torch_save_to(const StateDict& state_dict,
                   const std::function<void(const char*, std::size_t)>& sink) {
  StateDictPickler pickler;
  pickler.dump(state_dict);
  // The first failure of `sink` is kept and thrown once the archive is done:
  // a short write would make PyTorchStreamWriter throw, and then finish the
  // archive from its destructor through the same failing function, which
  // throws again there (std::terminate).
  std::exception_ptr failed;
  try {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
      if (!failed) {
        try {
          sink(static_cast<const char*>(data), n);
        } catch (...) {
          failed = std::current_exception();
        }
      }
      return n;
    });
    writer.writeRecord("data.pkl", pickler.pickle().data(), pickler.pickle().size());
    writer.writeRecord("byteorder", "little", 6);
    const auto& storages = pickler.storages();
    for (std::size_t i = 0; i < storages.size() && !failed; ++i)
      writer.writeRecord("data/" + std::to_string(i), storages[i].data_ptr(), storages[i].nbytes());
    writer.writeEndOfFile();
  } catch (const c10::Error& e) {
    if (!failed) throw StorageError(std::string("save_state_dict: ") + e.what_without_backtrace());
  }
  if (failed) std::rethrow_exception(failed);
}

}  // namespace tensordict::detail
