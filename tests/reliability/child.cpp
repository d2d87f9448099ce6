// tensordict_reliability_child: the other process of the reliability tests.
//
//   fulldisk <dir>      mounts a 2 MiB tmpfs at <dir> in a private mount
//                       namespace, asks from_schema for 10 MB of memmap there
//                       and writes rows. Exit 0: a StorageError at allocation;
//                       3: no error (rows were written); 4: another exception;
//                       77: no small file system could be made here.
//   fullsave <dir>      saves over earlier saves on a 2 MiB tmpfs (see below).
//   resave <dir>        saves over saves near the end of a 2 MiB tmpfs: each
//                       fits only once the save it replaced is deleted. Exit 0
//                       when all succeed; 5: one failed; 77: no tmpfs.
//   rows <where> <first> <count> <value> [nontensor]
//                       opens the memmap directory <where> (or the shared
//                       tensordict "shm:<name>") and writes rows
//                       [first, first+count) of "x" (and, with `nontensor`,
//                       of the NonTensorStack "tag") one index_put_ each.
//   durable <op> <path> <0|1>
//                       one save or flush, with durable (or flush) when 1,
//                       run under LD_PRELOAD of libtensordict_sync_spy.so by
//                       test_durable.cpp: <op> is memmap (a new tensordict
//                       saved at <path>), memmap_ (the save at <path> loaded
//                       and saved again in place), schema (from_schema
//                       "memmap"), state_dict (save_state_dict to <path>) or
//                       flush (the save at <path> loaded, a row written, then
//                       Node::flush when 1). Exit 0; 5: a StorageError; 4:
//                       another exception.
#include "support/private_mounts.h"

#include <tensordict/tensordict.h>

#include <torch/torch.h>

#include <fcntl.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

namespace td = tensordict;

namespace {

int fulldisk(const std::string& dir) {
  if (!td_test::mount_small_tmpfs(dir, "2m")) {
    std::perror("fulldisk: cannot mount a small tmpfs");
    return 77;
  }
  try {
    td::Schema schema{{"x", td::FieldSpec{{1250}, at::kDouble}}};  // 10 MB for 1000 rows
    auto t = td::from_schema(schema, {1000}, td::storage::Memmap{.prefix = dir + "/p"});
    for (int64_t i = 0; i < 1000; ++i) t.get("x")[i].fill_(1.0);
    std::cerr << "fulldisk: no error, 10 MB written on a 2 MiB file system\n";
    return 3;
  } catch (const td::StorageError& e) {
    std::cerr << "fulldisk: StorageError: " << e.what() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "fulldisk: other exception: " << e.what() << "\n";
    return 4;
  }
}

// Saves over earlier saves on a 2 MiB file system: the second save does not
// fit, the first must stay whole. Exit 0 when both survive; 5: the memmap
// directory does not, 6: the state dict file does not; 77: no tmpfs.
int fullsave(const std::string& dir) {
  if (!td_test::mount_small_tmpfs(dir, "2m")) {
    std::perror("fullsave: cannot mount a small tmpfs");
    return 77;
  }
  const auto small = torch::arange(100000, torch::kFloat);  // 400 kB
  const auto big = torch::ones({450000}, torch::kFloat);    // 1.8 MB
  const std::string prefix = dir + "/p";
  td::TensorDict a;
  a.set("x", small);
  a.memmap(prefix);
  td::TensorDict b;
  b.set("x", big);
  try {
    b.memmap(prefix);
    std::cerr << "fullsave: the big memmap fitted\n";
    return 5;
  } catch (const td::StorageError& e) {
    std::cerr << "fullsave: memmap: StorageError: " << e.what() << "\n";
  }
  try {
    if (!td::load_memmap(prefix).get("x").equal(small)) return 5;
  } catch (const std::exception& e) {
    std::cerr << "fullsave: the earlier memmap does not load: " << e.what() << "\n";
    return 5;
  }
  td::TensorDict().memmap(prefix);  // frees the space (an empty save)
  const std::string file = dir + "/sd.pt";
  td::save_state_dict(a.state_dict(), file);
  try {
    td::save_state_dict(b.state_dict(), file);
    std::cerr << "fullsave: the big state dict fitted\n";
    return 6;
  } catch (const td::StorageError& e) {
    std::cerr << "fullsave: save_state_dict: StorageError: " << e.what() << "\n";
  }
  try {
    if (!td::load_state_dict_file(file).tensor("x").equal(small)) return 6;
  } catch (const std::exception& e) {
    std::cerr << "fullsave: the earlier state dict does not load: " << e.what() << "\n";
    return 6;
  }
  return 0;
}

// Saves of 900 kB over each other on a 2 MiB file system: two fit, three do
// not. A replaced save is deleted in the background, so the third may find
// the first still there: the save waits for it and tries again.
int resave(const std::string& dir) {
  if (!td_test::mount_small_tmpfs(dir, "2m")) {
    std::perror("resave: cannot mount a small tmpfs");
    return 77;
  }
  const std::string prefix = dir + "/p";
  for (int i = 0; i < 8; ++i) {
    td::TensorDict t;
    t.set("x", torch::full({225000}, static_cast<float>(i)));  // 900 kB
    try {
      t.memmap(prefix);
    } catch (const td::StorageError& e) {
      std::cerr << "resave: save " << i << ": " << e.what() << "\n";
      return 5;
    }
    if (td::load_memmap(prefix).get("x")[0].item<float>() != static_cast<float>(i)) return 5;
  }
  return 0;
}

// Rows [first, first + count) of "x" (float [N, 4]) set to `value` and, with
// `nontensor`, of the NonTensorStack "tag" set to "v<value>", one index_put_
// per row. `where` is a memmap directory or ("shm:" + name) a shared-memory
// tensordict.
int rows(const std::string& where, int64_t first, int64_t count, double value, bool nontensor) {
  try {
    td::TensorDictBase t =
        where.rfind("shm:", 0) == 0 ? td::attach_shared(where.substr(4)) : td::load_memmap(where);
    t.lock_();
    const std::string tag = "v" + std::to_string(static_cast<int64_t>(value));
    for (int64_t i = first; i < first + count; ++i) {
      if (nontensor)
        t.index_put_({i}, td::TensorDict({{"x", torch::full({4}, value)}, {"tag", tag}}, {}));
      else
        t.index_put_({i}, td::TensorDict({{"x", torch::full({4}, value)}}, {}));
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "rows: " << e.what() << "\n";
    return 4;
  }
}

// The tensordict `durable memmap` saves (test_durable.cpp checks it).
td::TensorDict new_save() {
  td::TensorDict t(std::vector<int64_t>{4});
  t.set("a", torch::full({4}, 7.0f));
  t.set({"sub", "b"}, torch::full({4, 2}, 3, torch::kLong));
  t.set("s", td::NonTensorData("new"));
  return t;
}

int durable(const std::string& op, const std::string& path, bool on) {
  try {
    if (op == "memmap") {
      new_save().memmap(path, {.durable = on});
    } else if (op == "memmap_") {
      td::load_memmap(path).memmap_(path, {.durable = on});
    } else if (op == "schema") {
      td::Schema schema{{"x", td::FieldSpec{{3}, at::kFloat}}};
      td::from_schema(schema, {5}, "memmap", {{"prefix", path}, {"durable", on}});
    } else if (op == "state_dict") {
      td::save_state_dict(new_save().state_dict(), path, {.durable = on});
    } else if (op == "flush") {
      auto t = td::load_memmap(path);
      t.lock_();
      t.get("a")[0].fill_(42.0f);
      t.get({"sub", "b"})[1].fill_(42);
      if (on) t.node().flush();
    } else {
      std::cerr << "durable: unknown op " << op << "\n";
      return 2;
    }
    return 0;
  } catch (const td::StorageError& e) {
    std::cerr << "durable: StorageError: " << e.what() << "\n";
    return 5;
  } catch (const std::exception& e) {
    std::cerr << "durable: other exception: " << e.what() << "\n";
    return 4;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: tensordict_reliability_child fulldisk <dir> | rows ...\n";
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "fulldisk" && argc == 3) return fulldisk(argv[2]);
  if (cmd == "fullsave" && argc == 3) return fullsave(argv[2]);
  if (cmd == "resave" && argc == 3) return resave(argv[2]);
  if (cmd == "rows" && (argc == 6 || argc == 7))
    return rows(argv[2], std::stoll(argv[3]), std::stoll(argv[4]), std::stod(argv[5]),
                argc == 7 && std::string(argv[6]) == "nontensor");
  if (cmd == "durable" && argc == 5) return durable(argv[2], argv[3], std::string(argv[4]) == "1");
  std::cerr << "unknown command " << cmd << "\n";
  return 2;
}
