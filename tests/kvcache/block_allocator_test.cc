// BlockAllocator: O(1) allocate/release, reference counts, and the errors (out of range, double
// free, exhausted) leaving the allocator as it was. Placement (hints, runs after churn):
// block_allocator_placement_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "kvcache/kvcache.h"

namespace attnrt::kvcache {
namespace {

std::vector<int> RefCounts(const BlockAllocator& a) {
  std::vector<int> out;
  for (BlockId b = 0; b < a.num_blocks(); ++b) out.push_back(a.ref_count(b));
  return out;
}

TEST(BlockAllocatorTest, AllocatesEveryBlockOnceThenReportsExhaustion) {
  constexpr int kBlocks = 37;
  BlockAllocator a(kBlocks);
  EXPECT_EQ(a.num_blocks(), kBlocks);
  EXPECT_EQ(a.num_free(), kBlocks);
  std::set<BlockId> seen;
  for (int i = 0; i < kBlocks; ++i) {
    auto b = a.Allocate();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_GE(*b, 0);
    EXPECT_LT(*b, kBlocks);
    EXPECT_TRUE(seen.insert(*b).second) << "block " << *b << " handed out twice";
    EXPECT_EQ(a.ref_count(*b), 1);
    EXPECT_EQ(a.num_free(), kBlocks - i - 1);
  }
  const std::vector<int> before = RefCounts(a);
  auto none = a.Allocate();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(none.status().message().find("37 blocks"), std::string::npos)
      << none.status().message();
  EXPECT_EQ(RefCounts(a), before);
  EXPECT_EQ(a.num_free(), 0);
}

TEST(BlockAllocatorTest, FreedBlocksAreReused) {
  BlockAllocator a(8);
  std::vector<BlockId> got;
  for (int i = 0; i < 8; ++i) got.push_back(*a.Allocate());
  ASSERT_TRUE(a.Release(got[1]).ok());
  ASSERT_TRUE(a.Release(got[3]).ok());
  EXPECT_EQ(a.num_free(), 2);
  EXPECT_EQ(a.ref_count(got[1]), 0);
  std::set<BlockId> again = {*a.Allocate(), *a.Allocate()};
  EXPECT_EQ(again, (std::set<BlockId>{got[1], got[3]}));
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_TRUE(a.CheckInvariantsForTesting().ok()) << a.CheckInvariantsForTesting().ToString();
}

TEST(BlockAllocatorTest, ReferenceCountsKeepABlockUntilTheLastRelease) {
  BlockAllocator a(4);
  const BlockId b = *a.Allocate();
  ASSERT_TRUE(a.AddRef(b).ok());
  ASSERT_TRUE(a.AddRef(b).ok());
  EXPECT_EQ(a.ref_count(b), 3);
  EXPECT_EQ(a.num_free(), 3);
  ASSERT_TRUE(a.Release(b).ok());
  ASSERT_TRUE(a.Release(b).ok());
  EXPECT_EQ(a.ref_count(b), 1);
  EXPECT_EQ(a.num_free(), 3);
  ASSERT_TRUE(a.Release(b).ok());
  EXPECT_EQ(a.ref_count(b), 0);
  EXPECT_EQ(a.num_free(), 4);
}

TEST(BlockAllocatorTest, DoubleFreeIsFailedPreconditionAndChangesNothing) {
  BlockAllocator a(4);
  const BlockId b = *a.Allocate();
  const BlockId keep = *a.Allocate();
  ASSERT_TRUE(a.Release(b).ok());
  const std::vector<int> before = RefCounts(a);
  Status s = a.Release(b);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("block = " + std::to_string(b)), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("double free"), std::string::npos) << s.message();
  EXPECT_EQ(RefCounts(a), before);
  EXPECT_EQ(a.num_free(), 3);
  EXPECT_EQ(a.ref_count(keep), 1);
  // The free runs were not corrupted: the three free blocks come out once each.
  std::set<BlockId> rest;
  for (int i = 0; i < 3; ++i) rest.insert(*a.Allocate());
  EXPECT_EQ(rest.size(), 3u);
  EXPECT_FALSE(rest.contains(keep));
  EXPECT_FALSE(a.Allocate().ok());
}

TEST(BlockAllocatorTest, OutOfRangeIdsAreInvalidArgumentNamingIdAndRange) {
  BlockAllocator a(6);
  (void)*a.Allocate();
  const std::vector<int> before = RefCounts(a);
  for (BlockId bad : {-1, 6, 1000}) {
    for (Status s : {a.AddRef(bad), a.Release(bad)}) {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find("block = " + std::to_string(bad)), std::string::npos)
          << s.message();
      EXPECT_NE(s.message().find("[0, 6)"), std::string::npos) << s.message();
    }
    EXPECT_EQ(a.ref_count(bad), 0);
  }
  EXPECT_EQ(RefCounts(a), before);
  EXPECT_EQ(a.num_free(), 5);
}

TEST(BlockAllocatorTest, AddRefOfAFreeBlockIsRejected) {
  BlockAllocator a(3);
  Status s = a.AddRef(2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("free"), std::string::npos) << s.message();
  EXPECT_EQ(a.ref_count(2), 0);
  EXPECT_EQ(a.num_free(), 3);
}

TEST(BlockAllocatorTest, EmptyAllocatorIsExhaustedAtOnce) {
  BlockAllocator a(0);
  EXPECT_EQ(a.num_free(), 0);
  auto b = a.Allocate();
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(b.status().message().find("all 0 blocks"), std::string::npos);
}

TEST(BlockAllocatorTest, MetadataIsAFewBytesPerBlock) {
  BlockAllocator small(16), large(16 + 100000);
  const double per_block =
      static_cast<double>(large.MetadataBytes() - small.MetadataBytes()) / 100000.0;
  // A 4-byte word (count, or free-run length), two 4-byte free-run links, a table-end byte.
  EXPECT_GE(per_block, 13.0);
  EXPECT_LE(per_block, 14.0);
}

// Arrays of 2 MiB or more come 2 MiB-aligned (offered for huge pages), smaller ones from
// operator new; both hold what is written to them.
TEST(HugePageArrayTest, LargeArraysAreAlignedToHugePages) {
  for (const std::size_t bytes : {std::size_t{4096}, std::size_t{3} << 20}) {
    void* p = AllocateHugePageArray(bytes);
    ASSERT_NE(p, nullptr);
    if (bytes >= (std::size_t{2} << 20)) {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % (std::size_t{2} << 20), 0u) << bytes;
    }
    auto* bytes_p = static_cast<unsigned char*>(p);
    bytes_p[0] = 1;
    bytes_p[bytes - 1] = 2;
    EXPECT_EQ(bytes_p[0] + bytes_p[bytes - 1], 3);
    FreeHugePageArray(p, bytes);
  }
}

// A pool whose per-block arrays take the huge-page path (a million blocks: 4 MiB of counts)
// allocates, counts references and frees across it, prefetch hints included.
TEST(BlockAllocatorTest, ALargePoolWorksAcrossItsRange) {
  constexpr std::int32_t kBlocks = 1 << 20;
  BlockAllocator a(kBlocks);
  std::vector<BlockId> got;
  for (int i = 0; i < 1000; ++i) {
    StatusOr<BlockId> b = a.Allocate(BlockHint{got.empty() ? kNoBlock : got.back(), 1});
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    got.push_back(*b);
  }
  ASSERT_TRUE(a.AddRef(got[500]).ok());
  a.PrefetchRefCount(got[500]);
  a.PrefetchRefCount(kBlocks + 5);  // out of range: nothing
  EXPECT_EQ(a.ref_count(got[500]), 2);
  EXPECT_EQ(a.num_free(), kBlocks - 1000);
  for (BlockId b : got) ASSERT_TRUE(a.Release(b).ok());
  ASSERT_TRUE(a.Release(got[500]).ok());
  EXPECT_EQ(a.num_free(), kBlocks);
  EXPECT_TRUE(a.CheckInvariantsForTesting().ok());
}

}  // namespace
}  // namespace attnrt::kvcache
