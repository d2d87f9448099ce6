// Saves that fail or meet hostile directories (issue #19, group 3): the
// earlier save survives whole, nothing is written outside the prefix.
#include "reliability/reliability.h"

#include <tensordict/storage/replaced_saves.h>
#include <tensordict/tensordict.h>

#include <torch/torch.h>

namespace td = tensordict;
using namespace td_rel;

namespace {

void expect_first_save(const fs::path& dir) {
  auto back = td::load_memmap(dir.string());
  EXPECT_TRUE(back.get("a").equal(torch::arange(4, torch::kFloat)));
  EXPECT_TRUE(back.get({"sub", "b"}).equal(torch::ones({4, 2}, torch::kLong)));
  EXPECT_EQ(back.at("s").non_tensor().data(), "old");
  EXPECT_FALSE(back.contains("z"));
}

// Nothing but the save itself in `parent`: no staging directory left behind.
void expect_no_leftovers(const fs::path& parent, const std::string& name) {
  for (const auto& e : fs::directory_iterator(parent))
    EXPECT_TRUE(e.path().filename() == name || e.path().filename().string()[0] != '.')
        << "left behind: " << e.path();
}

}  // namespace

// A save over an earlier one that fails on one key (after other keys were
// written) leaves the earlier save as it was, loadable.
TEST_F(Reliability, ASaveFailingOnOneKeyLeavesTheEarlierSave) {
  const fs::path dir = root / "p";
  first_save().memmap(dir.string());
  auto attempt = [&](const std::string& key, const at::Tensor& leaf) {
    td::TensorDict t(std::vector<int64_t>{4});
    t.set("a", torch::full({4}, 9.0));
    t.set("z", torch::zeros({4}));
    t.set(key, leaf);
    EXPECT_THROW(t.memmap(dir.string()), td::Error) << key;
    expect_first_save(dir);
    expect_no_leftovers(root, "p");
  };
  attempt(std::string(300, 'k'), torch::ones({4}));  // file name too long
  attempt("m", torch::empty({4}, torch::TensorOptions().device(at::kMeta)));
  attempt("sp", torch::eye(4).to_sparse());
}

// memmap() into a prefix whose nested directory is a symbolic link to
// elsewhere writes nothing there.
TEST_F(Reliability, MemmapDoesNotWriteThroughASymlinkedNestedDirectory) {
  const fs::path dir = root / "p";
  first_save().memmap(dir.string());
  fs::create_directories(root / "elsewhere");
  write_text(root / "elsewhere" / "keep.txt", "keep");
  fs::remove_all(dir / "sub");
  fs::create_directory_symlink(root / "elsewhere", dir / "sub");
  td::TensorDict t(std::vector<int64_t>{4});
  t.set({"sub", "b"}, torch::full({4, 2}, 5, torch::kLong));
  t.memmap(dir.string());
  EXPECT_EQ(std::vector<fs::path>(fs::directory_iterator(root / "elsewhere"), {}),
            std::vector<fs::path>{root / "elsewhere" / "keep.txt"});
  EXPECT_TRUE(
      td::load_memmap(dir.string()).get({"sub", "b"}).equal(torch::full({4, 2}, 5, torch::kLong)));
}

// A non-tensor written in place into a loaded directory whose nested
// directory was replaced by a symbolic link: refused, nothing written there.
TEST_F(Reliability, NonTensorWritesDoNotFollowASymlinkedDirectory) {
  const fs::path dir = root / "p";
  td::TensorDict t(std::vector<int64_t>{4});
  t.set({"sub", "s"}, td::NonTensorData("old"));
  t.memmap(dir.string());
  auto loaded = td::load_memmap(dir.string());
  loaded.lock_();  // writes in place reach the files
  fs::rename(dir / "sub", root / "elsewhere");
  fs::create_directory_symlink(root / "elsewhere", dir / "sub");
  const std::string before = read_text(root / "elsewhere" / "s" / "meta.json");
  EXPECT_THROW(loaded.update_(td::TensorDict(
                   {{"sub", td::TensorDict({{"s", td::NonTensorData("new")}}, {4})}}, {4})),
               td::StorageError);
  EXPECT_EQ(read_text(root / "elsewhere" / "s" / "meta.json"), before);
}

// A full disk while saving over earlier saves (a memmap directory, a state
// dict file): the earlier ones stay whole. The child process does it on a
// 2 MiB tmpfs of its own.
TEST_F(Reliability, AFullDiskLeavesTheEarlierSavesWhole) {
  fs::create_directories(root / "small");
  const int rc = run_child({"fullsave", (root / "small").string()});
  ASSERT_NE(rc, 77) << "the child could not mount a small file system";
  EXPECT_EQ(rc, 0) << "child status " << rc;
}

// save_state_dict writes beside the file and renames: no temporary is left,
// and the file is replaced whole.
TEST_F(Reliability, SaveStateDictReplacesTheFileWhole) {
  const std::string file = (root / "sd.pt").string();
  td::TensorDict t;
  t.set("a", torch::arange(5, torch::kFloat));
  td::save_state_dict(t.state_dict(), file);
  t.set("a", torch::arange(7, torch::kFloat));
  td::save_state_dict(t.state_dict(), file);
  EXPECT_TRUE(td::load_state_dict_file(file).tensor("a").equal(torch::arange(7, torch::kFloat)));
  EXPECT_EQ(std::distance(fs::directory_iterator(root), {}), 1);
  // Through a symbolic link, the file it names is replaced, not the link.
  fs::create_symlink(root / "sd.pt", root / "link.pt");
  td::save_state_dict(t.state_dict(), (root / "link.pt").string());
  EXPECT_TRUE(fs::is_symlink(root / "link.pt"));
}

// A save over a save deletes every name of the earlier one before it returns
// (the freeing of its large files goes on in the background): nothing is
// left beside it, and tensors still mapped from the earlier files keep their
// values.
TEST_F(Reliability, ASaveOverASaveLeavesNothingBesideIt) {
  const fs::path dir = root / "p";
  std::vector<td::TensorDictBase> loaded;
  for (int i = 0; i < 6; ++i) {
    td::TensorDict t(std::vector<int64_t>{4});
    t.set("big", torch::full({4, 100000}, i));  // 1.6 MB: freed in the background
    for (int k = 0; k < 20; ++k) t.set("k" + std::to_string(k), torch::full({4}, i));
    t.memmap(dir.string());
    expect_no_leftovers(root, "p");
    loaded.push_back(td::load_memmap(dir.string()));
  }
  for (int i = 0; i < 6; ++i) {
    const auto& t = loaded[static_cast<std::size_t>(i)];
    EXPECT_TRUE(t.get("k19").equal(torch::full({4}, i))) << i;
    EXPECT_TRUE(t.get("big").equal(torch::full({4, 100000}, i))) << i;
  }
  td::wait_for_replaced_saves();
  EXPECT_EQ(td::load_memmap(dir.string()).keys().size(), 21u);
}

// Near a full disk, a save that needs the space of a replaced save still
// being freed waits for it and succeeds.
TEST_F(Reliability, ASaveWaitsForTheSpaceOfReplacedSaves) {
  fs::create_directories(root / "small");
  const int rc = run_child({"resave", (root / "small").string()});
  ASSERT_NE(rc, 77) << "the child could not mount a small file system";
  EXPECT_EQ(rc, 0) << "child status " << rc;
}

// fork() while the background thread deletes: the child saves over its own
// saves and waits for their deletion without deadlocking on the parent's
// thread state.
TEST_F(Reliability, AForkedChildSavesWhileTheParentDeletes) {
  const fs::path dir = root / "p";
  for (int i = 0; i < 4; ++i) first_save().memmap(dir.string());
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(60);  // a deadlock ends the child instead of the test run
    int rc = 0;
    try {
      const fs::path mine = root / "child";
      for (int i = 0; i < 4; ++i) first_save().memmap(mine.string());
      td::wait_for_replaced_saves();
      if (!td::load_memmap(mine.string()).get("a").equal(torch::arange(4, torch::kFloat))) rc = 4;
      if (std::distance(fs::directory_iterator(root), {}) != 2) rc = 5;  // "p" and "child"
    } catch (...) {
      rc = 3;
    }
    ::_exit(rc);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  td::wait_for_replaced_saves();
  expect_first_save(dir);
}
