// Memmap directories in Python tensordict's layout (docs/formats.md, "Memory-mapped directories"):
// writing (memmap, memmap_, memmap_like, share_memory_) and loading.
#include "core/internal.h"
#include "core/parallel.h"
#include "io/json_io.h"
#include "storage/lazy_stack/lazy_ops.h"
#include "storage/memmap/mapped_file.h"

#include <tensordict/detail/progress.h>
#include <tensordict/storage/memmap.h>
#include <tensordict/storage/replaced_saves.h>
#include <tensordict/storage/shared.h>

#include <ATen/ATen.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace tensordict {
namespace detail {

// ---- key encoding (docs/formats.md, "Key encoding") -----------------------------

std::string encode_key_for_filesystem(std::string_view key) {
  if (key.empty()) return "%";
  if (key == ".") return "%2E";
  if (key == "..") return "%2E%2E";
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (unsigned char c : key) {
    bool encode = c < 0x20 || c == 0x7F || c == ' ' || c == '/' || c == '<' || c == '>' ||
                  c == ':' || c == '"' || c == '|' || c == '?' || c == '*' || c == '\\' || c == '%';
    if (encode) {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 0xF];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string decode_key_from_filesystem(std::string_view name) {
  if (name == "%") return "";
  auto hexval = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '%' && i + 2 < name.size() + 0 && i + 2 <= name.size() - 1 + 0 &&
        hexval(name[i + 1]) >= 0 && hexval(name[i + 2]) >= 0) {
      out += static_cast<char>(hexval(name[i + 1]) * 16 + hexval(name[i + 2]));
      i += 2;
    } else {
      out += name[i];
    }
  }
  return out;
}

namespace {
// True when `file` is a regular file holding exactly `text`.
bool file_holds(const std::string& file, const std::string& text) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<std::size_t>(st.st_size) != text.size())
    return false;
  std::ifstream in(file, std::ios::binary);
  std::string bytes(text.size(), '\0');
  return in.read(bytes.data(), static_cast<std::streamsize>(bytes.size())) && bytes == text;
}
}  // namespace

// Written as a temporary file then renamed, so a reader never sees half a file.
void write_json_atomic(const std::string& file, const std::string& text) {
  // A file rewritten with the same text (a non-tensor entry written in place
  // with an unchanged value, a state file saved again) is left alone: that
  // spares a new inode (on ext4 without a journal, every create scans the
  // recently deleted inodes).
  if (file_holds(file, text)) return;
  std::string tmp = file + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw StorageError("cannot create " + tmp);
    out << text;
    if (!out) throw StorageError("cannot write " + tmp);
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec) throw StorageError("cannot rename " + tmp + " to " + file + ": " + ec.message());
}

namespace {

// ---- JSON ---------------------------------------------------------------------------

ojson read_json(const fs::path& file) {
  const std::string text = read_regular_file(file.string(), "the metadata file");
  ojson j;
  try {
    j = parse_python_json(text, file.string());
  } catch (const nlohmann::json::exception& e) {
    throw FormatError("malformed JSON in " + file.string() + ": " + e.what());
  }
  if (!j.is_object()) throw FormatError("malformed " + file.string() + ": not a JSON object");
  return j;
}

const char* kTensorDictType = "<class 'tensordict._td.TensorDict'>";
const char* kNonTensorDataType = "<class 'tensordict.tensorclass.NonTensorData'>";
const char* kNonTensorStackType = "<class 'tensordict.tensorclass.NonTensorStack'>";

// The meta.json of a non-tensor entry's directory, in Python's layout and key
// order: NonTensorData {"_type","data","_metadata","_is_non_tensor"};
// NonTensorStack {"_type","stack_dim","device","data"} with the nested list
// (Python rebuilds it with stack_dim 0 whatever is stored, so 0 is written).
ojson non_tensor_meta(const Value& v) {
  ojson nt = ojson::object();
  if (v.is_non_tensor()) {
    nt["_type"] = kNonTensorDataType;
    nt["data"] = ojson::parse(v.non_tensor().data().dump());
    nt["_metadata"] = nullptr;
    nt["_is_non_tensor"] = true;
    return nt;
  }
  const NonTensorStack& s = v.non_tensor_stack();
  nt["_type"] = kNonTensorStackType;
  nt["stack_dim"] = 0;
  if (s.device())
    nt["device"] = s.device()->str();
  else
    nt["device"] = nullptr;
  nt["data"] = ojson::parse(s.tolist().dump());
  return nt;
}

// The `_tensordict/meta.json` of a NonTensorData directory: the batch size,
// in the layout of Python 0.3.2, whose loader requires the file (a directory
// without it makes 0.3.2 refuse the whole save); 0.5 and later read it when
// present and write nothing there themselves.
ojson non_tensor_batch_meta(at::IntArrayRef batch) {
  ojson m = ojson::object();
  m["shape"] = batch.vec();
  m["device"] = "cpu";
  m["_type"] = kTensorDictType;
  return m;
}

// ---- writing ----------------------------------------------------------------------------

struct LeafJob {
  std::string path;
  at::Tensor source;
  TensorDict out;   // where the mapped tensor goes
  std::string key;  // in `out`
  NestedKey full_key;
  bool reuse = false;  // already mapped at this path
};

void check_writable_key(const std::string& k, const NestedKey& full, bool is_dir) {
  if (k == "shape" || k == "device" || k == "_type")
    throw KeyError("key " + full.repr() +
                   " cannot be saved: 'shape', 'device' and '_type' are reserved "
                   "names in meta.json (Python tensordict would lose it)");
  if (is_dir && k == "meta.json")
    throw KeyError("key " + full.repr() +
                   " cannot be saved: a nested entry named 'meta.json' collides "
                   "with the metadata file");
}

const char* kLazyStackType = "<class 'tensordict._lazy.LazyStackedTensorDict'>";

TensorDictBase plan_node(const TensorDictBase& td, const fs::path& dir, bool copy_data,
                         const MemmapOptions& opt, std::vector<LeafJob>& jobs,
                         std::vector<std::pair<fs::path, ojson>>& metas, const NestedKey& path);

void plan_dir(const TensorDictBase& td, const fs::path& dir, bool copy_data,
              const MemmapOptions& opt, std::vector<LeafJob>& jobs,
              std::vector<std::pair<fs::path, ojson>>& metas, TensorDict& out,
              const NestedKey& path) {
  ojson meta = ojson::object();
  for (const auto& [k, v] : td.items()) {
    const std::string& name = k.front();
    NestedKey full = path.empty() ? k : path + k;
    check_writable_key(name, full, !v.is_tensor());
    const std::string fname = encode_key_for_filesystem(name);
    switch (v.kind()) {
      case EntryKind::Tensor: {
        const at::Tensor& t = v.tensor();
        // Refused before anything is written (a file holds dense bytes).
        if (t.layout() != at::kStrided)
          throw TypeError("memmap: the leaf " + full.repr() + " is a " + c10::str(t.layout()) +
                          " tensor; only dense (strided) tensors can be saved (call "
                          "to_dense() first)");
        if (copy_data && t.device().type() == at::kMeta)
          throw DeviceError("memmap: the leaf " + full.repr() +
                            " is on the meta device and holds no data to save (memmap_like "
                            "saves its shape)");
        ojson entry = ojson::object();
        entry["device"] = t.device().str();
        entry["shape"] = t.sizes().vec();
        entry["dtype"] = dtype_to_string(t.scalar_type());
        entry["is_nested"] = false;
        meta[name] = entry;
        if (t.numel() == 0) {
          out.node().write(name, at::empty(t.sizes(), t.options().device(at::kCPU)));
          break;
        }
        fs::path file = dir / (fname + ".memmap");
        LeafJob job{file.string(), t, out, name, full};
        job.reuse = copy_data && is_whole_mapping(t) &&
                    fs::weakly_canonical(*mapped_filename(t)) == fs::weakly_canonical(file);
        if (!opt.existsok && !job.reuse && fs::exists(file))
          throw StorageError("the file " + file.string() + " for key " + full.repr() +
                             " already exists (existsok=false)");
        jobs.push_back(std::move(job));
        // Holds the key's place (insertion order) until the mapped tensor
        // replaces it.
        out.node().write(name, t);
        break;
      }
      case EntryKind::TensorDict: {
        const auto& sub = v.tensordict();
        meta[name] = ojson{{"type", as_lazy_stack(sub) ? "LazyStackedTensorDict" : "TensorDict"}};
        out.node().write(name, plan_node(sub, dir / fname, copy_data, opt, jobs, metas, full));
        break;
      }
      case EntryKind::NonTensor:
      case EntryKind::NonTensorStack: {
        meta[name] = ojson{{"type", v.is_non_tensor() ? "NonTensorData" : "NonTensorStack"}};
        metas.emplace_back(dir / fname / "meta.json", non_tensor_meta(v));
        if (v.is_non_tensor())
          metas.emplace_back(dir / fname / "_tensordict" / "meta.json",
                             non_tensor_batch_meta(v.non_tensor().batch_size()));
        Value d = v;
        if (d.is_non_tensor())
          d.non_tensor().set_device(at::Device(at::kCPU));
        else
          d.non_tensor_stack().set_device(at::Device(at::kCPU));
        out.node().write(name, std::move(d));
        break;
      }
    }
  }
  meta["shape"] = td.batch_size().vec();
  meta["device"] = "cpu";
  meta["_type"] = kTensorDictType;
  metas.emplace_back(dir / "meta.json", std::move(meta));
}

// A tensordict or a lazy stack saved at `dir`; returns the handle that the
// mapped leaves will fill.
TensorDictBase plan_node(const TensorDictBase& td, const fs::path& dir, bool copy_data,
                         const MemmapOptions& opt, std::vector<LeafJob>& jobs,
                         std::vector<std::pair<fs::path, ojson>>& metas, const NestedKey& path) {
  // What load_memmap would refuse is not written.
  if (static_cast<int>(path.size()) >= kMaxNestingDepth)
    throw ValueError("memmap: the tensordict at " + path.repr() + " is nested deeper than " +
                     std::to_string(kMaxNestingDepth) +
                     " levels (the limit of this library, docs/errors.md)");
  if (const auto* ls = as_lazy_stack(td)) {
    // Python's layout: meta.json with the stack dim, one directory per member.
    std::vector<TensorDictBase> members;
    for (std::size_t i = 0; i < ls->members().size(); ++i)
      members.push_back(
          plan_node(ls->members()[i], dir / std::to_string(i), copy_data, opt, jobs, metas, path));
    ojson meta = ojson::object();
    meta["_type"] = kLazyStackType;
    meta["stack_dim"] = ls->stack_dim();
    metas.emplace_back(dir / "meta.json", std::move(meta));
    TensorDictBase out = make_lazy(std::move(members), ls->stack_dim(), ls->member_batch());
    detail::mutable_file_backing(out.node()).saved_path = fs::absolute(dir).string();
    return out;
  }
  TensorDict out = make_tensordict(td.batch_size().vec(), at::Device(at::kCPU));
  // Each nested level knows its own directory, as after load_memmap.
  detail::mutable_file_backing(out.node()).saved_path = fs::absolute(dir).string();
  plan_dir(td, dir, copy_data, opt, jobs, metas, out, path);
  return out;
}

// The save's threads: `requested`, or up to 8 when 0.
std::size_t thread_count(int requested) {
  return requested > 0 ? static_cast<std::size_t>(requested)
                       : std::min(8u, std::max(1u, std::thread::hardware_concurrency()));
}

// `p` (a path under `root`, the final directory) inside the staging directory.
fs::path staged(const fs::path& p, const fs::path& root, const fs::path& stage) {
  return stage / p.lexically_relative(root);
}

// Writes every leaf file into the staging directory. A leaf already mapped
// from its final file (memmap_ again at the same prefix) is hard-linked, so
// its bytes are not copied and its mappings stay those of the saved file.
// Durable: each file is fsync()ed (a linked one too: writes through its
// mappings may still be in the page cache).
void write_jobs(std::vector<LeafJob>& jobs, bool copy_data, const MemmapOptions& opt,
                const fs::path& root, const fs::path& stage, Progress& progress) {
  detail::parallel_for(jobs.size(), thread_count(opt.num_threads), [&](std::size_t i) {
    auto& j = jobs[i];
    const std::string to = staged(j.path, root, stage).string();
    if (j.reuse && ::link(j.path.c_str(), to.c_str()) == 0) {
      if (opt.durable) fsync_path(to, "memmap");
      progress.advance();
      return;
    }
    j.reuse = false;  // written anew: mapped from the new file below
    write_file(to, j.source, copy_data, " for key " + j.full_key.repr(), opt.durable);
    progress.advance();
  });
}

// Maps the installed files; each job's result replaces its placeholder in `out`.
void map_jobs(std::vector<LeafJob>& jobs) {
  for (auto& j : jobs) {
    at::Tensor t = j.reuse ? j.source
                           : map_file(j.path, j.source.scalar_type(), j.source.sizes(), true,
                                      " for key " + j.full_key.repr());
    j.out.node().write(j.key, t);
  }
}

}  // namespace

// The durable directory replacement below is shared with the replay buffer
// checkpoints (declared in storage/memmap/mapped_file.h).

// A name beside `root` that no other save uses.
fs::path sibling(const fs::path& root, const char* what) {
  static std::atomic<uint64_t> counter{0};
  return root.parent_path() / ("." + root.filename().string() + "." + what + "-" +
                               std::to_string(::getpid()) + "-" + std::to_string(counter++));
}

static std::string errno_message() { return std::strerror(errno); }

// Puts the complete staging directory at `root` in one step, so a reader
// sees the old save or the new one, never a mix: rename(2) when `root` is
// missing or empty, else an atomic exchange (renameat2 RENAME_EXCHANGE) and
// the old save is deleted (its space freed in the background). Filesystems without the exchange get
// two renames (the old save is put back if the second fails).
void install_dir(const fs::path& stage, const fs::path& root) {
  if (::rename(stage.c_str(), root.c_str()) == 0) return;
  if (errno != ENOTEMPTY && errno != EEXIST)
    throw StorageError("memmap: cannot move " + stage.string() + " to " + root.string() + ": " +
                       errno_message());
  fs::path old;
  if (::renameat2(AT_FDCWD, stage.c_str(), AT_FDCWD, root.c_str(), RENAME_EXCHANGE) == 0) {
    old = stage;
  } else {
    if (errno != EINVAL && errno != ENOSYS)
      throw StorageError("memmap: cannot exchange " + stage.string() + " with " + root.string() +
                         ": " + errno_message());
    old = sibling(root, "tdold");
    if (::rename(root.c_str(), old.c_str()) != 0)
      throw StorageError("memmap: cannot move the earlier save " + root.string() +
                         " aside: " + errno_message());
    if (::rename(stage.c_str(), root.c_str()) != 0) {
      const std::string why = errno_message();
      ::rename(old.c_str(), root.c_str());
      throw StorageError("memmap: cannot move " + stage.string() + " to " + root.string() + ": " +
                         why);
    }
  }
  // The save is complete; the old one's space is freed off the caller's thread.
  remove_replaced_save(old);
}

fs::path make_stage(const fs::path& root, const char* what, const std::string& op,
                    fs::path& created_from) {
  std::error_code ec;
  // The deepest ancestor that exists: directories created below it are new
  // names in it, synced with the save when it is durable.
  created_from = root.parent_path();
  while (!created_from.empty() && created_from != created_from.root_path() &&
         !fs::exists(created_from, ec))
    created_from = created_from.parent_path();
  fs::create_directories(root.parent_path(), ec);
  if (ec)
    throw StorageError(op + ": cannot create directory " + root.parent_path().string() + ": " +
                       ec.message());
  fs::path stage = sibling(root, what);
  if (!fs::create_directory(stage, ec) || ec)
    throw StorageError(op + ": cannot create the staging directory " + stage.string() + ": " +
                       (ec ? ec.message() : std::string("it exists")));
  return stage;
}

// fsync() of every directory of the tree at `stage` (on `num_threads`
// threads: each waits for the disk), `stage` itself last.
void sync_tree_dirs(const fs::path& stage, int num_threads) {
  std::vector<fs::path> dirs;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(stage, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_directory(ec) && !it->is_symlink(ec)) dirs.push_back(it->path());
  if (ec)
    throw StorageError("memmap: cannot list the staging directory " + stage.string() + ": " +
                       ec.message());
  detail::parallel_for(dirs.size(), thread_count(num_threads),
                       [&](std::size_t i) { fsync_path(dirs[i].string(), "memmap"); });
  fsync_path(stage.string(), "memmap");
}

// After install_dir: fsync() of the directory holding `root` and of each
// directory the save created between `created_from` (which existed) and it.
void sync_after_install(const fs::path& root, const fs::path& created_from) {
  try {
    for (fs::path dir = root.parent_path();; dir = dir.parent_path()) {
      fsync_path(dir.string(), "memmap");
      if (dir == created_from || dir == dir.parent_path() || dir.empty()) break;
    }
  } catch (const StorageError& e) {
    throw StorageError(std::string(e.what()) + " (" + root.string() +
                       " holds the new save, but its rename may not survive a power loss)");
  }
}

namespace {

// Writes `td` (and `extra` files: path under `root` -> text) as a complete
// directory beside `prefix`, then installs it at `prefix`: a save over an
// earlier save leaves exactly what was saved (no stale keys), and a save
// that fails leaves the earlier one untouched.
TensorDictBase write_tree(const TensorDictBase& td, const std::string& prefix,
                          const std::string& subdir, bool copy_data, const MemmapOptions& opt,
                          const std::vector<std::pair<std::string, std::string>>& extra) {
  if (prefix.empty()) throw ValueError("memmap: the prefix must not be empty");
  fs::path root = fs::absolute(fs::path(prefix)).lexically_normal();
  if (!root.has_filename()) root = root.parent_path();  // "dir/"
  std::error_code ec;
  // Replacing a symbolic link would leave the directory it points to as it was.
  if (fs::is_symlink(root, ec)) {
    root = fs::canonical(root, ec);
    if (ec)
      throw StorageError("memmap: cannot resolve the symbolic link " + prefix + ": " +
                         ec.message());
  }
  const auto st = fs::status(root, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st))
      throw StorageError("memmap: " + root.string() + " exists and is not a directory");
    // The save replaces the whole directory: never one that is not a save.
    const bool empty = fs::is_empty(root, ec);
    if (ec)
      throw StorageError("memmap: cannot read the directory " + root.string() + ": " +
                         ec.message());
    if (!fs::exists(root / "meta.json") && !empty)
      throw StorageError("memmap: refusing to replace " + root.string() +
                         ": the directory is not empty and holds no meta.json (it is not "
                         "a saved tensordict)");
  }
  std::vector<LeafJob> jobs;
  std::vector<std::pair<fs::path, ojson>> metas;
  const fs::path td_dir = subdir.empty() ? root : root / subdir;
  TensorDictBase out = plan_node(td, td_dir, copy_data, opt, jobs, metas, NestedKey());
  // Serialised before anything is written: dump() throws on a key or string
  // that is not valid UTF-8.
  std::vector<std::pair<fs::path, std::string>> texts;
  for (const auto& [file, meta] : metas) {
    try {
      texts.emplace_back(file, meta.dump());
    } catch (const nlohmann::json::exception& e) {
      throw ValueError("memmap: cannot write " + file.string() +
                       ": a key or non-tensor value is not valid UTF-8 (" + e.what() + ")");
    }
  }
  for (const auto& [rel, text] : extra) texts.emplace_back(root / rel, text);
  fs::path created_from;
  auto stage_and_install = [&] {
    const fs::path stage = make_stage(root, "tdsave", "memmap", created_from);
    try {
      for (const auto& [file, text] : texts) {
        fs::create_directories(staged(file, root, stage).parent_path(), ec);
        if (ec)
          throw StorageError("memmap: cannot create directory " + file.parent_path().string() +
                             ": " + ec.message());
      }
      Progress progress(copy_data ? "memmap" : "memmap_like", static_cast<int64_t>(jobs.size()),
                        opt.pbar);
      write_jobs(jobs, copy_data, opt, root, stage, progress);
      // In parallel when durable (each fsync waits for the disk); small writes
      // into the page cache are faster on one thread.
      detail::parallel_for(texts.size(), opt.durable ? thread_count(opt.num_threads) : 1,
                           [&](std::size_t i) {
                             const auto& [file, text] = texts[i];
                             write_new_file(staged(file, root, stage).string(), text.data(),
                                            text.size(), opt.durable, "memmap");
                           });
      // Durable: every directory of the staging tree holds the names of files
      // just written; synced before the rename, so that a failure here leaves
      // the earlier save in place.
      if (opt.durable) sync_tree_dirs(stage, opt.num_threads);
      install_dir(stage, root);
    } catch (...) {
      fs::remove_all(stage, ec);
      throw;
    }
  };
  const std::uint64_t freed_before = replaced_saves_freed();
  try {
    stage_and_install();
  } catch (const StorageError&) {
    // The space of saves replaced earlier is freed in the background: on a
    // nearly full disk it may be what this one lacked. Once it is free, one
    // more attempt (a failed one left the earlier save as it was).
    if (!replaced_saves_pending() && replaced_saves_freed() == freed_before) throw;
    wait_for_replaced_saves();
    stage_and_install();
  }
  // The rename is durable once the directory holding it is synced (and the
  // directories just created above it, if any).
  if (opt.durable) sync_after_install(root, created_from);
  map_jobs(jobs);
  out.lock_();
  detail::mutable_file_backing(out.node()).memmap = true;
  return out;
}

TensorDictBase write_dir(const TensorDictBase& td, const std::string& prefix, bool copy_data,
                         const MemmapOptions& opt) {
  return write_tree(td, prefix, "", copy_data, opt, {});
}

// ---- loading -------------------------------------------------------------------------------

struct Loader {
  LoadOptions opt;
  // Directories entered (nested tensordicts, stack members): bounded by
  // kMaxNestingDepth, as the loader recurses once per level.
  mutable int depth = 0;
  Progress* progress = nullptr;  // leaf files mapped, when LoadOptions::pbar draws
  bool meta_device() const { return opt.device && opt.device->type() == at::kMeta; }
};

// The leaf files under `dir` (the total of load_memmap's progress bar).
int64_t count_leaf_files(const fs::path& dir) {
  int64_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->path().extension() == ".memmap") ++n;
  return n;
}

Value load_entry_dir(const fs::path& dir, const Loader& L, const NestedKey& key,
                     at::IntArrayRef parent_batch);

// A safe legacy key may be found under its raw name (docs/formats.md, "Key encoding").
fs::path locate(const fs::path& dir, const std::string& key, const std::string& suffix,
                bool is_dir) {
  fs::path encoded = dir / (encode_key_for_filesystem(key) + suffix);
  if (fs::exists(encoded)) return encoded;
  bool safe =
      key.find('/') == std::string::npos && key.find('\\') == std::string::npos &&
      !(key.size() >= 2 && std::isalpha(static_cast<unsigned char>(key[0])) && key[1] == ':') &&
      !(is_dir && (key.empty() || key == "." || key == ".."));
  if (safe && !key.empty()) {
    fs::path raw = dir / (key + suffix);
    if (fs::exists(raw)) return raw;
  }
  return encoded;
}

std::vector<int64_t> read_shape(const ojson& j, const std::string& where) {
  if (!j.is_array()) throw FormatError(where + ": 'shape' is not a list of integers");
  std::vector<int64_t> out;
  for (const auto& v : j) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      throw FormatError(where + ": 'shape' is not a list of non-negative integers");
    out.push_back(v.get<int64_t>());
  }
  return out;
}

std::optional<at::Device> read_device(const ojson& meta, const std::string& where) {
  if (!meta.contains("device")) return std::nullopt;
  const auto& d = meta["device"];
  if (d.is_null()) return std::nullopt;
  if (!d.is_string()) throw FormatError(where + ": 'device' is not a string");
  auto s = d.get<std::string>();
  if (s == "None") return std::nullopt;
  try {
    return at::Device(s);
  } catch (const c10::Error&) {
    throw FormatError(where + ": unknown device '" + s + "'");
  }
}

// The file or directory of `key` in a directory of the layout before 0.4
// (0.3.2), which names files by the raw key: no encoding, no fallback (a raw
// "a b" beside a raw "a%20b" are two keys). A key that would name a path
// outside `dir` is refused rather than followed.
fs::path locate_raw(const fs::path& dir, const std::string& key, const std::string& suffix,
                    const NestedKey& full, const std::string& meta_file) {
  const fs::path rel(key + suffix);
  bool escapes = rel.is_absolute();
  for (const auto& part : rel)
    if (part == "..") escapes = true;
  if (escapes)
    throw FormatError(meta_file + ", key " + full.repr() + ": the raw file name '" + key + suffix +
                      "' (layout before 0.4) would lie outside the directory");
  return dir / rel;
}

at::Tensor load_leaf(const fs::path& dir, const std::string& k, const ojson& entry, const Loader& L,
                     const NestedKey& key, const std::string& meta_file, bool raw_names) {
  std::string where = meta_file + ", key " + key.repr();
  if (!entry.contains("dtype") || !entry["dtype"].is_string())
    throw FormatError(where + ": missing or invalid 'dtype'");
  at::ScalarType dtype;
  try {
    dtype = dtype_from_string(entry["dtype"].get<std::string>());
  } catch (const FormatError& e) {
    throw FormatError(where + ": " + e.what());
  }
  // const operator[] on a missing key is undefined behaviour in nlohmann.
  if (!entry.contains("shape")) throw FormatError(where + ": missing 'shape'");
  auto shape = read_shape(entry["shape"], where);
  try {
    checked_nbytes(checked_numel(shape, where), dtype, where);
  } catch (const ShapeError& e) {
    throw FormatError(e.what());
  }
  if (entry.contains("is_nested") && !entry["is_nested"].is_boolean())
    throw FormatError(where + ": 'is_nested' is not a boolean");
  if (entry.value("is_nested", false))
    throw FormatError(where + ": nested (torch.nested) tensors are not supported");
  if (L.meta_device()) return at::empty(shape, at::TensorOptions().dtype(dtype).device(at::kMeta));
  fs::path file =
      raw_names ? locate_raw(dir, k, ".memmap", key, meta_file) : locate(dir, k, ".memmap", false);
  at::Tensor t;
  if (numel_of(shape) == 0) {
    t = at::empty(shape, at::TensorOptions().dtype(dtype));
  } else {
    if (!fs::exists(file))
      throw FormatError("missing file " + file.string() + " for key " + key.repr() + " listed in " +
                        meta_file);
    t = map_file(file.string(), dtype, shape, L.opt.writable, " for key " + key.repr(),
                 /*write_through_links=*/false);
    if (L.progress) L.progress->advance();
  }
  if (L.opt.device && L.opt.device->type() != at::kCPU) {
    try {
      t = t.to(*L.opt.device);
    } catch (const c10::Error& e) {
      // A tensordict error naming the key, as everywhere else in the loader.
      throw DeviceError(where + ": cannot move to " + L.opt.device->str() + ": " +
                        e.what_without_backtrace());
    }
  }
  return t;
}

// Python allows the empty key (file "%.memmap"); the core does not.
void check_loadable_key(const std::string& k, const std::string& where) {
  if (k.empty())
    throw KeyError(where +
                   ": cannot load the empty key '' (file or directory '%'): "
                   "this library does not support empty keys");
}

// A leaf must start with the batch size recorded in meta.json; otherwise
// set() would throw a ShapeError that names no file. (Nested tensordicts are
// left to set(), which adapts their batch size as Python does.)
void set_loaded(TensorDict& out, const std::string& k, Value v, const NestedKey& key,
                const std::string& meta_file) {
  at::IntArrayRef batch = out.batch_size();
  at::IntArrayRef shape = v.is_tensor()             ? v.tensor().sizes()
                          : v.is_non_tensor_stack() ? v.non_tensor_stack().batch_size()
                                                    : batch;
  if (shape.size() < batch.size() || shape.slice(0, batch.size()) != batch)
    throw FormatError(meta_file + ", key " + key.repr() + ": shape " + format_shape(shape) +
                      " does not start with the batch size " + format_shape(batch));
  try {
    out.set(k, std::move(v));
  } catch (const DeviceError& e) {
    // e.g. "device": "cuda:0" in meta.json on a machine without CUDA.
    throw DeviceError(meta_file + ", key " + key.repr() + ": " + e.what());
  } catch (const KeyError& e) {
    // A file name that decodes to a key that is not UTF-8 ("%FF").
    throw FormatError(meta_file + ": " + e.what());
  }
}

TensorDict load_tensordict_dir(const fs::path& dir, const ojson& meta, const Loader& L,
                               const NestedKey& path) {
  const std::string meta_file = (dir / "meta.json").string();
  std::vector<int64_t> batch;
  if (meta.contains("shape")) batch = read_shape(meta["shape"], meta_file);
  auto device = L.opt.device && !L.meta_device() ? L.opt.device : read_device(meta, meta_file);
  if (L.meta_device()) device = at::Device(at::kMeta);
  TensorDict out = make_tensordict(batch, device);
  // The layout before 0.4 (0.3.2) lists no sub-collection ("type", 0.4 on)
  // and no "is_nested" (0.5 on; file names are encoded from 0.11 on): its
  // file names are the raw keys and its sub-collections are found by
  // scanning. Later layouts name their files by the encoded key and load only
  // the sub-collections meta.json lists (as Python does from 0.4 on): a
  // directory that is not listed is not part of the save.
  bool legacy = true;
  for (auto it = meta.begin(); it != meta.end(); ++it)
    if (it.value().is_object() && (it.value().contains("type") || it.value().contains("is_nested")))
      legacy = false;
  for (auto it = meta.begin(); it != meta.end(); ++it) {
    const std::string& k = it.key();
    if (k == "shape" || k == "device" || k == "_type") continue;
    const auto& entry = it.value();
    if (!entry.is_object()) continue;
    NestedKey key = path.empty() ? NestedKey(k) : path.child(k);
    if (entry.contains("type")) {
      check_loadable_key(k, meta_file);
      fs::path sub = locate(dir, k, "", true);
      if (!fs::is_directory(sub))
        throw FormatError("missing directory " + sub.string() + " for key " + key.repr() +
                          " listed in " + meta_file);
      set_loaded(out, k, load_entry_dir(sub, L, key, batch), key, meta_file);
    } else if (entry.contains("dtype") || entry.contains("shape")) {
      check_loadable_key(k, meta_file);
      set_loaded(out, k, load_leaf(dir, k, entry, L, key, meta_file, legacy), key, meta_file);
    }
  }
  if (legacy) {
    // A scanned directory is named by the raw key: never decoded ("x%41y"
    // is the key "x%41y").
    std::vector<fs::path> subs;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory() && fs::exists(e.path() / "meta.json")) subs.push_back(e.path());
    std::sort(subs.begin(), subs.end());
    for (const auto& sub : subs) {
      std::string k = sub.filename().string();
      if (out.contains(k)) continue;
      NestedKey key = path.empty() ? NestedKey(k) : path.child(k);
      set_loaded(out, k, load_entry_dir(sub, L, key, batch), key, meta_file);
    }
  }
  detail::mutable_file_backing(out.node()).saved_path = fs::absolute(dir).string();
  return out;
}

// The loaders of non-tensor directories stay out of line: inlined, their locals
// would grow the frame of the recursive directory walk (bounded at 512 levels,
// which a sanitizer build must also fit in its stack).

// A value Python pickled: refused unless LoadOptions::pickled_values_as_markers
// (docs/storage.md), never unpickled either way.
[[gnu::noinline]] NonTensorData pickled_value(const Loader& L, const fs::path& file,
                                              const NestedKey& key, at::IntArrayRef batch) {
  if (!L.opt.pickled_values_as_markers)
    throw FormatError("key " + key.repr() + ": the value was pickled by Python (" + file.string() +
                      "), and C++ never unpickles. Save it as a JSON value in Python, or pass "
                      "LoadOptions{.pickled_values_as_markers = true} to load it as an opaque "
                      "marker");
  std::error_code ec;
  const auto bytes = fs::file_size(file, ec);
  return NonTensorData(nlohmann::json{{"__tensordict_opaque__", "pickle"},
                                      {"file", file.string()},
                                      {"bytes", ec ? int64_t{0} : static_cast<int64_t>(bytes)}},
                       batch.vec(), at::Device(at::kCPU));
}

[[gnu::noinline]] NonTensorData load_non_tensor_dir(const fs::path& dir, const ojson& meta,
                                                    const Loader& L, at::IntArrayRef parent_batch,
                                                    const NestedKey& key) {
  std::vector<int64_t> batch = parent_batch.vec();
  // 0.3.2 keeps the batch size in _tensordict/meta.json.
  fs::path inner = dir / "_tensordict" / "meta.json";
  if (fs::exists(inner)) {
    auto im = read_json(inner);
    if (im.contains("shape")) batch = read_shape(im["shape"], inner.string());
  }
  if (meta.contains("data"))
    return NonTensorData(to_plain(meta["data"]), batch, at::Device(at::kCPU));
  // Not JSON-serialisable in Python: pickled.
  return pickled_value(L, dir / "other.pickle", key, batch);
}

Value load_entry_dir_impl(const fs::path& dir, const Loader& L, const NestedKey& key,
                          at::IntArrayRef parent_batch);

// A NonTensorStack directory (docs/formats.md, "NonTensorStack directories"): the nested list in
// "data", rebuilt as Python does (each level of equal-length lists is a batch dim, stack_dim
// ignored); "pickle.pkl" (never unpickled) gives an opaque NonTensorData; without "data", the
// members 0/, 1/, ... are stacked along stack_dim.
[[gnu::noinline]] Value load_non_tensor_stack_dir(const fs::path& dir, const ojson& meta,
                                                  const Loader& L, const NestedKey& key,
                                                  at::IntArrayRef parent_batch) {
  const std::string where = (dir / "meta.json").string() + " (key " + key.repr() + ")";
  if (meta.contains("data") && !meta["data"].is_null()) {
    const auto& data = meta["data"];
    if (data.is_string() && data.get<std::string>() == "pickle.pkl")
      return pickled_value(L, dir / "pickle.pkl", key, parent_batch);
    if (!data.is_array())
      throw FormatError(where +
                        ": the 'data' of a NonTensorStack must be a list or "
                        "\"pickle.pkl\", got " +
                        data.dump());
    return NonTensorStack::from_list(to_plain(data), read_device(meta, where));
  }
  int64_t stack_dim = 0;
  if (meta.contains("stack_dim")) {
    if (!meta["stack_dim"].is_number_integer())
      throw FormatError(where + ": 'stack_dim' is not an integer");
    stack_dim = meta["stack_dim"].get<int64_t>();
  }
  std::vector<Value> members;
  for (std::size_t i = 0; fs::exists(dir / std::to_string(i) / "meta.json"); ++i) {
    Value m = load_entry_dir(dir / std::to_string(i), L, key, {});
    if (!m.is_non_tensor_or_stack())
      throw FormatError((dir / std::to_string(i) / "meta.json").string() + " (key " + key.repr() +
                        "): a member of a NonTensorStack is a " + to_string(m.kind()) +
                        ", not a non-tensor");
    members.push_back(std::move(m));
  }
  if (members.empty())
    throw FormatError(where +
                      ": a NonTensorStack without 'data' and without members "
                      "(no 0/meta.json)");
  std::vector<const Value*> items;
  items.reserve(members.size());
  for (const auto& m : members) items.push_back(&m);
  try {
    const int64_t n = items[0]->is_non_tensor()
                          ? static_cast<int64_t>(items[0]->non_tensor().batch_size().size())
                          : items[0]->non_tensor_stack().dim();
    return stack_non_tensors(items, wrap_dim(stack_dim, n + 1, "NonTensorStack"), "NonTensorStack",
                             key, /*collapse_equal=*/false);
  } catch (const Error& e) {
    throw FormatError(where + ": the members cannot be stacked: " + e.what());
  }
}

// Any JSON value of the wrong type that slipped past the explicit checks
// (nlohmann::json::type_error) is reported as a FormatError naming the file.
Value load_entry_dir(const fs::path& dir, const Loader& L, const NestedKey& key,
                     at::IntArrayRef parent_batch) {
  struct Enter {
    const Loader& L;
    ~Enter() { --L.depth; }
  } enter{L};
  if (++L.depth > kMaxNestingDepth)
    throw FormatError(dir.string() + " (key " + key.repr() + "): directories nested deeper than " +
                      std::to_string(kMaxNestingDepth) +
                      " levels (the limit of this library, docs/errors.md)");
  // A directory inside a save that is a symbolic link is not followed: links
  // to an ancestor or to siblings would make the load loop or grow
  // exponentially (the prefix itself may be a link).
  std::error_code ec;
  if (L.depth > 1 && fs::is_symlink(dir, ec))
    throw FormatError(dir.string() + " (key " + key.repr() +
                      "): a directory inside a save is a symbolic link, which is not followed");
  try {
    return load_entry_dir_impl(dir, L, key, parent_batch);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError((dir / "meta.json").string() + " (key " + key.repr() +
                      "): unexpected JSON content: " + e.what());
  } catch (const fs::filesystem_error& e) {
    // A path that cannot be examined (a link loop: ELOOP, a name too long).
    throw FormatError(dir.string() + " (key " + key.repr() + "): " + e.what());
  }
}

Value load_entry_dir_impl(const fs::path& dir, const Loader& L, const NestedKey& key,
                          at::IntArrayRef parent_batch) {
  fs::path meta_file = dir / "meta.json";
  ojson meta = read_json(meta_file);
  if (meta.contains("_type") && !meta["_type"].is_string())
    throw FormatError(meta_file.string() + " (key " + key.repr() + "): '_type' is not a string");
  std::string type = meta.value("_type", std::string(kTensorDictType));
  if (type == kTensorDictType || type == "<class 'tensordict.persistent.PersistentTensorDict'>" ||
      type == "<class 'tensordict.nn.params.TensorDictParams'>")
    return load_tensordict_dir(dir, meta, L, key);
  if (type == kNonTensorDataType || type == "<class 'tensordict.tensorclass.MetaData'>")
    return load_non_tensor_dir(dir, meta, L, parent_batch, key);
  if (type == kNonTensorStackType)
    return load_non_tensor_stack_dir(dir, meta, L, key, parent_batch);
  if (type == kLazyStackType) {
    // Members 0/, 1/, ... while they exist, re-stacked lazily on stack_dim.
    if (!meta.contains("stack_dim") || !meta["stack_dim"].is_number_integer())
      throw FormatError(meta_file.string() + " (key " + key.repr() +
                        "): a LazyStackedTensorDict needs an integer 'stack_dim'");
    std::vector<TensorDictBase> members;
    for (std::size_t i = 0; fs::exists(dir / std::to_string(i) / "meta.json"); ++i) {
      Value m = load_entry_dir(dir / std::to_string(i), L, key, {});
      if (!m.is_tensordict())
        throw FormatError((dir / std::to_string(i) / "meta.json").string() + " (key " + key.repr() +
                          "): a member of a lazy stack is not a tensordict");
      members.push_back(m.tensordict());
    }
    if (members.empty())
      throw FormatError(meta_file.string() + " (key " + key.repr() +
                        "): a LazyStackedTensorDict without members (no 0/meta.json)");
    try {
      LazyStackedTensorDict out(std::move(members), meta["stack_dim"].get<int64_t>());
      detail::mutable_file_backing(out.node()).saved_path = fs::absolute(dir).string();
      return out;
    } catch (const Error& e) {
      throw FormatError(meta_file.string() + " (key " + key.repr() +
                        "): the members cannot be stacked: " + e.what());
    }
  }
  if (fs::exists(dir / "_tensordict" / "meta.json")) {
    // A Python tensorclass: its tensor fields are in _tensordict/, its
    // non-tensor fields in meta.json. Loaded as a TensorDict of both.
    fs::path inner = dir / "_tensordict";
    TensorDict td = load_tensordict_dir(inner, read_json(inner / "meta.json"), L, key);
    for (auto it = meta.begin(); it != meta.end(); ++it) {
      // null is a field set to None (Python writes an unset optional field,
      // tensor or not, that way): absent here, as from_tensordict reads it.
      if (it.key() == "_type" || it.value().is_null() || td.contains(it.key())) continue;
      td.set(it.key(), NonTensorData(to_plain(it.value())));
    }
    return td;
  }
  throw FormatError(meta_file.string() + " (key " + key.repr() + "): unknown _type '" + type + "'");
}

}  // namespace

namespace {

// The directory of the non-tensor entry `key` of `parent` (created when
// missing). A directory of the save replaced by a symbolic link is refused:
// writes would land wherever it points.
fs::path non_tensor_dir(const Node& parent, std::string_view key) {
  const fs::path pdir(saved_path_of(parent));
  fs::path dir = pdir / encode_key_for_filesystem(key);
  std::error_code ec;
  // (The top directory of a save may be a link the user gave as prefix; a
  // nested one, whose parent holds a meta.json, may not.)
  if (fs::is_symlink(dir, ec) ||
      (fs::is_symlink(pdir, ec) && fs::exists(pdir.parent_path() / "meta.json", ec)))
    throw StorageError("refusing to write the non-tensor entry '" + std::string(key) + "' to " +
                       dir.string() + ": a directory of the save is a symbolic link");
  fs::create_directories(dir, ec);
  if (ec) throw StorageError("cannot create directory " + dir.string() + ": " + ec.message());
  return dir;
}

// An exclusive flock on a directory, for a read-modify-write of its files
// by several processes (or threads: each lock has its own open file).
class DirLock {
 public:
  explicit DirLock(const fs::path& dir) {
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd_ < 0)
      throw StorageError("cannot open the directory " + dir.string() + ": " + errno_message());
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const std::string why = errno_message();
      ::close(fd_);
      throw StorageError("cannot lock the directory " + dir.string() + ": " + why);
    }
  }
  ~DirLock() { ::close(fd_); }  // releases the lock
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

void write_non_tensor_files(const fs::path& dir, std::string_view key, const Value& value) {
  std::string text;
  try {
    text = non_tensor_meta(value).dump();
  } catch (const nlohmann::json::exception& e) {
    throw ValueError("cannot write the non-tensor entry '" + std::string(key) + "' to " +
                     dir.string() + ": not valid UTF-8 (" + e.what() + ")");
  }
  write_json_atomic((dir / "meta.json").string(), text);
  if (value.is_non_tensor()) {
    // Kept for Python 0.3.2, which requires it (see non_tensor_batch_meta).
    std::error_code ec;
    fs::create_directories(dir / "_tensordict", ec);
    if (ec)
      throw StorageError("cannot create directory " + (dir / "_tensordict").string() + ": " +
                         ec.message());
    write_json_atomic((dir / "_tensordict" / "meta.json").string(),
                      non_tensor_batch_meta(value.non_tensor().batch_size()).dump());
  }
}

// The value in `dir`/meta.json, as `like` (its batch size and device); `like`
// itself when the file holds no inline data.
Value read_non_tensor_file(const fs::path& dir, const Value& like) {
  const fs::path file = dir / "meta.json";
  std::error_code ec;
  if (!fs::exists(file, ec)) return like;
  const ojson meta = read_json(file);
  const auto data = meta.find("data");
  if (data == meta.end() || data->is_string()) return like;
  const std::string type = meta.value("_type", std::string());
  try {
    if (type == kNonTensorStackType && data->is_array()) {
      const auto device = like.is_non_tensor_stack() ? like.non_tensor_stack().device()
                                                     : like.non_tensor().device();
      return NonTensorStack::from_list(to_plain(*data), device);
    }
    if (type == kNonTensorDataType && like.is_non_tensor())
      return NonTensorData(to_plain(*data), like.non_tensor().batch_size().vec(),
                           like.non_tensor().device());
  } catch (const Error& e) {
    throw FormatError(file.string() + ": cannot read the non-tensor value: " + e.what());
  }
  return like;
}

}  // namespace

void persist_non_tensor(const Node& parent, std::string_view key, const Value& value) {
  if (!backs_files(parent) || saved_path_of(parent).empty()) return;
  const fs::path dir = non_tensor_dir(parent, key);
  DirLock lock(dir);
  write_non_tensor_files(dir, key, value);
}

void sync_non_tensor_files(const Node& parent, std::string_view key) {
  if (!backs_files(parent) || saved_path_of(parent).empty()) return;
  const fs::path dir = fs::path(saved_path_of(parent)) / encode_key_for_filesystem(key);
  std::error_code ec;
  // The file written last, then the directory holding its rename.
  for (const fs::path& d : {dir / "_tensordict", dir}) {
    if (!fs::exists(d / "meta.json", ec)) continue;
    fsync_path((d / "meta.json").string(), "flush");
    fsync_path(d.string(), "flush");
  }
}

std::optional<Value> persist_non_tensor_rows(
    const Node& parent, std::string_view key, const Value& in_memory,
    const std::function<std::optional<Value>(const Value&)>& apply) {
  if (!backs_files(parent) || saved_path_of(parent).empty()) return apply(in_memory);
  const fs::path dir = non_tensor_dir(parent, key);
  DirLock lock(dir);
  Value current = read_non_tensor_file(dir, in_memory);
  auto updated = apply(current);
  if (updated) write_non_tensor_files(dir, key, *updated);
  return updated;
}

TensorDictBase write_tensorclass_dir(const TensorDictBase& tensors, const std::string& prefix,
                                     const std::string& meta_text, const MemmapOptions& options) {
  return write_tree(tensors, prefix, "_tensordict", /*copy_data=*/true, options,
                    {{"meta.json", meta_text}});
}

}  // namespace detail

// ---- public entry points -----------------------------------------------------------------

TensorDictBase load_memmap(const std::string& prefix, const LoadOptions& options) {
  namespace d = detail;
  fs::path dir(prefix);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw FormatError("load_memmap: " + prefix + " is not a directory" +
                      (ec ? " (" + ec.message() + ")" : std::string()));
  d::Loader L{options};
  // Counting the files costs a directory walk: only when the bar is drawn (a
  // meta-device load maps nothing).
  const bool draw = options.pbar && !L.meta_device() && d::Progress::stderr_is_terminal();
  d::Progress progress("load_memmap", draw ? d::count_leaf_files(dir) : 0, draw);
  L.progress = &progress;
  Value v = d::load_entry_dir(dir, L, NestedKey(), {});
  progress.finish();
  if (!v.is_tensordict())
    throw FormatError("load_memmap: " + prefix + " holds a non-tensor value, not a tensordict");
  TensorDictBase out = v.tensordict();
  detail::mutable_file_backing(out.node()).saved_path = fs::absolute(dir).string();
  return out;
}

TensorDictBase load(const std::string& prefix, const LoadOptions& options) {
  return load_memmap(prefix, options);
}

TensorDictBase TensorDictBase::memmap(const std::string& prefix,
                                      const MemmapOptions& options) const {
  return detail::write_dir(*this, prefix, /*copy_data=*/true, options);
}

TensorDictBase TensorDictBase::save(const std::string& prefix, const MemmapOptions& options) const {
  return memmap(prefix, options);
}

TensorDictBase TensorDictBase::memmap_like(const std::string& prefix,
                                           const MemmapOptions& options) const {
  return detail::write_dir(*this, prefix, /*copy_data=*/false, options);
}

namespace {
// Replaces the entries of `dst` by those of `src` (same structure), in place,
// so that handles to nested tensordicts of `dst` see the mapped leaves too.
void adopt(Node& dst, const TensorDictBase& src) {
  for (const auto& k : src.node().keys()) {
    Value v = *src.node().find(k);
    auto cur = dst.find(k);
    if (v.is_tensordict() && cur && cur->is_tensordict()) {
      adopt(cur->tensordict().node(), v.tensordict());
      detail::mutable_file_backing(cur->tensordict().node()).saved_path =
          detail::saved_path_of(v.tensordict().node());
      continue;
    }
    dst.write(k, v);
  }
}
}  // namespace

namespace {
// Makes `dst` the memory-mapped `src` (its copy written by write_dir) in
// place. The members of a lazy stack are adopted one by one, so that
// handles to them stay valid.
void adopt_mapped(TensorDictBase& dst, const TensorDictBase& src) {
  if (const auto* ls = detail::as_lazy_stack(dst)) {
    const auto& mapped = detail::as_lazy_stack(src)->members();
    for (std::size_t i = 0; i < ls->members().size(); ++i) {
      TensorDictBase m = ls->members()[i];
      adopt_mapped(m, mapped[i]);
    }
  } else {
    adopt(dst.node(), src);
    dst.node().set_device(at::Device(at::kCPU));
  }
  detail::mutable_file_backing(dst.node()).saved_path = detail::saved_path_of(src.node());
  dst.lock_();
  detail::mutable_file_backing(dst.node()).memmap = true;
}
}  // namespace

TensorDictBase& TensorDictBase::memmap_(const std::string& prefix, const MemmapOptions& options) {
  detail::refuse_outside_storage(*this, "memmap_", "so it cannot be memory-mapped in place");
  // The whole tree is written (and installed at the prefix) before anything
  // of this tensordict changes.
  TensorDictBase mapped = detail::write_dir(*this, prefix, true, options);
  adopt_mapped(*this, mapped);
  return *this;
}

TensorDictBase& TensorDictBase::memmap_refresh_() {
  const std::string& path = detail::saved_path_of(node());
  if (path.empty())
    throw ValueError("memmap_refresh_: this tensordict was never memmapped or loaded");
  TensorDictBase fresh = load_memmap(path);
  bool was_locked = is_locked(), memmap = is_memmap(), shared = is_shared();
  if (was_locked) {
    // Storage is replaced wholesale; the lock is restored below.
    node().set_locked_flag(false);
  }
  for (const auto& k : node().keys())
    if (!fresh.contains(k)) node().remove(k);
  adopt(node(), fresh);
  node().set_batch_size(fresh.batch_size().vec());
  if (was_locked) lock_();
  FileBacking& files = detail::mutable_file_backing(node());
  files.memmap = memmap;
  files.shared = shared;
  return *this;
}

std::optional<std::string> TensorDictBase::saved_path() const {
  const std::string& p = detail::saved_path_of(node());
  if (p.empty()) return std::nullopt;
  return p;
}

}  // namespace tensordict
