// load_memmap over a mutated directory. The input is a directory packed as
// records: [u8 path length][path][u16 little-endian data length][data]; a
// path ending in '/' is a directory, "@link:<target>" as data makes a
// symbolic link (targets inside the directory only), "@fifo" a FIFO. Paths
// are confined to the scratch directory. Seeds: scripts/pack_dir.py over
// tests/data, and saves written by the library itself.
#include "fuzz_common.h"

#include <torch/torch.h>

#include <sys/stat.h>

namespace {

bool safe_relative(const std::string& p) {
  if (p.empty() || p[0] == '/' || p.size() > 200) return false;
  for (const auto& part : td_fuzz::fs::path(p))
    if (part == "..") return false;
  return true;
}

// Packs `dir` (the seeds written by the library itself).
void pack(const td_fuzz::fs::path& dir, const td_fuzz::fs::path& out) {
  std::string bytes;
  for (const auto& e : td_fuzz::fs::recursive_directory_iterator(dir)) {
    std::string rel = e.path().lexically_relative(dir).string();
    std::string data = e.is_directory() ? "" : td_fuzz::read_file(e.path());
    if (e.is_directory()) rel += "/";
    if (rel.size() > 255 || data.size() > 65535) continue;
    bytes += static_cast<char>(rel.size());
    bytes += rel;
    bytes += static_cast<char>(data.size() & 0xFF);
    bytes += static_cast<char>(data.size() >> 8);
    bytes += data;
  }
  td_fuzz::write_file(out, bytes.data(), bytes.size());
}

}  // namespace

void td_fuzz_write_seeds(const char* dir) {
  namespace td = tensordict;
  const auto tmp = td_fuzz::scratch() / "seed";
  td_fuzz::sample().memmap(tmp.string());
  pack(tmp, td_fuzz::fs::path(dir) / "seed0.bin");
  td::TensorDict a(std::vector<int64_t>{2});
  a.set("x", torch::ones({2, 2}));
  td::TensorDict b(std::vector<int64_t>{2});
  b.set("x", torch::zeros({2, 2}));
  td::LazyStackedTensorDict({a, b}, 0).memmap((td_fuzz::scratch() / "lazy").string());
  pack(td_fuzz::scratch() / "lazy", td_fuzz::fs::path(dir) / "seed1.bin");
  // Directories written by Python tensordict ($TD_FUZZ_FIXTURES: folders
  // whose subfolders holding a meta.json are saves).
  if (const char* fixtures = std::getenv("TD_FUZZ_FIXTURES")) {
    std::string list = fixtures;
    int n = 0;
    for (std::size_t at = 0; at <= list.size();) {
      const std::size_t end = std::min(list.find(':', at), list.size());
      const td_fuzz::fs::path folder = list.substr(at, end - at);
      at = end + 1;
      std::error_code ec;
      for (const auto& e : td_fuzz::fs::directory_iterator(folder, ec))
        if (td_fuzz::fs::exists(e.path() / "meta.json"))
          pack(e.path(), td_fuzz::fs::path(dir) / ("fixture" + std::to_string(n++) + ".bin"));
    }
  }
  td_fuzz::reset_scratch();
}

extern "C" int LLVMFuzzerInitialize(int*, char***) { return td_fuzz::initialize(); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  td_fuzz::reset_scratch();
  const auto root = td_fuzz::scratch() / "d";
  td_fuzz::fs::create_directories(root);
  std::size_t p = 0;
  int files = 0;
  while (p < size && files++ < 64) {
    const std::size_t n = data[p++];
    if (p + n + 2 > size) break;
    std::string name(reinterpret_cast<const char*>(data + p), n);
    p += n;
    std::size_t len = data[p] | (static_cast<std::size_t>(data[p + 1]) << 8);
    p += 2;
    len = std::min(len, size - p);
    std::string body(reinterpret_cast<const char*>(data + p), len);
    p += len;
    if (!safe_relative(name)) continue;
    const auto path = root / name;
    std::error_code ec;
    td_fuzz::fs::create_directories(path.parent_path(), ec);
    if (name.back() == '/') {
      td_fuzz::fs::create_directories(path, ec);
    } else if (body.rfind("@link:", 0) == 0 && safe_relative(body.substr(6))) {
      td_fuzz::fs::create_symlink(root / body.substr(6), path, ec);
    } else if (body == "@fifo") {
      ::mkfifo(path.c_str(), 0644);
    } else {
      td_fuzz::write_file(path, body.data(), body.size());
    }
  }
  try {
    auto t = tensordict::load_memmap(root.string());
    for (const auto& [k, v] : t.items(/*include_nested=*/true))
      if (v.is_tensor()) (void)v.tensor().sum();
  } catch (const tensordict::Error&) {
  }
  return 0;
}
