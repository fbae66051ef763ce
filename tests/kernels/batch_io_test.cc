// kernels::AddCopyNode's, AddMetadataCopyNode's and the copy after release's argument checks
// (batch_io.h): they refuse bad layouts before any CUDA call, so these run without a GPU too.
// AddCopyNode's copies are checked on the GPU by the executor's tests
// (GraphReplayIsBitIdenticalToEager compares the copy-kernel graphs of small buckets with the
// eager memcpy path); the metadata copy here, on a poisoned mirror, and by every executor test of
// device-memory pieces; the copy after release here: bytes written after the launch arrive, and
// without a release it times out harmlessly.
#include "kernels/batch_io.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <atomic>
#include <chrono>
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

TEST(CopyAfterReleaseTest, BadArgumentsAreRefusedNamingTheRule) {
  alignas(16) unsigned char from[64] = {};
  alignas(16) unsigned char to[64] = {};
  StagingRelease release{};
  struct Case {
    const void* from;
    void* to;
    StagingRelease* release;
    std::size_t zero;
    const char* says;
  };
  for (const Case& c : {Case{from + 4, to, &release, 0, "16-byte aligned"},
                        Case{from, to, nullptr, 0, "release is null"},
                        Case{from, to, &release, 65, "zero_on_timeout"}}) {
    cudaGraphNode_t node = nullptr;
    Status s = AddCopyAfterReleaseNode(/*graph=*/nullptr, nullptr, 0, c.from, c.to, 64,
                                       c.release, c.zero, std::chrono::milliseconds(1), &node);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.ToString();
    EXPECT_EQ(node, nullptr);
    s = LaunchCopyAfterRelease(c.from, c.to, 64, c.release, c.zero, std::chrono::milliseconds(1),
                               nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.ToString();
  }
}

// A graph whose copy waits for the release, replayed 64 times; each time the host writes fresh
// bytes only after the launch returned, then releases. Every replay's copy must carry that
// replay's bytes: a line of the source cached from the previous replay would fail it.
TEST(CopyAfterReleaseTest, CopiesTheBytesWrittenAfterTheLaunch) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device: the copy runs on the GPU";
  constexpr std::size_t kBytes = 24 * 1024 + 48;  // several CTAs, not a multiple of the grid
  unsigned char* host = nullptr;
  unsigned char* device = nullptr;
  StagingRelease* release = nullptr;
  ASSERT_EQ(cudaHostAlloc(&host, kBytes, cudaHostAllocMapped), cudaSuccess);
  ASSERT_EQ(cudaHostAlloc(&release, sizeof(StagingRelease), cudaHostAllocMapped), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&device, kBytes), cudaSuccess);
  *release = {};
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaGraphCreate(&graph, 0), cudaSuccess);
  cudaGraphNode_t node = nullptr;
  const Status added = AddCopyAfterReleaseNode(graph, nullptr, 0, host, device, kBytes, release,
                                               16, std::chrono::seconds(5), &node);
  ASSERT_TRUE(added.ok()) << added.ToString();
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  std::vector<unsigned char> got(kBytes);
  for (int replay = 0; replay < 64; ++replay) {
    ASSERT_EQ(cudaMemsetAsync(device, 0xA5, kBytes, stream), cudaSuccess);
    std::atomic_ref<unsigned>(release->ready).store(0, std::memory_order_relaxed);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    for (std::size_t i = 0; i < kBytes; ++i) host[i] = static_cast<unsigned char>(i * 13 + replay);
    std::atomic_ref<unsigned>(release->ready).store(1, std::memory_order_release);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), device, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < kBytes; ++i) wrong += got[i] != host[i];
    ASSERT_EQ(wrong, 0u) << "replay " << replay << ": bytes not as written after the launch";
  }
  EXPECT_EQ(release->timed_out, 0u);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaFree(device);
  cudaFreeHost(release);
  cudaFreeHost(host);
}

// No release: past its timeout the kernel says so, copies nothing and zeroes the leading bytes
// it was told to (the staging's lengths), so a later kernel would skip every row.
TEST(CopyAfterReleaseTest, WithoutAReleaseItTimesOutCopyingNothing) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device: the copy runs on the GPU";
  constexpr std::size_t kBytes = 4096, kZero = 64;
  unsigned char* host = nullptr;
  unsigned char* device = nullptr;
  StagingRelease* release = nullptr;
  ASSERT_EQ(cudaHostAlloc(&host, kBytes, cudaHostAllocMapped), cudaSuccess);
  ASSERT_EQ(cudaHostAlloc(&release, sizeof(StagingRelease), cudaHostAllocMapped), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&device, kBytes), cudaSuccess);
  std::memset(host, 0x11, kBytes);
  *release = {};
  ASSERT_EQ(cudaMemset(device, 0xA5, kBytes), cudaSuccess);
  const Status launched = LaunchCopyAfterRelease(host, device, kBytes, release, kZero,
                                                 std::chrono::milliseconds(2), nullptr);
  ASSERT_TRUE(launched.ok()) << launched.ToString();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(release->timed_out, 1u);
  std::vector<unsigned char> got(kBytes);
  ASSERT_EQ(cudaMemcpy(got.data(), device, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  for (std::size_t i = 0; i < kBytes; ++i) {
    ASSERT_EQ(got[i], i < kZero ? 0 : 0xA5) << "byte " << i;
  }
  cudaFree(device);
  cudaFreeHost(release);
  cudaFreeHost(host);
}

}  // namespace
}  // namespace attnrt::kernels
