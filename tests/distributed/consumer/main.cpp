// Links against the installed tensordict::distributed: a call into the
// component's library (no process group is needed for this one).
#include <tensordict/distributed.h>

#include <iostream>

int main() {
  tensordict::Work work;
  try {
    work.wait();
  } catch (const tensordict::ValueError& e) {
    std::cout << "tensordict::distributed linked: " << e.what() << "\n";
    return work.is_completed() ? 1 : 0;
  }
  return 1;
}
