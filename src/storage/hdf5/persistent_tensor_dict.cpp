// PersistentTensorDict: the public API of the HDF5 storage, and its
// registration with from_schema as "h5" (and "hdf5").
#include "storage/hdf5/h5_node.h"

#include <tensordict/storage/hdf5.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>

namespace tensordict {

using detail::h5::H5Node;

namespace {

H5Node& h5_node(const TensorDictBase& td) {
  auto* n = dynamic_cast<H5Node*>(&td.node());
  if (!n) throw TypeError("not a PersistentTensorDict: " + td.type_name());
  return *n;
}

}  // namespace

PersistentTensorDict::PersistentTensorDict(std::shared_ptr<Node> node)
    : TensorDictBase(std::move(node)) {}

bool PersistentTensorDict::is_node(const Node& node) noexcept {
  return dynamic_cast<const H5Node*>(&node) != nullptr;
}

PersistentTensorDict PersistentTensorDict::open(const std::string& filename,
                                                const H5OpenOptions& options) {
  // Refused before the file is opened (or truncated).
  const std::string group = detail::h5::canonical_group(options.group);
  auto file = std::make_shared<detail::h5::File>(filename, options);
  auto l = detail::h5::lock();
  try {
    file->group(group, file->writable());
  } catch (const KeyError&) {
    throw StorageError(file->where(group) + ": no such group (mode '" + options.mode +
                       "' does not create it)");
  }
  std::vector<int64_t> batch;
  if (options.batch_size) {
    batch = *options.batch_size;
    H5Node::check_batch_size(*file, group, batch);
  } else {
    batch = H5Node::infer_batch_size(*file, group).value_or(std::vector<int64_t>{});
  }
  return PersistentTensorDict(
      std::make_shared<H5Node>(file, group, batch, options.device,
                               std::vector<detail::h5::ObjectId>{file->group_id(group)}));
}

PersistentTensorDict PersistentTensorDict::from_h5(const std::string& filename,
                                                   const std::string& mode,
                                                   std::optional<std::vector<int64_t>> batch_size) {
  H5OpenOptions o;
  o.mode = mode;
  o.batch_size = std::move(batch_size);
  return open(filename, o);
}

PersistentTensorDict PersistentTensorDict::from_tensordict(const TensorDictBase& td,
                                                           const std::string& filename,
                                                           const H5DatasetOptions& options) {
  if (!td.defined()) throw ValueError("to_h5: a null tensordict");
  H5OpenOptions o;
  o.mode = "w";
  o.batch_size = td.batch_size().vec();
  o.device = td.device();
  o.dataset = options;
  // Written beside the file and renamed over it once complete: a value HDF5
  // cannot hold leaves an existing file as it was.
  static std::atomic<int> counter{0};
  const std::string staging =
      filename + ".tdsave-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".h5";
  try {
    PersistentTensorDict out = open(staging, o);
    H5Node& root = h5_node(out);
    const Node& src = td.node();
    for (const auto& k : src.keys()) root.write(k, *src.find(k));
    out.close();
    // Renamed over a file another process has open, its later writes would
    // go to the old, unlinked file: refused instead.
    detail::h5::check_not_locked(filename, "to_h5: HDF5 file '" + filename + "'", "replacing it");
    std::filesystem::rename(staging, filename);
  } catch (const std::filesystem::filesystem_error& e) {
    std::error_code ec;
    std::filesystem::remove(staging, ec);
    throw StorageError("to_h5: cannot put '" + staging + "' in place of '" + filename +
                       "': " + e.what());
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(staging, ec);
    throw;
  }
  o.mode = "r+";
  return open(filename, o);
}

void PersistentTensorDict::close() { h5_node(*this).file()->close(); }
bool PersistentTensorDict::is_open() const { return h5_node(*this).file()->is_open(); }
std::string PersistentTensorDict::filename() const { return h5_node(*this).file()->filename(); }
std::string PersistentTensorDict::group_name() const { return h5_node(*this).path(); }
std::string PersistentTensorDict::mode() const { return h5_node(*this).file()->mode(); }
void PersistentTensorDict::flush() { h5_node(*this).file()->flush(); }
void PersistentTensorDict::start_swmr_write() { h5_node(*this).file()->start_swmr_write(); }
bool PersistentTensorDict::swmr_mode() const {
  const auto& f = *h5_node(*this).file();
  return f.swmr_read() || f.swmr_write();
}

PersistentTensorDict to_h5(const TensorDictBase& td, const std::string& filename,
                           const H5DatasetOptions& options) {
  return PersistentTensorDict::from_tensordict(td, filename, options);
}

PersistentTensorDict from_schema(const Schema& schema, const std::vector<int64_t>& batch_size,
                                 const storage::H5& storage) {
  if (storage.filename.empty())
    throw SchemaError("from_schema(storage=\"h5\"): the option 'filename' is required");
  if (storage.mode == "r")
    throw SchemaError("from_schema(storage=\"h5\"): mode 'r' cannot create datasets in '" +
                      storage.filename + "'");
  H5OpenOptions o;
  o.mode = storage.mode;
  o.group = storage.group;
  o.batch_size = batch_size;
  o.dataset = storage.dataset;
  o.locking = storage.locking;
  o.swmr = storage.swmr;
  PersistentTensorDict td = PersistentTensorDict::open(storage.filename, o);
  allocate_schema(td, schema);
  if (storage.swmr) td.start_swmr_write();
  return td;
}

namespace {

TensorDictBase make_h5(const Schema& schema, const std::vector<int64_t>& batch_size,
                       const StorageOptions& options) {
  const std::string name = "h5";
  check_storage_options(options, name,
                        {"filename", "mode", "group", "chunks", "compression", "compression_opts",
                         "shuffle", "fletcher32", "locking", "swmr"});
  storage::H5 s;
  s.filename = storage_option<std::string>(options, name, "filename", "");
  s.mode = storage_option<std::string>(options, name, "mode", "w");
  s.group = storage_option<std::string>(options, name, "group", "");
  s.dataset.chunks = storage_option<std::vector<int64_t>>(options, name, "chunks", {});
  const auto compression = storage_option<std::string>(options, name, "compression", "");
  if (!compression.empty()) {
    if (compression != "gzip")
      throw SchemaError("from_schema: the option 'compression' of storage 'h5' is '" + compression +
                        "'; only \"gzip\" is supported");
    s.dataset.gzip = storage_option<int>(options, name, "compression_opts", 4);  // h5py's default
  } else if (options.count("compression_opts")) {
    s.dataset.gzip = storage_option<int>(options, name, "compression_opts", 4);
  }
  s.dataset.shuffle = storage_option<bool>(options, name, "shuffle", false);
  s.dataset.fletcher32 = storage_option<bool>(options, name, "fletcher32", false);
  if (options.count("locking")) s.locking = storage_option<bool>(options, name, "locking", true);
  s.swmr = storage_option<bool>(options, name, "swmr", false);
  return from_schema(schema, batch_size, s);
}

}  // namespace

TENSORDICT_REGISTER_STORAGE("h5", make_h5);
TENSORDICT_REGISTER_STORAGE("hdf5", make_h5);

}  // namespace tensordict
