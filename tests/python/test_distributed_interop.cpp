// Interop with the real Python tensordict: distributed point to point
// (TransferOptions::wire = Wire::Python, docs/distributed.md "Python's wire").
//
// One Python process (distributed_peer.py) is rank 1 of a Gloo group on
// loopback, for the whole suite; this program is rank 0. Each case names
// itself to the peer through the TCPStore ("case/N" = "NAME DIR"), runs its
// C++ half while the peer runs the Python half (td.send / recv / isend /
// irecv), and reads the peer's verdict ("result/N"). What crosses is checked
// against the truth the sending side wrote (tests/python/truth.py), not
// against anything decoded by the library. Cases whose structures differ run
// on a group of their own (built on the store under "group/NAME", Python's
// group_src / group_dst), so that a timeout, which closes Gloo's connections,
// leaves the suite's group alone.
#include "pch.h"

#include "python/peer.h"
#include "support/gloo_group.h"

#include <tensordict/distributed.h>
#include <tensordict/lazy_stack.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <csignal>
#include <fstream>
#include <string>
#include <thread>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace td = tensordict;
using namespace td_python;
using namespace std::chrono_literals;

namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

at::Tensor random_of(std::vector<int64_t> shape, at::ScalarType dtype) {
  if (dtype == at::kBool) return at::randint(0, 2, shape, at::kLong).to(at::kBool);
  if (dtype == at::kByte) return at::randint(0, 255, shape, at::kLong).to(dtype);
  if (at::isIntegralType(dtype, false)) return at::randint(-100, 100, shape, at::kLong).to(dtype);
  if (at::isComplexType(dtype)) return at::randn(shape, at::kComplexDouble).to(dtype);
  return at::randn(shape, at::kDouble).to(dtype);
}

// distributed_peer.py's mixed(): nested, every dtype, keys inserted out of
// order, "a" (nested) beside "a-b" (which sorts between "a" and "a.x" when
// keys are joined with dots), "Z", an empty leaf. Zeros, or random values.
td::TensorDict mixed(bool zeros) {
  auto t = [zeros](std::vector<int64_t> shape, at::ScalarType dtype) {
    return zeros ? at::zeros(shape, at::TensorOptions().dtype(dtype)) : random_of(shape, dtype);
  };
  const std::vector<int64_t> b{3};
  td::TensorDict info(b);
  info.set("z", t({3}, at::kBFloat16));
  info.set("c", t({3, 2}, at::kComplexFloat));
  td::TensorDict next(b);
  next.set("obs", t({3, 4}, at::kHalf));
  next.set("pixels", t({3, 2, 2}, at::kByte));
  next.set("info", info);
  td::TensorDict a(b);
  a.set("x", t({3}, at::kChar));
  td::TensorDict out(b);
  out.set("obs", t({3, 4}, at::kFloat));
  out.set("action", t({3, 2}, at::kLong));
  out.set("reward", t({3, 1}, at::kDouble));
  out.set("done", t({3}, at::kBool));
  out.set("next", next);
  out.set("a-b", t({3}, at::kShort));
  out.set("a", a);
  out.set("Z", t({3}, at::kInt));
  out.set("c128", t({3}, at::kComplexDouble));
  out.set("empty", t({3, 0}, at::kFloat));
  return out;
}

// The structure the mismatch cases receive into: obs float32 [2, 3], id int64 [2].
td::TensorDict small_target() {
  td::TensorDict out(std::vector<int64_t>{2});
  out.set("obs", at::zeros({2, 3}));
  out.set("id", at::zeros({2}, at::kLong));
  return out;
}

td::TensorDict lazy_member(bool zeros, double offset) {
  td::TensorDict m;
  m.set("x", zeros ? at::zeros({3}) : at::arange(3.0) + offset);
  m.set("y", zeros ? at::zeros({2}, at::kLong) : at::arange(2, at::kLong) + int64_t(offset));
  return m;
}

td::TransferOptions python_wire() {
  td::TransferOptions o;
  o.wire = td::Wire::Python;
  o.timeout = 30s;
  return o;
}

}  // namespace

class DistributedPython : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fresh_dir("distributed");
    c10d::TCPStoreOptions opts;
    opts.port = 0;  // a free port, read back below
    opts.isServer = true;
    opts.waitWorkers = false;
    opts.timeout = 120s;
    store_ = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
    const std::string port = std::to_string(store_->getPort());
    const std::string script =
        (fs::path(TENSORDICT_PEER_SCRIPT).parent_path() / "distributed_peer.py").string();
    const std::string log = (dir_ / "peer.log").string();
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::setenv("GLOO_SOCKET_IFNAME", "lo", 1);
      ::execl(TENSORDICT_PYTHON, TENSORDICT_PYTHON, script.c_str(), port.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ASSERT_GT(pid_, 0);
    // Python's init_process_group on a given store: the group's name "0",
    // then the CPU backend's "cpu".
    c10::intrusive_ptr<c10d::Store> s = c10::make_intrusive<c10d::PrefixStore>("0/", store_);
    s = c10::make_intrusive<c10d::PrefixStore>("cpu/", s);
    pg_ = td_test::make_gloo_group(s, 0, 2, 60s);
  }

  static void TearDownTestSuite() {
    if (pid_ > 0) {
      store_->set("case/" + std::to_string(next_case_), bytes("__end__ -"));
      int status = 0;
      bool exited = false;
      for (int i = 0; i < 300 && !exited; ++i) {
        exited = ::waitpid(pid_, &status, WNOHANG) == pid_;
        if (!exited) std::this_thread::sleep_for(100ms);
      }
      if (!exited) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
      }
      EXPECT_TRUE(exited && WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << "the Python peer did not end cleanly:\n"
          << read_text(dir_ / "peer.log");
    }
    pg_.reset();
    store_.reset();
    fs::remove_all(dir_);
  }

  // Runs case `name`: the peer's half starts, `cpp` runs here, then the
  // peer's verdict.
  template <class F>
  void exchange(const std::string& name, F&& cpp) {
    const fs::path case_dir = dir_ / name;
    fs::create_directories(case_dir);
    const int n = next_case_++;
    store_->set("case/" + std::to_string(n), bytes(name + " " + case_dir.string()));
    cpp(case_dir);
    std::vector<uint8_t> result;
    try {
      result = store_->get("result/" + std::to_string(n));
    } catch (const std::exception& e) {
      FAIL() << "no verdict from the Python peer on " << name << ": " << e.what() << "\n"
             << read_text(dir_ / "peer.log");
    }
    const std::string verdict(result.begin(), result.end());
    EXPECT_EQ(verdict, "OK") << "the Python peer on " << name << ":\n" << verdict;
  }

  // A group of its own for case `name` (the peer's raw_group(name)).
  static c10::intrusive_ptr<c10d::ProcessGroup> raw_group(const std::string& name) {
    return td_test::make_gloo_group(c10::make_intrusive<c10d::PrefixStore>("group/" + name, store_),
                                    0, 2, 20s);
  }

  // Python sends a structure other than small_target(): recv must throw `E`
  // (naming `key` when given), well within its timeout.
  template <class E>
  void expect_mismatch(const std::string& name, const std::string& key = "",
                       td::TransferMode mode = td::TransferMode::Auto) {
    exchange(name, [&](const fs::path&) {
      auto group = raw_group(name);
      td::TensorDict target = small_target();
      td::TransferOptions o = python_wire();
      o.timeout = 3s;
      o.mode = mode;
      const auto start = std::chrono::steady_clock::now();
      try {
        td::recv(target, *group, 1, o);
        ADD_FAILURE() << name << ": recv did not throw";
      } catch (const E& e) {
        if constexpr (std::is_same_v<E, td::StructureError>) {
          if (!key.empty()) EXPECT_EQ(e.key(), td::NestedKey(key)) << e.what();
          EXPECT_NE(std::string(e.what()).find("nothing was written"), std::string::npos)
              << e.what();
          EXPECT_TRUE(at::equal(target.get("obs"), at::zeros({2, 3}))) << "written anyway";
        }
        if constexpr (std::is_same_v<E, td::TimeoutError>)
          EXPECT_GE(std::chrono::steady_clock::now() - start, 2900ms) << e.what();
      } catch (const std::exception& e) {
        ADD_FAILURE() << name << ": not the error expected: " << e.what();
      }
      EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
      store_->set("done/" + name, bytes("1"));
    });
  }

  static inline fs::path dir_;
  static inline c10::intrusive_ptr<c10d::TCPStore> store_;
  static inline c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  static inline pid_t pid_ = -1;
  static inline int next_case_ = 0;
};

// ---- Python sends, C++ receives --------------------------------------------------------

TEST_F(DistributedPython, PythonSendCppRecv) {
  exchange("py_send", [](const fs::path& dir) {
    td::TensorDict got = mixed(true);
    td::recv(got, *pg_, 1, python_wire());
    EXPECT_TRUE(matches_truth(got, dir / "truth"));
  });
}

TEST_F(DistributedPython, PythonIsendCppIrecv) {
  exchange("py_isend", [](const fs::path& dir) {
    td::TensorDict got = mixed(true);
    td::Work w = td::irecv(got, *pg_, 1, python_wire());
    w.wait();
    EXPECT_TRUE(w.is_completed());
    EXPECT_TRUE(matches_truth(got, dir / "truth"));
  });
}

TEST_F(DistributedPython, PythonSendInitTag) {
  exchange("py_send_init_tag", [](const fs::path& dir) {
    td::TensorDict got = mixed(true);
    td::TransferOptions o = python_wire();
    o.tag = 100;
    td::recv(got, *pg_, 1, o);
    EXPECT_TRUE(matches_truth(got, dir / "truth"));
  });
}

TEST_F(DistributedPython, PythonSendPseudoRand) {
  exchange("py_send_pseudo_rand", [](const fs::path& dir) {
    td::TensorDict got = mixed(true);
    td::TransferOptions o = python_wire();
    o.tag = 7;
    o.pseudo_rand = true;
    td::recv(got, *pg_, 1, o);
    EXPECT_TRUE(matches_truth(got, dir / "truth"));
  });
}

TEST_F(DistributedPython, PythonSendConsolidated) {
  exchange("py_send_consolidated", [](const fs::path& dir) {
    td::TensorDict got = mixed(true);  // not consolidated: its layout is consolidate()'s
    td::TransferOptions o = python_wire();
    o.mode = td::TransferMode::Consolidated;
    td::recv(got, *pg_, 1, o);
    EXPECT_TRUE(matches_truth(got, dir / "truth"));
  });
}

TEST_F(DistributedPython, PythonSendConsolidatedInPlace) {
  exchange("py_send_consolidated_in_place", [](const fs::path& dir) {
    td::TensorDictBase got = mixed(true).consolidate();
    const void* storage = got.consolidated_storage().data_ptr();
    td::TransferOptions o = python_wire();
    o.mode = td::TransferMode::Consolidated;
    td::recv(got, *pg_, 1, o);
    EXPECT_TRUE(matches_truth(got, dir / "truth"));
    EXPECT_EQ(got.consolidated_storage().data_ptr(), storage);
  });
}

TEST_F(DistributedPython, PythonNonTensorStaysOnTheReceiver) {
  exchange("py_send_non_tensor", [](const fs::path& dir) {
    td::TensorDict got(std::vector<int64_t>{3});
    got.set("obs", at::zeros({3, 2}));
    got.set_non_tensor("note", nlohmann::json("from cpp"));
    td::recv(got, *pg_, 1, python_wire());
    EXPECT_TRUE(matches_truth(got.exclude({td::NestedKey("note")}), dir / "truth"));
    EXPECT_EQ(got.get_non_tensor("note"), nlohmann::json("from cpp"));
  });
}

TEST_F(DistributedPython, PythonLazyStackMemberByMember) {
  exchange("py_send_lazy_stack", [](const fs::path& dir) {
    td::LazyStackedTensorDict got = td::lazy_stack({lazy_member(true, 0), lazy_member(true, 0)});
    td::recv(got, *pg_, 1, python_wire());
    EXPECT_TRUE(matches_truth(got, dir / "truth"));
  });
}

TEST_F(DistributedPython, PythonSendOnRawGroup) {
  exchange("py_send_raw_group", [](const fs::path& dir) {
    auto group = raw_group("raw_send");
    td::TensorDict got = mixed(true);
    td::TransferOptions o = python_wire();
    o.tag = 3;
    td::recv(got, *group, 1, o);
    EXPECT_TRUE(matches_truth(got, dir / "truth"));
  });
}

// ---- C++ sends, Python receives --------------------------------------------------------

TEST_F(DistributedPython, CppSendPythonRecv) {
  exchange("py_recv", [](const fs::path& dir) {
    td::TensorDict data = mixed(false);
    write_truth(data, dir / "truth");
    td::send(data, *pg_, 1, python_wire());
  });
}

TEST_F(DistributedPython, CppIsendPythonIrecv) {
  exchange("py_irecv", [](const fs::path& dir) {
    td::TensorDict data = mixed(false);
    write_truth(data, dir / "truth");
    td::isend(data, *pg_, 1, python_wire()).wait();
  });
}

TEST_F(DistributedPython, CppSendInitTag) {
  exchange("py_recv_init_tag", [](const fs::path& dir) {
    td::TensorDict data = mixed(false);
    write_truth(data, dir / "truth");
    td::TransferOptions o = python_wire();
    o.tag = 1000;
    td::send(data, *pg_, 1, o);
  });
}

TEST_F(DistributedPython, CppSendPseudoRand) {
  exchange("py_recv_pseudo_rand", [](const fs::path& dir) {
    td::TensorDict data = mixed(false);
    write_truth(data, dir / "truth");
    td::TransferOptions o = python_wire();
    o.tag = 12345;
    o.pseudo_rand = true;
    td::send(data, *pg_, 1, o);
  });
}

TEST_F(DistributedPython, CppSendConsolidated) {
  exchange("py_recv_consolidated", [](const fs::path& dir) {
    td::TensorDict data = mixed(false);
    write_truth(data, dir / "truth");
    td::TransferOptions o = python_wire();
    o.mode = td::TransferMode::Consolidated;
    td::send(data, *pg_, 1, o);
  });
}

TEST_F(DistributedPython, CppLazyStackMemberByMember) {
  exchange("py_recv_lazy_stack", [](const fs::path& dir) {
    td::LazyStackedTensorDict data =
        td::lazy_stack({lazy_member(false, 5), lazy_member(false, 20)});
    write_truth(data, dir / "truth");
    td::send(data, *pg_, 1, python_wire());
  });
}

TEST_F(DistributedPython, CppActorPythonLearnerAndBack) {
  exchange("py_learner", [](const fs::path&) {
    td::TensorDict batch(std::vector<int64_t>{4});
    batch.set("obs", at::randint(0, 10, {4, 3}).to(at::kFloat));
    batch.set("reward", at::randn({4}, at::kDouble));
    td::TensorDict answer(std::vector<int64_t>{4});
    answer.set("action", at::zeros({4}, at::kLong));
    answer.set("value", at::zeros({4}, at::kDouble));
    td::TransferOptions out = python_wire(), in = python_wire();
    out.tag = 40;
    in.tag = 50;
    td::Work got = td::irecv(answer, *pg_, 1, in);
    td::isend(batch, *pg_, 1, out).wait();
    got.wait();
    EXPECT_TRUE(at::equal(answer.get("action"), batch.get("obs").sum(-1).to(at::kLong)));
    EXPECT_TRUE(at::equal(answer.get("value"), batch.get("reward") * 2));
  });
}

// ---- structures that differ: a tensordict error here, never a hang or an abort -------------

TEST_F(DistributedPython, MismatchDtypeLonger) {
  expect_mismatch<td::StructureError>("mismatch_dtype_longer", "obs");
}

TEST_F(DistributedPython, MismatchDtypeShorter) {
  expect_mismatch<td::StructureError>("mismatch_dtype_shorter", "obs");
}

TEST_F(DistributedPython, MismatchShape) {
  expect_mismatch<td::StructureError>("mismatch_shape", "obs");
}

TEST_F(DistributedPython, MismatchKey) {
  expect_mismatch<td::StructureError>("mismatch_key", "id");
}

TEST_F(DistributedPython, MismatchFewerLeavesTimesOut) {
  expect_mismatch<td::TimeoutError>("mismatch_fewer_leaves");
}

TEST_F(DistributedPython, MismatchMuchLongerDoesNotAbort) {
  expect_mismatch<td::StructureError>("mismatch_much_longer", "obs");
}

TEST_F(DistributedPython, MismatchConsolidated) {
  expect_mismatch<td::StructureError>("mismatch_consolidated", "", td::TransferMode::Consolidated);
}

TEST_F(DistributedPython, MismatchLeavesTheGroupInStep) {
  exchange("mismatch_then_match", [](const fs::path& dir) {
    auto group = raw_group("mismatch_then_match");
    td::TensorDict got = small_target();
    EXPECT_THROW(td::recv(got, *group, 1, python_wire()), td::StructureError);
    td::recv(got, *group, 1, python_wire());
    EXPECT_TRUE(matches_truth(got, dir / "truth"));
  });
}

// No peer needed: what the other calls and a negative tag do with Python's wire.
TEST_F(DistributedPython, OtherCallsRefusePythonWire) {
  td::TensorDict data = small_target();
  const td::TransferOptions o = python_wire();
  EXPECT_THROW(td::init_remote(data, *pg_, 1, o), td::ValueError);
  EXPECT_THROW(td::from_remote_init(*pg_, 1, o), td::ValueError);
  EXPECT_THROW(td::broadcast(data, *pg_, 0, o), td::ValueError);
  EXPECT_THROW(td::all_gather(data, *pg_, o), td::ValueError);
  EXPECT_THROW(td::all_reduce(data, *pg_, c10d::ReduceOp::SUM, o), td::ValueError);
  td::TransferOptions negative = o;
  negative.tag = -1;
  EXPECT_THROW(td::send(data, *pg_, 1, negative), td::ValueError);
  EXPECT_THROW(td::irecv(data, *pg_, 1, negative), td::ValueError);
}
