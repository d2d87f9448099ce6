// The only source that includes ProcessGroupGloo.hpp (and so Gloo's headers):
// see docs/distributed.md, "Gloo headers". Nothing of Gloo is called here
// directly; LibTorch's own functions build the device and the backend.
#include "support/gloo_group.h"

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace td_test {

c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                       int rank, int size,
                                                       std::chrono::milliseconds timeout) {
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->timeout = timeout;
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
#if TORCH_VERSION_MAJOR < 2
  // 1.13: the Gloo group is the ProcessGroup.
  return gloo;
#else
  // 2.x: a ProcessGroup dispatches to one Backend per device type.
#if TENSORDICT_PROCESS_GROUP_HAS_OPTIONS
  // 2.0 to 2.5: the group is built with its Options.
  auto group = c10::make_intrusive<c10d::ProcessGroup>(
      store, rank, size, c10::make_intrusive<c10d::ProcessGroup::Options>("gloo", timeout));
#else
  // 2.6 and later.
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
#endif
  group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
  return group;
#endif
}

}  // namespace td_test
