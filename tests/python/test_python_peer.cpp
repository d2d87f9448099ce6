// The interop suite runs the real, newest Python tensordict (tests/python/peer.h).
#include "pch.h"

#include "python/peer.h"

using namespace td_python;

TEST(PeerPython, IsTheRealTensordict) {
  const fs::path dir = fresh_dir("version");
  const PeerRun run = run_peer("version", dir / "peer.out");
  ASSERT_EQ(run.rc, 0) << run.out;
  EXPECT_NE(run.out.find("tensordict " TENSORDICT_PYTHON_TENSORDICT_VERSION), std::string::npos)
      << run.out;
  fs::remove_all(dir);
}
