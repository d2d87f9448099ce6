// Hostile HDF5 files and conditions (issue #32): every one is a typed
// tensordict:: error naming the file and key, never a hang, a crash or a raw
// allocator error, and what is on disk stays as it was. The files are written
// by h5py (tests/hdf5/h5py_hostile.py); the full disk is a small tmpfs mounted
// by a forked child in a private mount namespace.
#include "support/core_test_helpers.h"
#include "support/private_mounts.h"
#include "support/typed_test_helpers.h"

#include <tensordict/schema.h>
#include <tensordict/storage/hdf5.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

namespace {

namespace td = tensordict;
namespace fs = std::filesystem;
using td_test::expect_message_contains;

std::string python(const std::string& args) {
  return std::string(TENSORDICT_PYTHON) + " " + TD_H5PY_HOSTILE_SCRIPT + " " + args;
}

struct H5Hostile : ::testing::Test {
  td_test::TempDir dir{"td_h5_hostile"};
  void SetUp() override { fs::create_directories(dir.path); }
  std::string file(const std::string& name) const { return dir.str(name); }
  void write_files() { ASSERT_EQ(std::system(python("write '" + dir.str() + "'").c_str()), 0); }
};

td::TensorDict small() { return td::TensorDict({{"x", torch::arange(6, torch::kFloat)}}, {6}); }

// 1. A FIFO, a device, a directory: refused at once, before HDF5 opens them
// (opening a FIFO blocks until a writer comes). A watchdog opens the FIFO
// for writing after 10 s, so that a regression fails instead of hanging.
TEST_F(H5Hostile, FifosDevicesAndDirectoriesAreRefusedWithoutBlocking) {
  const std::string fifo = file("fifo.h5");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  fs::create_symlink("/dev/zero", file("zero.h5"));
  fs::create_directory(file("dir.h5"));
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 1000 && !done; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    while (!done) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  const auto start = std::chrono::steady_clock::now();
  for (const char* mode : {"r", "r+", "a", "w", "w-"}) {
    td::H5OpenOptions o;
    o.mode = mode;
    TD_EXPECT_THROW_MSG(td::PersistentTensorDict::open(fifo, o), td::FormatError, fifo.c_str(),
                        "not a regular file", "FIFO");
  }
  TD_EXPECT_THROW_MSG(td::PersistentTensorDict::from_h5(file("zero.h5")), td::FormatError,
                      "zero.h5", "character device");
  TD_EXPECT_THROW_MSG(td::PersistentTensorDict::from_h5(file("dir.h5"), "a"), td::FormatError,
                      "dir.h5", "directory");
  TD_EXPECT_THROW_MSG(td::from_schema(td::Schema{{"x", {{2}, torch::kFloat}}}, {4},
                                      td::storage::H5{.filename = fifo}),
                      td::FormatError, "FIFO");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  done = true;
  watchdog.join();
  EXPECT_TRUE(fs::is_fifo(fifo));
}

// 2. Link cycles (hard and soft, to a group and to the root), nesting past
// 512 levels and shared groups that expand to 2^40 paths: FormatErrors
// naming the link, from batch-size inference and from a given batch size.
TEST_F(H5Hostile, LinkCyclesDeepNestingAndExpandingSharedGroupsAreFormatErrors) {
  write_files();
  for (const auto& [name, link] :
       {std::pair{"loop.h5", "/a/loop"}, std::pair{"rootloop.h5", "/a/up"},
        std::pair{"softloop.h5", "/a/b/up"}}) {
    SCOPED_TRACE(name);
    TD_EXPECT_THROW_MSG(td::PersistentTensorDict::from_h5(file(name)), td::FormatError, name, link,
                        "cycle");
    TD_EXPECT_THROW_MSG(td::PersistentTensorDict::from_h5(file(name), "r", std::vector<int64_t>{}),
                        td::FormatError, link, "cycle");
  }
  td::H5OpenOptions o;
  o.group = "/a";
  TD_EXPECT_THROW_MSG(td::PersistentTensorDict::open(file("rootloop.h5"), o), td::FormatError,
                      "cycle");
  TD_EXPECT_THROW_MSG(td::PersistentTensorDict::from_h5(file("deep.h5")), td::FormatError,
                      "deep.h5", "deeper than 512");
  TD_EXPECT_THROW_MSG(td::PersistentTensorDict::from_h5(file("dag.h5")), td::FormatError, "dag.h5",
                      "hard links");
  // One group linked twice is no cycle: read as two copies, as h5py does.
  auto shared = td::PersistentTensorDict::from_h5(file("shared.h5"));
  EXPECT_EQ(shared.batch_size().vec(), (std::vector<int64_t>{6}));
  auto copy = shared.to_tensordict();
  EXPECT_TRUE(copy.get({"a", "x"}).equal(copy.get({"b", "x"})));
}

// 3 and 4. Shapes no memory holds, declared in a few bytes; NULL dataspaces;
// stack attributes that are not the dataset's shape; data and links leading
// to other files (a FIFO among them); strings that are not UTF-8. The file
// opens, every other key reads, and each of these is a typed error naming it.
TEST_F(H5Hostile, UnreadableDatasetsAreTypedErrorsNamingTheKey) {
  write_files();
  ASSERT_EQ(::mkfifo(file("fifo").c_str(), 0600), 0);  // where external.h5's link points
  struct Case {
    const char* file;
    const char* key;
    const char* message;
    bool storage_error = false;
  };
  const Case cases[] = {
      {"huge.h5", "overflow", "overflows int64"},
      {"huge.h5", "terabytes", "cannot allocate", true},
      {"huge.h5", "strings", "out of proportion"},
      {"huge.h5", "empty_rows", "out of proportion"},
      {"huge.h5", "opaque", "out of proportion"},
      {"huge.h5", "stack_attr", "__tensordict_stack__"},
      {"huge.h5", "stack_negative", "__tensordict_stack__"},
      {"null.h5", "null", "NULL dataspace"},
      {"null.h5", "null_str", "NULL dataspace"},
      {"external.h5", "raw", "external files"},
      {"external.h5", "elink", "external link"},
      {"external.h5", "through", "soft link that leads nowhere"},
      {"external.h5", "dangling", "soft link that leads nowhere"},
      {"utf8.h5", "latin1", "UTF-8"},
      {"utf8.h5", "fixed", "UTF-8"},
      {"utf8.h5", "code_point", "U+10FFFF"},
      {"utf8.h5", "huge_tag", "does not describe its 4-byte items"},
      {"utf8.h5", "empty_tag", "does not describe its 4-byte items"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.file) + " " + c.key);
    auto h5 = td::PersistentTensorDict::from_h5(file(c.file));
    EXPECT_TRUE(h5.get("ok").equal(torch::arange(6, torch::kFloat)));
    try {
      (void)h5.get(c.key);
      ADD_FAILURE() << "no error";
    } catch (const td::StorageError& e) {
      EXPECT_TRUE(c.storage_error) << e.what();
      expect_message_contains(e.what(), {c.file, c.key, c.message});
    } catch (const td::FormatError& e) {
      EXPECT_FALSE(c.storage_error) << e.what();
      expect_message_contains(e.what(), {c.file, c.key, c.message});
    }
    EXPECT_THROW((void)h5.to_tensordict(), td::Error);
  }
}

// 5. Mode "w" (open, from_schema) and to_h5 over a file another process
// holds open: StorageError, and the file keeps its content (HDF5 alone
// truncates first and finds the lock second).
TEST_F(H5Hostile, TruncatingAFileHeldByAnotherProcessIsRefusedAndKeepsIt) {
  const std::string f = file("held.h5");
  td::to_h5(small(), f).close();
  const std::string ready = file("ready"), go = file("go");
  std::thread holder([&] {
    EXPECT_EQ(std::system(python("hold '" + f + "' '" + ready + "' '" + go + "'").c_str()), 0);
  });
  for (int i = 0; i < 6000 && !fs::exists(ready); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(fs::exists(ready));
  const auto size = fs::file_size(f);
  td::H5OpenOptions w;
  w.mode = "w";
  TD_EXPECT_THROW_MSG(td::PersistentTensorDict::open(f, w), td::StorageError, "held.h5",
                      "another process");
  EXPECT_EQ(fs::file_size(f), size);
  TD_EXPECT_THROW_MSG(td::from_schema(td::Schema{{"y", {{2}, torch::kFloat}}}, {4},
                                      td::storage::H5{.filename = f, .mode = "w"}),
                      td::StorageError, "held.h5");
  EXPECT_EQ(fs::file_size(f), size);
  TD_EXPECT_THROW_MSG(td::to_h5(small(), f), td::StorageError, "held.h5", "another process");
  std::ofstream(go).close();
  holder.join();
  auto h5 = td::PersistentTensorDict::from_h5(f);
  EXPECT_TRUE(h5.get("x").equal(torch::arange(6, torch::kFloat)));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), {}), 3);  // no staging file left
}

// 6. A full disk: rows HDF5 buffered cannot be written when the file is
// closed. close() (and flush()) report it; the destructor does not throw.
// In a forked child (single-threaded: it can make a private mount
// namespace) on a 1 MiB tmpfs filled up after the file was created.
void fill_disk(const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  const std::string block(4096, 'x');
  while (out.write(block.data(), static_cast<std::streamsize>(block.size())) && out.flush()) {
  }
}

// Exit 0: the failure was reported as a StorageError; 3: not reported; 4:
// another exception; 77: no tmpfs.
int full_disk_child(const std::string& mount_point, bool by_flush) {
  if (!td_test::mount_small_tmpfs(mount_point, "1m")) return 77;
  try {
    const std::string f = mount_point + "/rows.h5";
    td::Schema schema{{"x", {{1024}, torch::kFloat}}};  // 4 KiB rows: HDF5 buffers them
    auto h5 = td::from_schema(schema, {1000}, td::storage::H5{.filename = f});
    fill_disk(mount_point + "/filler");
    for (int64_t i = 0; i < 8; ++i)
      h5.index_put_({i}, td::TensorDict({{"x", torch::full({1024}, 1.0)}}, {}));
    bool reported = false;
    try {
      if (by_flush) h5.flush();
      h5.close();
    } catch (const td::StorageError& e) {
      std::fprintf(stderr, "full_disk_child: %s\n", e.what());
      if (std::string(e.what()).find("rows.h5") == std::string::npos) return 4;
      reported = true;
    }
    if (reported) {
      // After a failed flush, close() reports again; either way the handle
      // is closed afterwards, and a second close is a no-op.
      try {
        h5.close();
      } catch (const td::StorageError&) {
      }
      if (h5.is_open()) return 4;
      h5.close();
      // Another handle, left to its destructor on the full disk: no throw.
      {
        auto again = td::PersistentTensorDict::from_h5(f, "r+");
        again.index_put_({0}, td::TensorDict({{"x", torch::full({1024}, 2.0)}}, {}));
      }
      return 0;
    }
    std::fprintf(stderr, "full_disk_child: no error\n");
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "full_disk_child: %s\n", e.what());
    return 4;
  }
}

int run_in_child(const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Rows written past HDF5's 64 KiB buffer on a full disk: a write fails with a
// StorageError saying that earlier rows may be lost with it. Exit 0 then; 3:
// no error; 4: another one.
int full_disk_rows_child(const std::string& mount_point) {
  if (!td_test::mount_small_tmpfs(mount_point, "1m")) return 77;
  try {
    const std::string f = mount_point + "/rows.h5";
    auto h5 = td::from_schema(td::Schema{{"x", {{1024}, torch::kFloat}}}, {1000},
                              td::storage::H5{.filename = f});
    fill_disk(mount_point + "/filler");
    try {
      for (int64_t i = 0; i < 64; ++i)
        h5.index_put_({i}, td::TensorDict({{"x", torch::full({1024}, 1.0)}}, {}));
    } catch (const td::StorageError& e) {
      std::fprintf(stderr, "full_disk_rows_child: %s\n", e.what());
      const std::string what = e.what();
      return what.find("rows.h5") != std::string::npos &&
                     what.find("may be lost too") != std::string::npos
                 ? 0
                 : 4;
    }
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "full_disk_rows_child: %s\n", e.what());
    return 4;
  }
}

TEST_F(H5Hostile, AFullDiskIsReportedByCloseAndFlush) {
  {
    const std::string mount_point = file("small_rows");
    fs::create_directories(mount_point);
    const int rc = run_in_child([&] { return full_disk_rows_child(mount_point); });
    ASSERT_NE(rc, 77) << "the child could not mount a small file system";
    EXPECT_EQ(rc, 0) << "rows: child status " << rc;
  }
  for (bool by_flush : {false, true}) {
    const std::string mount_point = file(by_flush ? "small_flush" : "small_close");
    fs::create_directories(mount_point);
    const int rc = run_in_child([&] { return full_disk_child(mount_point, by_flush); });
    ASSERT_NE(rc, 77) << "the child could not mount a small file system";
    EXPECT_EQ(rc, 0) << (by_flush ? "flush" : "close") << ": child status " << rc;
  }
}

// 7. A group option holding components set() refuses: ValueError, before
// the file is opened or truncated.
TEST_F(H5Hostile, GroupOptionsWithDotDotOrEmptyComponentsAreRefused) {
  const std::string f = file("g.h5");
  td::to_h5(small(), f).close();
  const auto size = fs::file_size(f);
  for (const char* group : {"/../..", "..", "a/./b", "a//b", "a/", "/a/..", "."}) {
    SCOPED_TRACE(group);
    for (const char* mode : {"a", "w", "r"}) {
      td::H5OpenOptions o;
      o.mode = mode;
      o.group = group;
      TD_EXPECT_THROW_MSG(td::PersistentTensorDict::open(f, o), td::ValueError, group);
    }
    EXPECT_THROW(td::from_schema(td::Schema{{"y", {{2}, torch::kFloat}}}, {4},
                                 td::storage::H5{.filename = f, .mode = "a", .group = group}),
                 td::ValueError);
  }
  EXPECT_EQ(fs::file_size(f), size);
  {
    auto h5 = td::PersistentTensorDict::from_h5(f);
    EXPECT_EQ(h5.num_keys(), 1u);
    EXPECT_TRUE(h5.contains("x"));
  }
  // What stays accepted: the root and paths of valid keys.
  for (const char* group : {"", "/", "run", "/run/a"}) {
    td::H5OpenOptions o;
    o.mode = "a";
    o.group = group;
    EXPECT_NO_THROW(td::PersistentTensorDict::open(f, o).close()) << group;
  }
}

// 8. Values are converted as LibTorch converts them (as a tensordict in
// memory does), never clamped by HDF5's conversion: -1 written into uint8
// and uint32 leaves wraps around.
TEST_F(H5Hostile, WritesConvertAsLibTorchNotAsHdf5) {
  const std::string f = file("u.h5");
  td::TensorDict t({{"u8", torch::zeros({4}, torch::kUInt8)},
                    {"u32", torch::zeros({4}, torch::kUInt32)},
                    {"f", torch::zeros({4}, torch::kFloat)}},
                   {4});
  auto h5 = td::to_h5(t, f);
  const auto minus_one = torch::full({4}, -1, torch::kLong);
  h5.set_("u8", minus_one);
  h5.index_put_({1}, td::TensorDict({{"u32", torch::tensor(int64_t{-1})}}, {}));
  h5.set_("f", torch::full({4}, 1e300, torch::kDouble));
  t.set_("u8", minus_one);
  t.index_put_({1}, td::TensorDict({{"u32", torch::tensor(int64_t{-1})}}, {}));
  t.set_("f", torch::full({4}, 1e300, torch::kDouble));
  h5.close();
  auto back = td::PersistentTensorDict::from_h5(f);
  EXPECT_TRUE(back.get("u8").equal(t.get("u8"))) << back.get("u8");
  EXPECT_TRUE(back.get("u32").equal(t.get("u32"))) << back.get("u32").to(torch::kLong);
  EXPECT_TRUE(back.get("f").equal(t.get("f"))) << back.get("f");
}

}  // namespace
