#include "pch.h"

#include <algorithm>
#include <sstream>
#include <unordered_set>

namespace td = tensordict;

// ---- construction -----------------------------------------------------------

TEST(NestedKey, FromCStringIsOneLevel) {
  td::NestedKey k = "obs";
  EXPECT_EQ(k.size(), 1u);
  EXPECT_FALSE(k.empty());
  EXPECT_FALSE(k.is_nested());
  EXPECT_EQ(k[0], "obs");
  EXPECT_EQ(k.front(), "obs");
  EXPECT_EQ(k.back(), "obs");
}

TEST(NestedKey, FromStdStringAndStringViewIsOneLevel) {
  std::string s = "reward";
  std::string_view sv = "done";
  td::NestedKey a(s);
  td::NestedKey b(sv);
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0], "reward");
  EXPECT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0], "done");
}

TEST(NestedKey, FromBracedListIsAPath) {
  td::NestedKey k = {"next", "obs"};
  EXPECT_EQ(k.size(), 2u);
  EXPECT_TRUE(k.is_nested());
  EXPECT_EQ(k[0], "next");
  EXPECT_EQ(k[1], "obs");
  EXPECT_EQ(k.front(), "next");
  EXPECT_EQ(k.back(), "obs");
}

TEST(NestedKey, SingleElementListEqualsPlainString) {
  // Python: ("a",) and "a" are the same key.
  td::NestedKey list = {"a"};
  td::NestedKey plain = "a";
  EXPECT_EQ(list, plain);
  EXPECT_FALSE(list.is_nested());
  EXPECT_EQ(list.repr(), "'a'");
}

TEST(NestedKey, FromVectorOfStrings) {
  std::vector<std::string> parts = {"a", "b", "c"};
  td::NestedKey k(parts);
  EXPECT_EQ(k.size(), 3u);
  EXPECT_EQ(k.to_vector(), parts);
  EXPECT_EQ(k, (td::NestedKey{"a", "b", "c"}));
}

TEST(NestedKey, DefaultIsEmpty) {
  td::NestedKey k;
  EXPECT_TRUE(k.empty());
  EXPECT_EQ(k.size(), 0u);
  EXPECT_FALSE(k.is_nested());
  EXPECT_EQ(k.join(), "");
  EXPECT_EQ(k.repr(), "()");
}

TEST(NestedKey, DotInsideAStringIsNotASeparator) {
  td::NestedKey k = "a.b";
  EXPECT_EQ(k.size(), 1u);
  EXPECT_EQ(k.repr(), "'a.b'");
  EXPECT_NE(k, (td::NestedKey{"a", "b"}));
}

TEST(NestedKey, LongPathsBeyondInlineCapacity) {
  td::NestedKey k = {"a", "b", "c", "d", "e", "f"};
  EXPECT_EQ(k.size(), 6u);
  EXPECT_EQ(k.join(), "a.b.c.d.e.f");
  EXPECT_EQ(k.child("g").size(), 7u);
  EXPECT_EQ(k.parent(), (td::NestedKey{"a", "b", "c", "d", "e"}));
}

TEST(NestedKey, IteratesOverParts) {
  td::NestedKey k = {"x", "y", "z"};
  std::vector<std::string> seen(k.begin(), k.end());
  EXPECT_EQ(seen, (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(k.parts().size(), 3u);
}

// ---- repr -----------------------------------------------------------------------

TEST(NestedKeyRepr, OneLevelIsQuotedString) { EXPECT_EQ(td::NestedKey("a").repr(), "'a'"); }

TEST(NestedKeyRepr, PathIsPythonTuple) {
  EXPECT_EQ((td::NestedKey{"a", "b"}).repr(), "('a', 'b')");
  EXPECT_EQ((td::NestedKey{"next", "obs", "pixels"}).repr(), "('next', 'obs', 'pixels')");
}

TEST(NestedKeyRepr, StreamOperatorPrintsRepr) {
  std::ostringstream one, two;
  one << td::NestedKey("a");
  two << td::NestedKey{"next", "obs"};
  EXPECT_EQ(one.str(), "'a'");
  EXPECT_EQ(two.str(), "('next', 'obs')");
}

// ---- join -------------------------------------------------------------------------

TEST(NestedKeyJoin, DefaultSeparatorIsDot) {
  EXPECT_EQ((td::NestedKey{"a", "b", "c"}).join(), "a.b.c");
}

TEST(NestedKeyJoin, CustomSeparator) {
  td::NestedKey k = {"a", "b", "c"};
  EXPECT_EQ(k.join("/"), "a/b/c");
  EXPECT_EQ(k.join("::"), "a::b::c");
  EXPECT_EQ(k.join(""), "abc");
}

TEST(NestedKeyJoin, OneLevelHasNoSeparator) { EXPECT_EQ(td::NestedKey("obs").join("/"), "obs"); }

// ---- parent / child / concatenation --------------------------------------------

TEST(NestedKeyPath, ParentDropsLastPart) {
  td::NestedKey k = {"a", "b", "c"};
  EXPECT_EQ(k.parent(), (td::NestedKey{"a", "b"}));
  EXPECT_EQ(k.parent().parent(), td::NestedKey("a"));
  EXPECT_EQ(k.size(), 3u);  // unchanged
}

TEST(NestedKeyPath, ParentOfOneLevelIsEmpty) {
  EXPECT_TRUE(td::NestedKey("a").parent().empty());
  EXPECT_TRUE(td::NestedKey().parent().empty());
}

TEST(NestedKeyPath, ChildAppendsAPart) {
  td::NestedKey k = "next";
  td::NestedKey c = k.child("obs");
  EXPECT_EQ(c, (td::NestedKey{"next", "obs"}));
  EXPECT_EQ(k, td::NestedKey("next"));  // original unchanged
  EXPECT_EQ(td::NestedKey().child("a"), td::NestedKey("a"));
}

TEST(NestedKeyPath, PlusConcatenatesPaths) {
  td::NestedKey a = {"a", "b"};
  td::NestedKey b = {"c", "d"};
  EXPECT_EQ(a + b, (td::NestedKey{"a", "b", "c", "d"}));
  EXPECT_EQ(a + td::NestedKey(), a);
  EXPECT_EQ(td::NestedKey() + b, b);
  EXPECT_EQ(a.size(), 2u);
}

// ---- comparison -------------------------------------------------------------------

TEST(NestedKeyCompare, EqualityIsPartwise) {
  EXPECT_EQ((td::NestedKey{"a", "b"}), (td::NestedKey{"a", "b"}));
  EXPECT_NE((td::NestedKey{"a", "b"}), (td::NestedKey{"b", "a"}));
  EXPECT_NE((td::NestedKey{"a", "b"}), td::NestedKey("a"));
  EXPECT_NE(td::NestedKey("ab"), (td::NestedKey{"a", "b"}));
}

TEST(NestedKeyCompare, OrderingIsLexicographicOverParts) {
  EXPECT_LT(td::NestedKey("a"), td::NestedKey("b"));
  EXPECT_LT(td::NestedKey("a"), (td::NestedKey{"a", "b"}));  // prefix first
  EXPECT_LT((td::NestedKey{"a", "b"}), (td::NestedKey{"a", "c"}));
  EXPECT_LT((td::NestedKey{"a", "z"}), td::NestedKey("b"));
  EXPECT_GT((td::NestedKey{"b"}), (td::NestedKey{"a", "z", "z"}));
  EXPECT_LE(td::NestedKey("a"), td::NestedKey("a"));
  EXPECT_TRUE((td::NestedKey("a") <=> td::NestedKey("a")) == 0);
}

TEST(NestedKeyCompare, SortsAsExpected) {
  std::vector<td::NestedKey> keys = {{"next", "reward"}, "obs", "next", {"next", "done"}, "action"};
  std::sort(keys.begin(), keys.end());
  std::vector<td::NestedKey> expected = {
      "action", "next", {"next", "done"}, {"next", "reward"}, "obs"};
  EXPECT_EQ(keys, expected);
}

// ---- hash ---------------------------------------------------------------------------

TEST(NestedKeyHash, EqualKeysHashEqual) {
  td::NestedKeyHash h;
  EXPECT_EQ(h(td::NestedKey{"a", "b"}), h(td::NestedKey{"a", "b"}));
  EXPECT_EQ(h(td::NestedKey{"a"}), h(td::NestedKey("a")));
}

TEST(NestedKeyHash, IsOrderSensitive) {
  td::NestedKeyHash h;
  EXPECT_NE(h(td::NestedKey{"a", "b"}), h(td::NestedKey{"b", "a"}));
  EXPECT_NE(h(td::NestedKey{"a", "b"}), h(td::NestedKey("a")));
}

TEST(NestedKeyHash, WorksInUnorderedSet) {
  // Note: set.insert({"a", "b"}) would insert two keys (initializer_list overload).
  std::unordered_set<td::NestedKey, td::NestedKeyHash> set;
  set.insert("a");
  set.insert(td::NestedKey{"a", "b"});
  set.insert(td::NestedKey{"a"});  // same as "a"
  set.insert(td::NestedKey{"b", "a"});
  set.insert("a.b");
  EXPECT_EQ(set.size(), 4u);
  EXPECT_TRUE(set.count(td::NestedKey{"a", "b"}));
  EXPECT_TRUE(set.count(td::NestedKey("a")));
  EXPECT_FALSE(set.count(td::NestedKey{"a", "c"}));
}
