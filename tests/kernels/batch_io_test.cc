// kernels::AddCopyNode's and AddMetadataCopyNode's argument checks (batch_io.h): they refuse
// bad layouts before any CUDA call, so these run without a GPU too. AddCopyNode's copies are
// checked on the GPU by the executor's tests (GraphReplayIsBitIdenticalToEager compares the
// copy-kernel graphs of small buckets with the eager memcpy path); the metadata copy here, on a
// poisoned mirror, and by every executor test of device-memory pieces.
#include "kernels/batch_io.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "api/internal/cuda_check.h"

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

// Four rows of 8 blocks of 16 tokens: lengths and layers in [0, 32), the table in [32, 160),
// five pointer arrays in [160, 320).
MetadataCopyArgs FourRowLayout(const unsigned char* from, unsigned char* to) {
  MetadataCopyArgs a;
  a.from = from;
  a.to = to;
  a.head_bytes = 32;
  a.kv_lengths = 0;
  a.tables = 32;
  a.tail = 160;
  a.end = 320;
  a.capacity = 4;
  a.max_blocks = 8;
  a.block_size = 16;
  return a;
}

TEST(AddMetadataCopyNodeTest, InconsistentLayoutsAreRefused) {
  alignas(16) unsigned char from[512] = {};
  alignas(16) unsigned char to[512] = {};
  std::vector<MetadataCopyArgs> bad(5, FourRowLayout(from, to));
  bad[0].from = from + 4;   // misaligned
  bad[1].tail = 144;        // the table runs past the tail
  bad[2].head_bytes = 8;    // the lengths run past the head
  bad[3].block_size = 0;
  bad[4].end = 100;         // the tail ends before it starts
  for (const MetadataCopyArgs& a : bad) {
    cudaGraphNode_t node = nullptr;
    const Status s = AddMetadataCopyNode(/*graph=*/nullptr, nullptr, 0, a, &node);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_EQ(node, nullptr);
  }
}

// Rows of length 0, 1, 17 and 128 tokens (blocks of 16, 8 a row): the lengths, layers and pointer
// arrays arrive whole, each row's 0, 1, 2 and 8 needed blocks arrive, and the rest of the mirror
// keeps its poison.
TEST(AddMetadataCopyNodeTest, CopiesTheWholeRegionsAndEachRowsNeededBlocks) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device: the copy runs on the GPU";
  constexpr std::size_t kBytes = 320;
  unsigned char* host = nullptr;
  unsigned char* device = nullptr;
  ASSERT_EQ(cudaMallocHost(&host, kBytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&device, kBytes), cudaSuccess);
  for (std::size_t i = 0; i < kBytes; ++i) host[i] = static_cast<unsigned char>(i * 7 + 3);
  const std::int32_t lengths[4] = {0, 1, 17, 128};
  std::memcpy(host, lengths, sizeof lengths);
  ASSERT_EQ(cudaMemset(device, 0xA5, kBytes), cudaSuccess);
  const MetadataCopyArgs a = FourRowLayout(host, device);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaGraphCreate(&graph, 0), cudaSuccess);
  cudaGraphNode_t node = nullptr;
  const Status added = AddMetadataCopyNode(graph, nullptr, 0, a, &node);
  ASSERT_TRUE(added.ok()) << added.ToString();
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<unsigned char> got(kBytes);
  ASSERT_EQ(cudaMemcpy(got.data(), device, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  const int needed[4] = {0, 1, 2, 8};
  for (std::size_t i = 0; i < kBytes; ++i) {
    bool copied = i < 32 || i >= 160;
    if (!copied) {
      const std::size_t entry = (i - 32) / 4;
      copied = static_cast<int>(entry % 8) < needed[entry / 8];
    }
    EXPECT_EQ(got[i], copied ? host[i] : 0xA5) << "byte " << i;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(device);
  cudaFreeHost(host);
}

}  // namespace
}  // namespace attnrt::kernels
