// kernels::AddCopyNode's argument check (batch_io.h): it refuses unaligned pointers before any
// CUDA call, so this runs without a GPU too. The copies themselves are checked on the GPU by the
// executor's tests (GraphReplayIsBitIdenticalToEager compares the copy-kernel graphs of small
// buckets with the eager memcpy path).
#include "kernels/batch_io.h"

#include <gtest/gtest.h>

#include <string>

namespace attnrt::kernels {
namespace {

TEST(AddCopyNodeTest, UnalignedPointersAreRefusedNamingTheRule) {
  alignas(16) unsigned char from[64] = {};
  alignas(16) unsigned char to[64] = {};
  for (auto [src, dst] : {std::pair<const void*, void*>{from + 1, to},
                          std::pair<const void*, void*>{from, to + 8}}) {
    cudaGraphNode_t node = nullptr;
    const Status s = AddCopyNode(/*graph=*/nullptr, nullptr, 0, src, dst, 32, &node);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("16-byte aligned"), std::string::npos) << s.ToString();
    EXPECT_EQ(node, nullptr) << "nothing was added";
  }
}

}  // namespace
}  // namespace attnrt::kernels
