// The real Python tensordict as a peer, in a child process (ctest -L python):
// a memmap directory written by C++ is read, checked and extended by Python,
// and Python's directory is read back and checked here. The values are
// formulas both sides compute (peer_memmap.py, expected()).
#include "pch.h"

#include <tensordict/storage/memmap.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace td = tensordict;
namespace fs = std::filesystem;

namespace {

struct PeerRun {
  int rc;
  std::string out;
};

// Runs peer_memmap.py with `args`, its output captured in `dir`.
PeerRun run_peer(const fs::path& dir, const std::string& args) {
  const fs::path log = dir / "peer.out";
  const std::string cmd = std::string(TENSORDICT_PYTHON) + " " + TENSORDICT_PEER_SCRIPT + " " +
                          args + " > '" + log.string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(log);
  return {rc, std::string((std::istreambuf_iterator<char>(in)), {})};
}

fs::path fresh_dir(const std::string& name) {
  fs::path d =
      fs::temp_directory_path() / ("td-python-peer-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// expected() of peer_memmap.py.
td::TensorDict expected() {
  auto r = torch::arange(12);
  td::TensorDict data(
      {{"obs", (r.reshape({4, 3}) / 2).to(torch::kFloat)},
       {"action", torch::arange(4) * 3},
       {"done", torch::arange(4) % 2 == 0},
       {"next",
        td::TensorDict(
            {{"reward", (torch::arange(4).reshape({4, 1}) / 4).to(torch::kDouble)},
             {"obs_bf16", torch::arange(8).reshape({4, 2}).to(torch::kBFloat16)},
             {"deep", td::TensorDict({{"code", (torch::arange(4) - 2).to(torch::kInt16)}}, {4})}},
            {4})}},
      {4});
  data.set_non_tensor("label", "cartpole");
  return data;
}

void expect_leaf(const td::TensorDictBase& got, const td::NestedKey& key,
                 const torch::Tensor& want) {
  SCOPED_TRACE(key.join());
  ASSERT_TRUE(got.contains(key));
  const torch::Tensor leaf = got.get(key);
  EXPECT_EQ(leaf.scalar_type(), want.scalar_type());
  EXPECT_EQ(leaf.sizes(), want.sizes());
  EXPECT_TRUE(leaf.scalar_type() == want.scalar_type() && leaf.sizes() == want.sizes() &&
              torch::equal(leaf, want))
      << leaf << " expected " << want;
}

}  // namespace

TEST(PythonPeer, IsTheRealTensordict) {
  const fs::path dir = fresh_dir("version");
  const PeerRun run = run_peer(dir, "version");
  ASSERT_EQ(run.rc, 0) << run.out;
  EXPECT_NE(run.out.find("tensordict " TENSORDICT_PYTHON_TENSORDICT_VERSION), std::string::npos)
      << run.out;
  fs::remove_all(dir);
}

TEST(PythonPeer, MemmapRoundTripThroughPython) {
  const fs::path dir = fresh_dir("memmap");
  const td::TensorDict data = expected();
  data.memmap((dir / "from_cpp").string());

  const PeerRun run = run_peer(
      dir, "extend '" + (dir / "from_cpp").string() + "' '" + (dir / "from_python").string() + "'");
  ASSERT_EQ(run.rc, 0) << run.out;
  ASSERT_NE(run.out.find("OK"), std::string::npos) << run.out;

  td::TensorDictBase back = td::load_memmap((dir / "from_python").string());
  EXPECT_EQ(back.batch_size(), std::vector<int64_t>({4}));
  expect_leaf(back, {"obs"}, data.get("obs") * 2);
  expect_leaf(back, {"action"}, data.get("action"));
  expect_leaf(back, {"done"}, data.get("done"));
  expect_leaf(back, {"next", "reward"}, data.get({"next", "reward"}));
  expect_leaf(back, {"next", "obs_bf16"}, data.get({"next", "obs_bf16"}));
  expect_leaf(back, {"next", "deep", "code"}, data.get({"next", "deep", "code"}));
  expect_leaf(back, {"next", "done_py"}, data.get("done").logical_not());
  expect_leaf(back, {"py", "added"}, torch::arange(4, torch::kInt32) + 100);
  EXPECT_EQ(back.get_non_tensor("label"), "from python");
  EXPECT_EQ(back.keys(/*include_nested=*/true, /*leaves_only=*/true).size(), 8u);  // + label
  fs::remove_all(dir);
}
