#include "pch.h"

#include "support/core_test_helpers.h"

namespace td = tensordict;
using td_test::batch_of;
using td_test::Shape;
using td_test::Snapshot;
using Keys = std::vector<td::NestedKey>;

namespace {

// obs [4, 3], next: {reward [4, 1], done [4, 1] bool}, label "cat"; locked.
td::TensorDict make_locked() {
  td::TensorDict next({{"reward", torch::arange(4.0).reshape({4, 1})},
                       {"done", torch::zeros({4, 1}, torch::kBool)}},
                      {4});
  td::TensorDict t({{"obs", torch::randn({4, 3})}, {"next", next}, {"label", "cat"}}, {4});
  t.lock_();
  return t;
}

}  // namespace

// The message every refused operation shares (Python's text, verbatim).
#define TD_LOCK_MSG                                                       \
  "Cannot modify locked TensorDict. For in-place modification, consider " \
  "using the `set_()` method and make sure the key is present."

// ---- lock_ / is_locked ------------------------------------------------------------

TEST(TensorDictLock, NewTensorDictIsUnlocked) {
  td::TensorDict t;
  EXPECT_FALSE(t.is_locked());
}

TEST(TensorDictLock, LockIsRecursive) {
  td::TensorDict t(Shape{2});
  t.set({"a", "b", "c"}, torch::zeros({2}));
  auto& ret = t.lock_();
  EXPECT_EQ(&ret, static_cast<td::TensorDictBase*>(&t));
  EXPECT_TRUE(t.is_locked());
  EXPECT_TRUE(t.get_tensordict("a").is_locked());
  EXPECT_TRUE(t.get_tensordict({"a", "b"}).is_locked());
}

TEST(TensorDictLock, LockingTwiceIsHarmless) {
  auto t = make_locked();
  t.lock_();
  EXPECT_TRUE(t.is_locked());
  t.unlock_();
  EXPECT_FALSE(t.is_locked());
  EXPECT_FALSE(t.get_tensordict("next").is_locked());
}

// ---- refused while locked -------------------------------------------------------------

TEST(TensorDictLock, SetNewKeyIsRefused) {
  auto t = make_locked();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.set("action", torch::zeros({4})), td::LockedError, TD_LOCK_MSG, "'action'");
  snap.expect_unchanged(t);
}

TEST(TensorDictLock, SetExistingKeyIsRefused) {
  auto t = make_locked();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.set("obs", torch::zeros({4, 3})), td::LockedError, "locked", "'obs'");
  TD_EXPECT_THROW_MSG(t.set("label", "dog"), td::LockedError, "locked");
  snap.expect_unchanged(t);
}

TEST(TensorDictLock, NestedSetIsRefusedWithoutCreatingIntermediates) {
  auto t = make_locked();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.set({"next", "obs"}, torch::zeros({4})), td::LockedError, "locked",
                      "('next', 'obs')");
  TD_EXPECT_THROW_MSG(t.set({"new", "obs"}, torch::zeros({4})), td::LockedError, "locked",
                      "('new', 'obs')");
  EXPECT_FALSE(t.contains("new"));
  snap.expect_unchanged(t);
}

TEST(TensorDictLock, SetInplaceOnMissingKeyIsRefused) {
  auto t = make_locked();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.set("action", torch::zeros({4}), /*inplace=*/true), td::LockedError,
                      "locked");
  snap.expect_unchanged(t);
}

TEST(TensorDictLock, DelIsRefused) {
  auto t = make_locked();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.del_("obs"), td::LockedError, "locked", "'obs'");
  TD_EXPECT_THROW_MSG(t.del_({"next", "done"}), td::LockedError, "locked", "('next', 'done')");
  snap.expect_unchanged(t);
}

TEST(TensorDictLock, PopIsRefused) {
  auto t = make_locked();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.pop("obs"), td::LockedError, "locked", "'obs'");
  TD_EXPECT_THROW_MSG(t.pop("label", torch::zeros({1})), td::LockedError, "locked");
  snap.expect_unchanged(t);
}

TEST(TensorDictLock, RenameKeyIsRefused) {
  auto t = make_locked();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.rename_key_("obs", "observation"), td::LockedError, "locked", "'obs'");
  TD_EXPECT_THROW_MSG(t.rename_key_({"next", "done"}, {"next", "d"}), td::LockedError, "locked");
  snap.expect_unchanged(t);
}

TEST(TensorDictLock, SetNonTensorIsRefused) {
  auto t = make_locked();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.set_non_tensor("label", "dog"), td::LockedError, "locked", "'label'");
  TD_EXPECT_THROW_MSG(t.set_non_tensor({"next", "info"}, 1), td::LockedError, "locked");
  snap.expect_unchanged(t);
}

TEST(TensorDictLock, CreateNestedIsRefused) {
  auto t = make_locked();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.create_nested("child"), td::LockedError, "locked", "'child'");
  TD_EXPECT_THROW_MSG(t.create_nested({"a", "b"}), td::LockedError, "locked");
  snap.expect_unchanged(t);
  // An existing child is only returned: nothing changes, so it is allowed.
  EXPECT_TRUE(t.create_nested("next").is_same(t.get_tensordict("next")));
}

TEST(TensorDictLock, UpdateIsRefused) {
  auto t = make_locked();
  auto snap = Snapshot::of(t);
  td::TensorDict existing({{"obs", torch::ones({4, 3})}}, {4});
  td::TensorDict fresh({{"action", torch::ones({4})}}, {4});
  TD_EXPECT_THROW_MSG(t.update(existing), td::LockedError, TD_LOCK_MSG);
  TD_EXPECT_THROW_MSG(t.update(fresh), td::LockedError, "locked");
  TD_EXPECT_THROW_MSG(t.update(existing, {.clone = true}), td::LockedError, "locked");
  snap.expect_unchanged(t);
}

TEST(TensorDictLock, UpdateInplaceWithANewKeyIsRefusedAndWritesNothing) {
  auto t = make_locked();
  auto snap = Snapshot::of(t);
  // "obs" exists and comes first: it must not be written before the refusal.
  td::TensorDict other({{"obs", torch::ones({4, 3})},
                        {td::NestedKey{"next", "reward"}, torch::ones({4, 1})},
                        {td::NestedKey{"next", "new"}, torch::ones({4})}},
                       {4});
  TD_EXPECT_THROW_MSG(t.update(other, {.inplace = true}), td::LockedError, TD_LOCK_MSG,
                      "('next', 'new')");
  snap.expect_unchanged(t);
}

TEST(TensorDictLock, UpdateInplaceOnExistingKeysIsAllowed) {
  auto t = make_locked();
  auto obs = t.get("obs");
  auto reward = t.get({"next", "reward"});
  td::TensorDict other(
      {{"obs", torch::ones({4, 3})}, {td::NestedKey{"next", "reward"}, torch::full({4, 1}, 2.0)}},
      {4});
  t.update(other, {.inplace = true});
  EXPECT_TRUE(t.get("obs").is_same(obs));
  EXPECT_TRUE(at::equal(obs, torch::ones({4, 3})));
  EXPECT_TRUE(t.get({"next", "reward"}).is_same(reward));
  EXPECT_TRUE(at::equal(reward, torch::full({4, 1}, 2.0)));
  EXPECT_TRUE(t.is_locked());
}

TEST(TensorDictLock, UpdateIgnoreLockIsAllowed) {
  auto t = make_locked();
  auto obs = torch::ones({4, 3});
  td::TensorDict other({{"obs", obs},
                        {"action", torch::ones({4})},
                        {td::NestedKey{"next", "new"}, torch::ones({4})}},
                       {4});
  t.update(other, {.ignore_lock = true});
  EXPECT_TRUE(t.get("obs").is_same(obs));
  EXPECT_TRUE(t.contains("action"));
  EXPECT_TRUE(t.contains({"next", "new"}));
  EXPECT_TRUE(t.is_locked());
  EXPECT_TRUE(t.get_tensordict("next").is_locked());
}

TEST(TensorDictLock, SelectAndExcludeInPlaceAreRefused) {
  auto t = make_locked();
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(t.select_({"obs"}), td::LockedError, "locked");
  TD_EXPECT_THROW_MSG(t.exclude_({"obs"}), td::LockedError, "locked");
  TD_EXPECT_THROW_MSG(t.exclude_({{"next", "done"}}), td::LockedError, "locked");
  snap.expect_unchanged(t);
}

TEST(TensorDictLock, OutOfPlaceSelectAndExcludeReturnUnlockedResults) {
  auto t = make_locked();
  auto s = t.select({"obs", "next"});
  EXPECT_FALSE(s.is_locked());
  auto e = t.exclude({"obs"});
  EXPECT_FALSE(e.is_locked());
  e.set("x", torch::zeros({4}));
  EXPECT_FALSE(t.contains("x"));
}

TEST(TensorDictLock, OperationsOnALockedChildAreRefused) {
  auto t = make_locked();
  auto next = t.get_tensordict("next");
  auto snap = Snapshot::of(t);
  TD_EXPECT_THROW_MSG(next.set("x", torch::zeros({4})), td::LockedError, "locked");
  TD_EXPECT_THROW_MSG(next.del_("done"), td::LockedError, "locked");
  snap.expect_unchanged(t);
}

// ---- allowed while locked --------------------------------------------------------------

TEST(TensorDictLock, SetUnderscoreIsAllowed) {
  auto t = make_locked();
  auto obs = t.get("obs");
  t.set_("obs", torch::ones({4, 3}));
  t.set_({"next", "reward"}, torch::full({4, 1}, 3.0));
  EXPECT_TRUE(t.get("obs").is_same(obs));
  EXPECT_TRUE(at::equal(obs, torch::ones({4, 3})));
  EXPECT_TRUE(at::equal(t.get({"next", "reward"}), torch::full({4, 1}, 3.0)));
}

TEST(TensorDictLock, SetInplaceOnExistingKeyIsAllowed) {
  auto t = make_locked();
  auto obs = t.get("obs");
  t.set("obs", torch::ones({4, 3}), /*inplace=*/true);
  EXPECT_TRUE(t.get("obs").is_same(obs));
  EXPECT_TRUE(at::equal(obs, torch::ones({4, 3})));
}

TEST(TensorDictLock, UpdateUnderscoreIsAllowed) {
  auto t = make_locked();
  auto reward = t.get({"next", "reward"});
  td::TensorDict other(
      {{td::NestedKey{"next", "reward"}, torch::full({4, 1}, 7.0)}, {"label", "dog"}}, {4});
  t.update_(other);
  EXPECT_TRUE(t.get({"next", "reward"}).is_same(reward));
  EXPECT_TRUE(at::equal(reward, torch::full({4, 1}, 7.0)));
  EXPECT_EQ(t.get_non_tensor("label"), "dog");
}

TEST(TensorDictLock, BatchSizeChangeIsNotLockChecked) {
  // As in Python: the batch size setter ignores the lock.
  auto t = make_locked();
  t.set_batch_size({});
  EXPECT_EQ(batch_of(t), Shape{});
  EXPECT_TRUE(t.is_locked());
}

TEST(TensorDictLock, ReadsAreAllowed) {
  auto t = make_locked();
  EXPECT_EQ(t.keys(true).size(), 5u);
  EXPECT_EQ(t.get("obs").sizes().vec(), (Shape{4, 3}));
  EXPECT_EQ(t.get_non_tensor("label"), "cat");
  EXPECT_TRUE(t.copy().get("obs").is_same(t.get("obs")));
}

// ---- nested children ---------------------------------------------------------------------

TEST(TensorDictLock, ChildObtainedByGetTensorDictIsLocked) {
  auto t = make_locked();
  EXPECT_TRUE(t.get_tensordict("next").is_locked());
}

TEST(TensorDictLock, UnlockingAChildOfALockedParentIsRefused) {
  auto t = make_locked();
  auto next = t.get_tensordict("next");
  TD_EXPECT_THROW_MSG(next.unlock_(), td::LockedError,
                      "Cannot unlock a tensordict that is part of a locked graph.");
  EXPECT_TRUE(next.is_locked());
  EXPECT_TRUE(t.is_locked());
  EXPECT_THROW(next.set("x", torch::zeros({4})), td::LockedError);
}

TEST(TensorDictLock, UnlockingADeepChildIsRefusedUntilTheRootIsUnlocked) {
  td::TensorDict t(Shape{2});
  t.set({"a", "b", "c"}, torch::zeros({2}));
  t.lock_();
  auto a = t.get_tensordict("a");
  auto b = t.get_tensordict({"a", "b"});
  EXPECT_THROW(b.unlock_(), td::LockedError);
  EXPECT_THROW(a.unlock_(), td::LockedError);
  EXPECT_TRUE(a.is_locked());
  EXPECT_TRUE(b.is_locked());
  t.unlock_();
  EXPECT_FALSE(a.is_locked());
  EXPECT_FALSE(b.is_locked());
}

TEST(TensorDictLock, UnlockOfTheRootUnlocksEverything) {
  auto t = make_locked();
  auto next = t.get_tensordict("next");
  auto& ret = t.unlock_();
  EXPECT_EQ(&ret, static_cast<td::TensorDictBase*>(&t));
  EXPECT_FALSE(t.is_locked());
  EXPECT_FALSE(next.is_locked());
  t.set("action", torch::zeros({4}));
  next.set("x", torch::zeros({4}));
  EXPECT_TRUE(t.contains({"next", "x"}));
  // Unlocked children can now be locked and unlocked on their own.
  next.lock_();
  EXPECT_FALSE(t.is_locked());
  next.unlock_();
  EXPECT_FALSE(next.is_locked());
}

TEST(TensorDictLock, SharedChildUnderTwoLockedRootsCannotBeUnlockedFromEither) {
  td::TensorDict sub({{"x", torch::zeros({4})}}, {4});
  td::TensorDict r1({{"sub", sub}}, {4});
  td::TensorDict r2({{"sub", sub}}, {4});
  ASSERT_TRUE(r1.get_tensordict("sub").is_same(r2.get_tensordict("sub")));
  r1.lock_();
  r2.lock_();
  TD_EXPECT_THROW_MSG(r1.unlock_(), td::LockedError, "locked graph");
  TD_EXPECT_THROW_MSG(r2.unlock_(), td::LockedError, "locked graph");
  EXPECT_THROW(sub.unlock_(), td::LockedError);
  EXPECT_TRUE(r1.is_locked());  // a refused unlock changes nothing
  EXPECT_TRUE(r2.is_locked());
  EXPECT_TRUE(sub.is_locked());
}

TEST(TensorDictLock, SharedChildIsReleasedWhenTheOtherRootIsDestroyed) {
  td::TensorDict sub({{"x", torch::zeros({4})}}, {4});
  td::TensorDict r1({{"sub", sub}}, {4});
  r1.lock_();
  {
    td::TensorDict r2({{"sub", sub}}, {4});
    r2.lock_();
    EXPECT_THROW(r1.unlock_(), td::LockedError);
  }  // r2 destroyed: its weak reference expires
  r1.unlock_();
  EXPECT_FALSE(r1.is_locked());
  EXPECT_FALSE(sub.is_locked());
}

TEST(TensorDictLock, GroupingBothRootsUnlocksThemTogether) {
  td::TensorDict sub({{"x", torch::zeros({4})}}, {4});
  td::TensorDict r1({{"sub", sub}}, {4});
  td::TensorDict r2({{"sub", sub}}, {4});
  r1.lock_();
  r2.lock_();
  // Grouping both roots under a third lets them be unlocked together.
  td::TensorDict top({{"r1", r1}, {"r2", r2}}, {4});
  top.lock_();
  top.unlock_();
  EXPECT_FALSE(r1.is_locked());
  EXPECT_FALSE(r2.is_locked());
  EXPECT_FALSE(sub.is_locked());
  // With r2 unlocked, r1 alone locks and unlocks freely.
  r1.lock_();
  r1.unlock_();
  EXPECT_FALSE(sub.is_locked());
}

TEST(TensorDictLock, ChildOfADestroyedParentCanBeUnlocked) {
  td::TensorDictBase child;
  {
    auto t = make_locked();
    child = t.get_tensordict("next");
    EXPECT_THROW(child.unlock_(), td::LockedError);
  }
  EXPECT_TRUE(child.is_locked());  // still locked until asked
  child.unlock_();
  EXPECT_FALSE(child.is_locked());
}

TEST(TensorDictLock, ParentUnlockedEarlierDoesNotHoldTheChild) {
  td::TensorDict sub({{"x", torch::zeros({4})}}, {4});
  td::TensorDict r1({{"sub", sub}}, {4});
  r1.lock_();
  r1.unlock_();
  sub.lock_();
  sub.unlock_();
  EXPECT_FALSE(sub.is_locked());
}

// ---- copies of locked tensordicts ----------------------------------------------------------

TEST(TensorDictLock, CloneOfLockedIsUnlocked) {
  auto t = make_locked();
  auto c = t.clone();
  EXPECT_FALSE(c.is_locked());
  EXPECT_FALSE(c.get_tensordict("next").is_locked());
  c.set("x", torch::zeros({4}));
  EXPECT_TRUE(t.is_locked());
  auto shallow = t.copy();
  EXPECT_FALSE(shallow.is_locked());
  EXPECT_FALSE(shallow.get_tensordict("next").is_locked());
}

TEST(TensorDictLock, UnlockClearsSharedAndMemmapFlags) {
  auto t = make_locked();
  EXPECT_FALSE(t.is_shared());
  EXPECT_FALSE(t.is_memmap());
  t.unlock_();
  EXPECT_FALSE(t.is_shared());
  EXPECT_FALSE(t.is_memmap());
}
