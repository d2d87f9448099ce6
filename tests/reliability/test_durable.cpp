// Durable saves (issue #19, crash-safe saves): with durable on, every file
// and directory written is fsync()ed before the rename that installs the
// save, and the directory holding it after; without it nothing is synced; a
// failed fsync is a StorageError that leaves the earlier save as it was; and
// Node::flush msyncs the mapped leaves. The calls are seen for real: the
// child process runs with libtensordict_sync_spy.so preloaded, which records
// each fsync, msync and rename (and fails the fsyncs it is told to).
#include "reliability/reliability.h"

#include <tensordict/tensordict.h>

#include <torch/torch.h>

#include <cstdlib>
#include <cstring>
#include <sstream>

namespace td = tensordict;
using namespace td_rel;

namespace {

using Record = std::vector<std::string>;  // {"fsync", path} or {"rename", from, to}

struct SpiedRun {
  int status = -1;
  std::vector<Record> log;
  std::string err;  // the child's stderr
};

// Runs `tensordict_reliability_child durable <op> <path> <on>` with the spy
// preloaded, fsync failing for paths matching `fail` (an fnmatch pattern).
// The spy's log and the child's stderr go to `where`.
SpiedRun run_spied(const fs::path& where, const std::string& op, const fs::path& path, bool on,
                   const std::string& fail = "") {
  const fs::path log = where / "spy.log", err = where / "child.err";
  fs::remove(log);
  std::vector<std::string> env;
  std::string asan = "verify_asan_link_order=0";  // the spy comes before libasan
  for (char** e = environ; *e; ++e) {
    const std::string var = *e;
    if (var.rfind("LD_PRELOAD=", 0) == 0 || var.rfind("TD_SYNC_SPY_", 0) == 0) continue;
    if (var.rfind("ASAN_OPTIONS=", 0) == 0) {
      asan = var.substr(13) + ":" + asan;
      continue;
    }
    env.push_back(var);
  }
  env.push_back(std::string("LD_PRELOAD=") + TD_SYNC_SPY);
  env.push_back("TD_SYNC_SPY_LOG=" + log.string());
  env.push_back("TD_SYNC_SPY_FAIL=" + fail);
  env.push_back("ASAN_OPTIONS=" + asan);
  std::vector<char*> envp;
  for (auto& v : env) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string exe = TD_RELIABILITY_CHILD;
  std::vector<std::string> args{exe, "durable", op, path.string(), on ? "1" : "0"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  SpiedRun run;
  if (::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), envp.data()) == 0)
    run.status = wait_child(pid);
  posix_spawn_file_actions_destroy(&actions);
  std::istringstream lines(read_text(log));
  for (std::string line; std::getline(lines, line);) {
    Record r;
    std::istringstream fields(line);
    for (std::string f; std::getline(fields, f, '\t');) r.push_back(f);
    run.log.push_back(std::move(r));
  }
  run.err = read_text(err);
  return run;
}

// Positions in the log of the records of `kind` ("fsync", "msync", ...)
// whose path satisfies `match`.
template <class Match>
std::vector<std::size_t> find(const SpiedRun& run, const std::string& kind, Match match) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < run.log.size(); ++i)
    if (run.log[i].size() >= 2 && run.log[i][0] == kind && match(run.log[i])) out.push_back(i);
  return out;
}

std::vector<std::size_t> find_path(const SpiedRun& run, const std::string& kind,
                                   const fs::path& path) {
  return find(run, kind, [&](const Record& r) { return r[1] == path.string(); });
}

std::size_t count_syncs(const SpiedRun& run) {
  std::size_t n = 0;
  for (const auto& r : run.log)
    if (r[0] == "fsync" || r[0] == "fdatasync" || r[0] == "msync") ++n;
  return n;
}

std::string dump(const SpiedRun& run) {
  std::string out = "child exit " + std::to_string(run.status) + ", stderr: " + run.err + "log:\n";
  for (const auto& r : run.log) {
    for (const auto& f : r) out += f + " ";
    out += "\n";
  }
  return out;
}

void expect_save(const fs::path& dir, float a, int64_t b, const std::string& s) {
  auto back = td::load_memmap(dir.string());
  EXPECT_TRUE(back.get("a").equal(a < 0 ? torch::arange(4, torch::kFloat) : torch::full({4}, a)));
  EXPECT_TRUE(back.get({"sub", "b"}).equal(torch::full({4, 2}, b, torch::kLong)));
  EXPECT_EQ(back.at("s").non_tensor().data(), s);
}
void expect_first_save(const fs::path& dir) { expect_save(dir, -1, 1, "old"); }
void expect_new_save(const fs::path& dir) { expect_save(dir, 7, 3, "new"); }

// Nothing but the saves (and the spy's files) in `parent`: no staging
// directory or temporary file left behind.
void expect_no_leftovers(const fs::path& parent) {
  for (const auto& e : fs::directory_iterator(parent))
    EXPECT_NE(e.path().filename().string()[0], '.') << "left behind: " << e.path();
}

// The files and directories of first_save()'s layout, relative to the save.
const std::vector<std::string> kFiles = {"a.memmap",    "sub/b.memmap",
                                         "meta.json",   "sub/meta.json",
                                         "s/meta.json", "s/_tensordict/meta.json"};
const std::vector<std::string> kDirs = {"sub", "s", "s/_tensordict"};

// A durable save over `dir`: each file and directory of the staging tree
// was fsync()ed before the one rename that installed it at `dir`, and the
// directory holding `dir` after that rename.
void expect_durable_install(const SpiedRun& run, const fs::path& dir) {
  const auto installs =
      find(run, "rename", [&](const Record& r) { return r.size() == 3 && r[2] == dir.string(); });
  ASSERT_EQ(installs.size(), 1u) << dump(run);
  const std::size_t at = installs[0];
  const fs::path stage = run.log[at][1];
  EXPECT_EQ(stage.parent_path(), dir.parent_path());
  EXPECT_EQ(stage.filename().string().rfind("." + dir.filename().string() + ".tdsave-", 0), 0u);
  auto synced_before = [&](const fs::path& p) {
    const auto at_p = find_path(run, "fsync", p);
    return !at_p.empty() && at_p.front() < at;
  };
  for (const auto& f : kFiles) EXPECT_TRUE(synced_before(stage / f)) << f << "\n" << dump(run);
  for (const auto& d : kDirs) EXPECT_TRUE(synced_before(stage / d)) << d << "\n" << dump(run);
  EXPECT_TRUE(synced_before(stage)) << "the staging directory\n" << dump(run);
  const auto parent = find_path(run, "fsync", dir.parent_path());
  ASSERT_FALSE(parent.empty()) << "the parent directory is not synced\n" << dump(run);
  EXPECT_GT(parent.back(), at) << "the parent directory is synced before the rename";
}

// A fresh directory (its real path: the spy records resolved paths) with
// the earlier save at `dir`.
class Durable : public Reliability {
 protected:
  void SetUp() override {
    Reliability::SetUp();
    base = fs::canonical(root);
    dir = base / "p";
    first_save().memmap(dir.string());
  }
  fs::path base, dir;
};

}  // namespace

TEST_F(Durable, MemmapSyncsEveryFileAndDirectoryBeforeTheRename) {
  const auto run = run_spied(base, "memmap", dir, true);
  ASSERT_EQ(run.status, 0) << dump(run);
  expect_durable_install(run, dir);
  // No more than the save needs: the 6 files, the 4 directories of the
  // staging tree, the parent.
  EXPECT_EQ(count_syncs(run), kFiles.size() + kDirs.size() + 2) << dump(run);
  expect_new_save(dir);
  expect_no_leftovers(base);
}

// memmap_ at the prefix the tensordict was loaded from hard-links its leaf
// files instead of copying them: they are synced as well (writes through
// their mappings may not be on the disk yet).
TEST_F(Durable, MemmapInPlaceSyncsTheLinkedLeafFiles) {
  const auto run = run_spied(base, "memmap_", dir, true);
  ASSERT_EQ(run.status, 0) << dump(run);
  expect_durable_install(run, dir);
  expect_first_save(dir);
}

TEST_F(Durable, AMemmapWithoutDurableSyncsNothing) {
  for (const std::string op : {"memmap", "memmap_", "schema"}) {
    const auto run = run_spied(base, op, op == "schema" ? base / "q" : dir, false);
    ASSERT_EQ(run.status, 0) << op << "\n" << dump(run);
    EXPECT_EQ(count_syncs(run), 0u) << op << "\n" << dump(run);
    // Still written beside and renamed into place.
    EXPECT_EQ(find(run, "rename", [](const Record&) { return true; }).size(), 1u) << dump(run);
  }
  expect_new_save(dir);
}

// from_schema("memmap", {"durable": true}): the allocated file is synced too.
TEST_F(Durable, FromSchemaSyncsTheAllocatedFiles) {
  const fs::path fresh = base / "q";  // a new save
  const auto run = run_spied(base, "schema", fresh, true);
  ASSERT_EQ(run.status, 0) << dump(run);
  const auto installs =
      find(run, "rename", [&](const Record& r) { return r[2] == fresh.string(); });
  ASSERT_EQ(installs.size(), 1u) << dump(run);
  const fs::path stage = run.log[installs[0]][1];
  for (const auto& p : {stage / "x.memmap", stage / "meta.json", stage}) {
    const auto at = find_path(run, "fsync", p);
    ASSERT_FALSE(at.empty()) << p << "\n" << dump(run);
    EXPECT_LT(at.front(), installs[0]);
  }
  const auto parent = find_path(run, "fsync", base);
  ASSERT_FALSE(parent.empty()) << dump(run);
  EXPECT_GT(parent.back(), installs[0]);
  EXPECT_EQ(td::load_memmap(fresh.string()).get("x").sizes(), (std::vector<int64_t>{5, 3}));
}

// A failed fsync of a leaf file, of a meta.json or of a directory of the
// staging tree: StorageError naming it, no rename, the earlier save whole.
TEST_F(Durable, AFailedFsyncLeavesTheEarlierSave) {
  for (const auto& [pattern, named] :
       std::vector<std::pair<std::string, std::string>>{{"*/sub/b.memmap", "/sub/b.memmap"},
                                                        {"*/sub/meta.json", "/sub/meta.json"},
                                                        {"*/s/_tensordict", "/s/_tensordict"},
                                                        {"*/.p.tdsave-*[0-9]", ".p.tdsave-"}}) {
    const auto run = run_spied(base, "memmap", dir, true, pattern);
    EXPECT_EQ(run.status, 5) << pattern << "\n" << dump(run);
    EXPECT_NE(run.err.find("cannot fsync"), std::string::npos) << run.err;
    EXPECT_NE(run.err.find(named), std::string::npos) << run.err;
    EXPECT_EQ(find(run, "fail", [](const Record&) { return true; }).size(), 1u) << dump(run);
    EXPECT_TRUE(find(run, "rename", [](const Record&) { return true; }).empty()) << dump(run);
    expect_first_save(dir);
    expect_no_leftovers(base);
  }
}

// The parent directory cannot be synced after the rename: the new save is in
// place, and the StorageError says its rename may not be durable.
TEST_F(Durable, AFailedFsyncOfTheParentIsReportedAfterTheRename) {
  const auto run = run_spied(base, "memmap", dir, true, base.string());
  EXPECT_EQ(run.status, 5) << dump(run);
  EXPECT_NE(run.err.find("holds the new save"), std::string::npos) << run.err;
  expect_new_save(dir);
}

TEST_F(Durable, SaveStateDictSyncsTheFileThenRenamesThenSyncsTheDirectory) {
  const fs::path file = base / "sd.pt";
  td::save_state_dict(first_save().state_dict(), file.string());
  const auto run = run_spied(base, "state_dict", file, true);
  ASSERT_EQ(run.status, 0) << dump(run);
  const auto installs =
      find(run, "rename", [&](const Record& r) { return r.size() == 3 && r[2] == file.string(); });
  ASSERT_EQ(installs.size(), 1u) << dump(run);
  const std::string tmp = run.log[installs[0]][1];
  EXPECT_EQ(fs::path(tmp).filename().string().rfind(".sd.pt.tdtmp-", 0), 0u) << tmp;
  const auto file_sync = find_path(run, "fsync", tmp);
  ASSERT_EQ(file_sync.size(), 1u) << dump(run);
  EXPECT_LT(file_sync[0], installs[0]);
  const auto dir_sync = find_path(run, "fsync", base);
  ASSERT_EQ(dir_sync.size(), 1u) << dump(run);
  EXPECT_GT(dir_sync[0], installs[0]);
  EXPECT_EQ(count_syncs(run), 2u) << dump(run);
  EXPECT_TRUE(td::load_state_dict_file(file.string()).tensor("a").equal(torch::full({4}, 7.0f)));

  const auto plain = run_spied(base, "state_dict", file, false);
  ASSERT_EQ(plain.status, 0) << dump(plain);
  EXPECT_EQ(count_syncs(plain), 0u) << dump(plain);
  EXPECT_EQ(find(plain, "rename", [](const Record&) { return true; }).size(), 1u);
}

TEST_F(Durable, AFailedFsyncLeavesTheEarlierStateDictFile) {
  const fs::path file = base / "sd.pt";
  td::save_state_dict(first_save().state_dict(), file.string());
  const std::string before = read_text(file);
  const auto run = run_spied(base, "state_dict", file, true, "*/.sd.pt.tdtmp-*");
  EXPECT_EQ(run.status, 5) << dump(run);
  EXPECT_NE(run.err.find("cannot fsync"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(".sd.pt.tdtmp-"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("is left as it was"), std::string::npos) << run.err;
  EXPECT_TRUE(find(run, "rename", [](const Record&) { return true; }).empty()) << dump(run);
  EXPECT_EQ(read_text(file), before);
  EXPECT_TRUE(
      td::load_state_dict_file(file.string()).tensor("a").equal(torch::arange(4, torch::kFloat)));
  expect_no_leftovers(base);
}

// Node::flush on a loaded, memory-mapped tensordict msyncs each mapped leaf
// (nested levels included) and fsyncs its non-tensor files.
TEST_F(Durable, FlushMsyncsTheMappedLeavesOfAMemmapTensordict) {
  const auto run = run_spied(base, "flush", dir, true);
  ASSERT_EQ(run.status, 0) << dump(run);
  EXPECT_EQ(find_path(run, "msync", dir / "a.memmap").size(), 1u) << dump(run);
  EXPECT_EQ(find_path(run, "msync", dir / "sub" / "b.memmap").size(), 1u) << dump(run);
  EXPECT_EQ(find_path(run, "fsync", dir / "s" / "meta.json").size(), 1u) << dump(run);
  EXPECT_EQ(find_path(run, "fsync", dir / "s").size(), 1u) << dump(run);
  auto back = td::load_memmap(dir.string());
  EXPECT_EQ(back.get("a")[0].item<float>(), 42.0f);
  EXPECT_EQ(back.get({"sub", "b"})[1][0].item<int64_t>(), 42);

  const auto plain = run_spied(base, "flush", dir, false);
  ASSERT_EQ(plain.status, 0) << dump(plain);
  EXPECT_EQ(count_syncs(plain), 0u) << dump(plain);
}
