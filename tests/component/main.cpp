// Reaches the "tagged" test storage (tagged_storage.cpp) only by name, through
// from_schema: no symbol of that file is used here. Linked with the storage
// built by tensordict_add_storage_component, "tagged" must be registered at
// startup although the core library is a static archive; with
// --expect-missing (the same file put in a plain static library) it must not
// be, which is the trap the recipe avoids. --expect-hiredis: the storage was
// built with its private hiredis dependency.
// Also built against the installed package by package.find_package.

#include <tensordict/schema.h>
#include <tensordict/tensordict.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <string>

namespace td = tensordict;

#define REQUIRE(cond)                                                      \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::cerr << "check failed at line " << __LINE__ << ": " #cond "\n"; \
      return 1;                                                            \
    }                                                                      \
  } while (0)

int main(int argc, char** argv) {
  bool expect_missing = false, expect_hiredis = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--expect-missing") == 0)
      expect_missing = true;
    else if (std::strcmp(argv[i], "--expect-hiredis") == 0)
      expect_hiredis = true;
    else {
      std::cerr << "usage: " << argv[0] << " [--expect-missing] [--expect-hiredis]\n";
      return 2;
    }
  }
  const td::Schema schema{{"obs", {{3}, at::kFloat}}, {{"next", "reward"}, {{}, at::kLong}}};
  const auto names = td::available_storages();
  const bool registered = std::find(names.begin(), names.end(), "tagged") != names.end();

  if (expect_missing) {
    REQUIRE(!registered);
    try {
      td::from_schema(schema, {8}, "tagged");
    } catch (const td::SchemaError& e) {
      REQUIRE(std::string(e.what()).find("Unknown storage backend 'tagged'") != std::string::npos);
      std::cout << "\"tagged\" is not registered, as expected: " << e.what() << "\n";
      return 0;
    }
    std::cerr << "from_schema(..., \"tagged\") did not throw\n";
    return 1;
  }

  REQUIRE(registered);
  td::TensorDictBase out = td::from_schema(schema, {8}, "tagged");
  REQUIRE(out.get_non_tensor("made_by") == "tagged");  // built by that factory
  REQUIRE(out.batch_size().vec() == std::vector<int64_t>{8});
  REQUIRE(out.get("obs").sizes().vec() == (std::vector<int64_t>{8, 3}));
  REQUIRE(out.get("obs").eq(0).all().item<bool>());
  REQUIRE(out.get({"next", "reward"}).scalar_type() == at::kLong);
  REQUIRE(out.get({"next", "reward"}).sizes().vec() == std::vector<int64_t>{8});
  REQUIRE(out.contains("hiredis_ping") == expect_hiredis);
  if (expect_hiredis) REQUIRE(out.get_non_tensor("hiredis_ping") == "*1\r\n$4\r\nPING\r\n");

  // Options reach the factory, and its own checks run.
  td::TensorDictBase filled = td::from_schema(schema, {8}, "tagged", {{"fill", 2.5}});
  REQUIRE(filled.get("obs").eq(2.5).all().item<bool>());
  REQUIRE(filled.get({"next", "reward"}).eq(2).all().item<bool>());
  bool refused = false;
  try {
    td::from_schema(schema, {8}, "tagged", {{"colour", "red"}});
  } catch (const td::SchemaError& e) {
    refused = std::string(e.what()).find("unknown option 'colour' for storage 'tagged'") !=
              std::string::npos;
  }
  REQUIRE(refused);

  std::cout << "\"tagged\" registered by its component (tensordict " << td::version()
            << "); storages:";
  for (const auto& n : names) std::cout << " " << n;
  std::cout << "\n";
  return 0;
}
