// One storage call per user operation: leaf reads and writes gathered over a
// walk of the tree and sent as one read_leaves / write_leaves_ per storage.
#include "core/internal.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tensordict::detail {

namespace {

// The leaves' common ancestor key (what an error of the whole batch names).
NestedKey common_prefix(std::span<const NestedKey* const> paths) {
  if (paths.empty()) return NestedKey();
  std::size_t n = paths[0]->size();
  if (paths.size() == 1) return *paths[0];
  for (const NestedKey* p : paths) {
    std::size_t i = 0;
    while (i < n && i < p->size() && (*p)[i] == (*paths[0])[i]) ++i;
    n = i;
  }
  return prefix(*paths[0], n);
}

template <class Leaves>
NestedKey batch_path(const Leaves& leaves) {
  std::vector<const NestedKey*> paths;
  paths.reserve(leaves.size());
  for (const auto& l : leaves) paths.push_back(&l.path);
  return common_prefix(paths);
}

template <class Leaves>
std::string leaf_list(const Leaves& leaves) {
  std::vector<std::string> names;
  names.reserve(leaves.size());
  for (const auto& l : leaves) names.push_back(l.path.repr());
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

// The group of `root` (created, and `root` kept alive, on its first leaf).
template <class Group, class Root>
Group& group_of(std::vector<Group>& groups, Root* root,
                std::vector<std::shared_ptr<const Node>>& keep_alive) {
  for (auto& g : groups)
    if (g.root == root) return g;
  keep_alive.push_back(root->shared_from_this());
  auto& g = groups.emplace_back();
  g.root = root;
  // Most operations touch a few dozen leaves: no regrowth (and no copy of
  // every key path) while they are added.
  g.leaves.reserve(16);
  return g;
}

void BatchedReads::add(const Node* root, std::shared_ptr<const Node> node, NestedKey path,
                       MemoryNode* dest) {
  Group& g = group_of(groups_, root, keep_alive_);
  g.leaves.push_back(LeafRead{node.get(), std::move(path), at::Tensor()});
  g.dests.push_back(dest);
  if (node.get() != root) keep_alive_.push_back(std::move(node));
}

void BatchedReads::run(const RowSelection& rows, bool clone_results) {
  for (auto& g : groups_) {
    try {
      g.root->read_leaves(rows, g.leaves);
    } catch (const StorageError&) {
      rethrow_storage_error(batch_path(g.leaves), "reading rows of");
    } catch (const c10::Error& e) {
      throw IndexError(fmt::format("reading rows of {} failed: {}", leaf_list(g.leaves),
                                   e.what_without_backtrace()));
    }
    for (std::size_t i = 0; i < g.leaves.size(); ++i) {
      auto& l = g.leaves[i];
      if (!l.out.defined())
        throw StorageError(fmt::format("{} returned no tensor for {} from read_leaves",
                                       g.root->type_name(), l.path.repr()));
      *g.dests[i]->peek_mut(l.key()) = Value(clone_results ? l.out.clone() : std::move(l.out));
    }
  }
}

void BatchedWrites::add(Node* root, const std::shared_ptr<Node>& node, NestedKey path,
                        at::Tensor value) {
  Group& g = group_of(groups_, root, keep_alive_);
  g.leaves.push_back(LeafWrite{node.get(), std::move(path), std::move(value)});
  if (node.get() != root) keep_alive_.push_back(node);
}

void BatchedWrites::run(const RowSelection& rows) {
  for (auto& g : groups_) {
    try {
      g.root->write_leaves_(rows, g.leaves);
    } catch (const StorageError&) {
      rethrow_storage_error(batch_path(g.leaves), "writing rows of");
    } catch (const c10::Error& e) {
      throw ShapeError(fmt::format("writing rows of {} failed: {}", leaf_list(g.leaves),
                                   e.what_without_backtrace()));
    }
  }
}

}  // namespace tensordict::detail
