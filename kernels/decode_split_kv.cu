// The tensor-core family of variant "split_kv" (production; its tuned table picks this family
// or split_kv_simt's per shape and batch): split-KV flash-decoding on tensor cores. Changed from
// "split_kv_simt": q·K^T and p·V run as mma.sync m16n8k16 (FP16 in, FP32 accumulate) instead of
// FP32 FMAs + lane shuffles, which made GQA issue-bound (G=8 reached 0.49 of the read ceiling).
// Each warp streams its own 16-token tiles through a private 3-stage cp.async ring (swizzled
// rows, ldmatrix reads, only __syncwarp between copy and use). S = Q K^T puts the G <= 8 heads
// on the M side (rows 8..15 are zero padding); O^T = V^T P^T puts D on the M side and the heads
// on N = 8, so P goes from S's accumulators straight into the B operand and O needs D/4
// registers. H100, 2026-11-21, GQA 64/8 B=32 T=4096: 242 -> 186 us (0.72 -> 0.94 of the read
// ceiling); MHA and G <= 4 within 1-2% of split_kv_simt (bench/NOTES.md, "## kernels").
// Issue 17: the warps' merge and the output-or-partial store are attention_merge.cuh's (the PTX
// differs only in the order of independent instructions; main loop untouched); the plan (kernel,
// grid, splits from the plan's device) is made once by PlanSplitKv (split_kv_launch.cu).
// Before waiting for the earlier grids each CTA asks L2 for its row's length, layer, first table
// lines and q (PrefetchRowStart): H200, B=1 T=4096 20.97 -> 20.59 us, the small D=64 batch 5.92
// -> 5.51 (bench/NOTES.md, 2026-11-30).
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/attention_merge.cuh"
#include "api/internal/cuda_check.h"
#include "kernels/decode_device.cuh"
#include "kernels/decode_internal.h"
#include "kernels/fp8_device.cuh"

namespace attnrt::kernels {
namespace {

constexpr int kWarpTokens = 16;  // tokens per warp tile: one mma k-step of p·V
constexpr int kMaxHeadsPerKv = 8;  // the N side of O^T = V^T P^T
constexpr int kMaxTcSmemBytes = 227 * 1024;  // dynamic shared memory a CTA may have on sm_90

// Tiles in the ring of a warp: 3. FP16: 4 and 6 measured 1.5-2.2% slower on MHA and GQA at
// T = 4096 (more bytes in flight per warp, fewer warps per SM; H100, bench/NOTES.md 2026-11-26).
// FP8: 3 keeps a D = 128 CTA at 48 KB so that four fit an SM (the register limit too): 16 warps
// per SM instead of 8, which the kernel needs more than bytes in flight (H100, GQA 32/8 B=32:
// issue-bound at 8 warps per SM, 4.5 cycles per instruction; bench/NOTES.md).
constexpr int kTcStages = 3;
// The CTAs per SM the register allocation must allow (0: ptxas decides, as for FP16): an FP8
// D = 128 CTA needs <= 128 registers a thread so that four fit, as its shared memory does; the
// other FP8 kernels get all the registers they want (ptxas would spill D = 256 otherwise).
template <int kHeadDim, bool kFp8>
constexpr int TcMinCtasPerSm() {
  return !kFp8 ? 0 : (kHeadDim == 128 ? 4 : 1);
}
// Shared memory of one warp: its ring of K and V tiles (FP16 rows or E4M3 code rows); FP8 also
// the appended token's FP16 K and V rows, copied in with the first tiles and quantized into the
// ring and the page when their tile is used (4 FP8 D = 128 CTAs still fit an SM: 4 x 50 KB).
template <int kHeadDim, bool kFp8>
constexpr int TcRingBytes() {
  constexpr int tile = kWarpTokens * kHeadDim;  // elements
  return kTcStages * 2 * tile * static_cast<int>(kFp8 ? 1 : sizeof(Half));
}
template <int kHeadDim, bool kFp8>
constexpr int TcWarpSmemBytes() {
  return TcRingBytes<kHeadDim, kFp8>() + (kFp8 ? 2 * kHeadDim * static_cast<int>(sizeof(Half)) : 0);
}
template <int kHeadDim, int kWarps, bool kFp8 = false>
constexpr int TcSmemBytes() {
  return kWarps * TcWarpSmemBytes<kHeadDim, kFp8>();
}

__device__ __forceinline__ void LdMatrixX4(const void* smem, std::uint32_t (&r)[4]) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void LdMatrixX4Trans(const void* smem, std::uint32_t (&r)[4]) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
// D += A(16x16, row) * B(16x8, col), FP16 inputs, FP32 accumulators.
__device__ __forceinline__ void Mma16816(float (&d)[4], std::uint32_t a0, std::uint32_t a1,
                                         std::uint32_t a2, std::uint32_t a3, std::uint32_t b0,
                                         std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// Row r, 16-byte chunk c of a [kWarpTokens][kHeadDim] tile, XOR-swizzled so that the 8 rows an
// ldmatrix reads at one logical chunk fall in 8 different bank groups.
template <int kHeadDim>
__device__ __forceinline__ int SwizzledOffset(int r, int c) {
  return r * kHeadDim + ((c ^ (r & 7)) << 3);
}

// Byte offset of 16-byte chunk c of row r in an E4M3 code tile ([kWarpTokens][kHeadDim] bytes),
// XOR-swizzled so that the fragment reads below (two K rows r, r+1 or four V rows 4t+i at one
// chunk per lane) hit distinct bank groups: rows r, r^1 differ in bit 0, rows 4t differ in bits 1-2.
template <int kHeadDim>
__device__ __forceinline__ int Fp8TileOffset(int r, int c) {
  constexpr int kChunks = kHeadDim / 16;
  const int f = ((r & 1) | (((r >> 2) & 3) << 1)) & (kChunks - 1);
  return r * kHeadDim + ((c ^ f) << 4);
}

// Profiling (SplitKvParams::cta_trace, null in production): thread 0 stamps %globaltimer into
// its CTA's slot `point` once `after` (a value the phase produced) is available.
__device__ __forceinline__ void StampCta(unsigned long long* trace, CtaTracePoint point,
                                         int after = 0) {
  if (trace == nullptr || threadIdx.x != 0) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : "r"(after) : "memory");
  const unsigned cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  trace[cta * kCtaTracePoints + point] = t;
  if (point == kCtaEntry) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    trace[cta * kCtaTracePoints + kCtaSm] = sm;
  }
}

// kWarps warps per CTA (the launch configuration study 4 sweeps): the CTA consumes
// 16 * kWarps tokens per pipeline step. kFp8: the pools hold E4M3 codes (SplitKvParams::kv_scales)
// and the mma fragments are built in registers from the code tile, with no FP16 copy in shared
// memory: two codes -> FP16x2 by the hardware converter. For that the tile is read permuted, which
// attention allows when both sides agree: (a) along D for q.K^T (lane t of a quad owns D/4
// consecutive bytes of a K row; Q's fragments are loaded in the same order); (b) along the tokens
// (S's column n is token pi(n): pi(2t) = 4t, pi(2t+1) = 4t+1, pi(2t+8) = 4t+2, pi(2t+9) = 4t+3, so
// P's fragment of lane t covers tokens 4t..4t+3, the four V rows it reads); (c) along D for p.V
// (lane g owns D/8 consecutive bytes of each V row, O^T row g of m-tile mt is d = g*D/8 + 2mt,
// row g+8 is d + 1; the store undoes it). K's scale multiplies the scores, V's the output.
template <int kHeadDim, int kWarps, bool kFp8 = false>
__global__ void __launch_bounds__(kWarps * 32, TcMinCtasPerSm<kHeadDim, kFp8>()) TcDecodeKernel(const SplitKvParams p) {
  // A copy moves 16 bytes: 8 FP16 values or 16 E4M3 codes of a row.
  constexpr int kChunks = kHeadDim / (kFp8 ? 16 : 8);        // 16-byte chunks per row
  constexpr int kCopies = kWarpTokens * kChunks / 32;        // per lane per tile, K (and V)
  constexpr int kKSteps = kHeadDim / 16;                     // q·K^T k-steps
  constexpr int kMTiles = kHeadDim / 16;                     // O^T m-tiles
  constexpr int kTileHalves = kWarpTokens * kHeadDim;
  constexpr int kCtaTokens = kWarps * kWarpTokens;
  extern __shared__ uint4 tc_smem[];

  StampCta(p.cta_trace, kCtaEntry);
  PrefetchRowStart<kHeadDim>(p, blockIdx.z, blockIdx.y);
  WaitForPrerequisiteGrids();  // lengths, tables, q and the appended K/V come from earlier work
  AllowDependentLaunch();
  StampCta(p.cta_trace, kCtaPrerequisitesDone);
  const int split = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int batch_row = blockIdx.z;
  const int len = p.kv_lengths[batch_row];
  const int layer = p.layers[batch_row];  // issued with the length: one memory round trip, not two
  if (len <= 0) {  // padding
    StampCta(p.cta_trace, kCtaExit);
    return;
  }
  const RowSplit ss = SplitRow(len, p.plan);
  if (split >= ss.num_splits) {  // this row needs fewer splits than the grid has
    StampCta(p.cta_trace, kCtaExit);
    return;
  }
  StampCta(p.cta_trace, kCtaLengthRead, ss.num_splits + layer);
  // Fused append: the last split of each (batch row, kv head) stores the new token's K/V into its
  // page and takes that token from k_new/v_new (so it never reads the page it writes).
  const int append_tok = (p.fuse_append && split == ss.num_splits - 1) ? len - 1 : -1;
  const int begin = split * ss.tiles_per_split * kCtaTokens;
  const int end = min(len, begin + ss.tiles_per_split * kCtaTokens);
  const int num_warp_tiles = (end - begin + kWarpTokens - 1) / kWarpTokens;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane >> 2;  // mma group: a row of A / a column of B
  const int t = lane & 3;   // thread in group
  const int my_tiles = warp < num_warp_tiles ? (num_warp_tiles - warp + kWarps - 1) / kWarps : 0;
  const int bs_mask = (1 << p.log2_block_size) - 1;
  const std::int64_t head_off =
      layer * p.layer_stride + static_cast<std::int64_t>(kv_head) * (bs_mask + 1) * kHeadDim;
  const Half* k_base = p.k + head_off;
  const Half* v_base = p.v + head_off;
  const int num_kv_heads = p.num_q_heads / p.group;
  // The new token's K/V of this (row, kv head): read by the appending split only, once each
  // (from the request in place, k_rows/v_rows, often across PCIe; or from k_new/v_new).
  const Half* k_new_row = nullptr;
  const Half* v_new_row = nullptr;
  if (append_tok >= 0) {
    k_new_row = static_cast<const Half*>(
        NewKvOfRow(p.k_rows, p.k_new, batch_row, num_kv_heads, kv_head, kHeadDim));
    v_new_row = static_cast<const Half*>(
        NewKvOfRow(p.v_rows, p.v_new, batch_row, num_kv_heads, kv_head, kHeadDim));
  }
  const std::int32_t* table =
      p.block_tables + static_cast<std::int64_t>(batch_row) * p.max_blocks_per_seq;
  char* warp_smem = reinterpret_cast<char*>(tc_smem) + warp * TcWarpSmemBytes<kHeadDim, kFp8>();
  // The ring of K/V tiles: FP16 rows, or E4M3 code rows (kTileHalves bytes a tile).
  Half* ring = reinterpret_cast<Half*>(warp_smem);
  std::uint8_t* code_ring = reinterpret_cast<std::uint8_t*>(warp_smem);
  // FP8: the byte pools and this (layer, kv head)'s scales.
  const std::uint8_t* k_codes = reinterpret_cast<const std::uint8_t*>(p.k) + head_off;
  const std::uint8_t* v_codes = reinterpret_cast<const std::uint8_t*>(p.v) + head_off;
  float k_scale = 1.0f, v_scale = 1.0f;
  if constexpr (kFp8) {
    k_scale = p.kv_scales[layer * num_kv_heads + kv_head];
    v_scale = p.kv_scales[(p.num_layers + layer) * num_kv_heads + kv_head];
  }

  // FP8: the appending warp copies the new token's FP16 K and V rows into its scratch, in the
  // first tiles' cp.async group (asynchronously, as FP16 does with the token's tile: a request in
  // place is a PCIe round trip away); they are quantized when their tile is used.
  Half* new_rows = reinterpret_cast<Half*>(warp_smem + TcRingBytes<kHeadDim, kFp8>());  // FP8
  if constexpr (kFp8) {
    if (append_tok >= 0 && warp == ((append_tok - begin) / kWarpTokens) % kWarps &&
        lane < kHeadDim / 8) {
      CpAsync16(new_rows + lane * 8, k_new_row + lane * 8, true);
      CpAsync16(new_rows + kHeadDim + lane * 8, v_new_row + lane * 8, true);
    }
  }

  // Lane j < 16 holds the block id of token j of the next tile to issue (fetched a tile ahead).
  auto tile_begin = [&](int j) { return begin + (warp + j * kWarps) * kWarpTokens; };
  auto load_block = [&](int j) {
    const int tok = tile_begin(j) + lane;
    return (j < my_tiles && lane < kWarpTokens && tok < end)
               ? __ldg(table + (tok >> p.log2_block_size))
               : 0;
  };
  // A tile inside one block (blocks of >= 16 tokens; tiles start at multiples of 16), all of it
  // before `end` and not holding the appended token, is 16 consecutive rows of the pool: lane l
  // copies the tile's 16-byte chunks l, l + 32, ... at fixed offsets from one address (about a
  // third of the loop's instructions went to per-row addressing; H200 ncu, 2026-11-29).
  static_assert(kWarpTokens == 1 << 4, "blocks of >= 2^4 tokens hold whole tiles");
  const bool blocks_hold_tiles = p.log2_block_size >= 4;
  auto issue = [&](int j, int block) {
    if (j >= my_tiles) return;  // warp-uniform
    {
      const int tb = tile_begin(j);
      if (blocks_hold_tiles && tb + kWarpTokens <= end &&
          (append_tok < tb || append_tok >= tb + kWarpTokens)) {  // warp-uniform
        const std::int64_t row0 =
            static_cast<std::int64_t>(__shfl_sync(0xffffffffu, block, 0)) * p.block_stride +
            static_cast<std::int64_t>(tb & bs_mask) * kHeadDim;  // elements
        constexpr int kElemBytes = kFp8 ? 1 : static_cast<int>(sizeof(Half));
        const char* k_src = (kFp8 ? reinterpret_cast<const char*>(k_codes)
                                  : reinterpret_cast<const char*>(k_base)) +
                            row0 * kElemBytes + lane * 16;
        const char* v_src = (kFp8 ? reinterpret_cast<const char*>(v_codes)
                                  : reinterpret_cast<const char*>(v_base)) +
                            row0 * kElemBytes + lane * 16;
        char* k_dst = warp_smem + (j % kTcStages) * 2 * kTileHalves * kElemBytes;
        char* v_dst = k_dst + kTileHalves * kElemBytes;
#pragma unroll
        for (int i = 0; i < kCopies; ++i) {
          const int idx = lane + 32 * i;
          const int r = idx / kChunks;
          const int c = idx % kChunks;
          const int dst = kFp8 ? Fp8TileOffset<kHeadDim>(r, c)
                               : SwizzledOffset<kHeadDim>(r, c) * kElemBytes;
          CpAsync16(k_dst + dst, k_src + 512 * i, true);
          CpAsync16(v_dst + dst, v_src + 512 * i, true);
        }
        return;
      }
    }
    if constexpr (kFp8) {
      std::uint8_t* kc = code_ring + (j % kTcStages) * 2 * kTileHalves;
      std::uint8_t* vc = kc + kTileHalves;
      const int tb = tile_begin(j);
#pragma unroll
      for (int i = 0; i < kCopies; ++i) {
        const int idx = lane + 32 * i;
        const int r = idx / kChunks;
        const int c = idx % kChunks;
        const int b = __shfl_sync(0xffffffffu, block, r);
        const int tok = tb + r;
        const bool valid = tok < end;
        const std::int64_t off = static_cast<std::int64_t>(b) * p.block_stride +
                                 static_cast<std::int64_t>(tok & bs_mask) * kHeadDim + c * 16;
        const int dst = Fp8TileOffset<kHeadDim>(r, c);
        if (tok == append_tok) continue;  // quantized from new_rows when the tile is used
        CpAsync16(kc + dst, valid ? k_codes + off : k_codes, valid);
        CpAsync16(vc + dst, valid ? v_codes + off : v_codes, valid);
      }
      return;
    }
    Half* ks = ring + (j % kTcStages) * 2 * kTileHalves;
    Half* vs = ks + kTileHalves;
    const int tb = tile_begin(j);
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      const int idx = lane + 32 * i;
      const int r = idx / kChunks;
      const int c = idx % kChunks;
      const int b = __shfl_sync(0xffffffffu, block, r);
      const int tok = tb + r;
      const bool valid = tok < end;
      const std::int64_t off = static_cast<std::int64_t>(b) * p.block_stride +
                               static_cast<std::int64_t>(tok & bs_mask) * kHeadDim + c * 8;
      const int dst = SwizzledOffset<kHeadDim>(r, c);
      if (tok == append_tok) {
        // Asynchronously like the rest of the tile (a request in place is a PCIe round trip
        // away); stored into its page once the tile has arrived (the main loop).
        CpAsync16(ks + dst, k_new_row + c * 8, true);
        CpAsync16(vs + dst, v_new_row + c * 8, true);
        continue;
      }
      CpAsync16(ks + dst, valid ? k_base + off : k_base, valid);
      CpAsync16(vs + dst, valid ? v_base + off : v_base, valid);
    }
  };

  int block = load_block(0);
#pragma unroll
  for (int s = 0; s < kTcStages - 1; ++s) {
    issue(s, block);
    CpAsyncCommit();
    block = load_block(s + 1);
  }

  // A fragments of Q (rows = heads; rows g >= G and 8..15 are zero).
  std::uint32_t qa0[kKSteps], qa2[kKSteps];
  {
    const bool head_ok = g < p.group;
    const std::uint32_t* q_row = reinterpret_cast<const std::uint32_t*>(
        QOfBatchRow<kHeadDim>(p, batch_row) + (kv_head * p.group + (head_ok ? g : 0)) * kHeadDim);
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      // FP16: d = 16kk + 2t (+8); FP8: the permuted order, d = t*D/4 + 4kk (+2).
      const int word = kFp8 ? t * (kHeadDim / 8) + 2 * kk : kk * 8 + t;
      qa0[kk] = head_ok ? q_row[word] : 0u;
      qa2[kk] = head_ok ? q_row[word + (kFp8 ? 1 : 4)] : 0u;
    }
  }

  // FP8: the scores of codes times K's scale are the scores of the dequantised K.
  const float score_scale = kFp8 ? p.scale_log2 * k_scale : p.scale_log2;
  float m = kNoScore;  // running max of head g (quad-uniform), log2 units
  float l = 0.0f;      // this thread's share of head g's sum
  float o[kMTiles][4];  // O^T: (d = mt*16 + g [+8], or FP8 g*D/8 + 2mt [+1]; heads 2t, 2t+1)
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;

  // ldmatrix source row of this lane: matrix lane/8 covers tokens +8*(lane/16) and chunk +(lane/8)&1.
  const int lm_row = ((lane >> 4) << 3) + (lane & 7);
  const int lm_chunk = (lane >> 3) & 1;
  // Element offset of the appended token's row in its page (K's and V's pools alike).
  auto append_row_offset = [&]() {
    return static_cast<std::int64_t>(__ldg(table + (append_tok >> p.log2_block_size))) *
               p.block_stride +
           static_cast<std::int64_t>(append_tok & bs_mask) * kHeadDim;
  };

  for (int j = 0; j < my_tiles; ++j) {
    issue(j + kTcStages - 1, block);
    CpAsyncCommit();
    block = load_block(j + kTcStages);
    CpAsyncWait<kTcStages - 1>();
    __syncwarp();  // the other lanes' copies of tile j are visible
    if (j == 0) StampCta(p.cta_trace, kCtaFirstTile);
    const Half* ks = ring + (j % kTcStages) * 2 * kTileHalves;
    const Half* vs = ks + kTileHalves;
    const std::uint8_t* kc = code_ring + (j % kTcStages) * 2 * kTileHalves;
    const std::uint8_t* vc = kc + kTileHalves;
    if constexpr (kFp8) {
      // FP8: the new token's FP16 rows arrived with the first tiles; lane c quantizes 16 values
      // of K and of V into its tile row (chunk c) and its page.
      const int r = append_tok - tile_begin(j);
      if (append_tok >= 0 && r >= 0 && r < kWarpTokens) {  // warp-uniform
        if (lane < kChunks) {
          const uint4* kn = reinterpret_cast<const uint4*>(new_rows + lane * 16);
          const uint4* vn = reinterpret_cast<const uint4*>(new_rows + kHeadDim + lane * 16);
          const uint4 k_row = QuantizeHalf16(kn[0], kn[1], k_scale);
          const uint4 v_row = QuantizeHalf16(vn[0], vn[1], v_scale);
          const std::int64_t off = append_row_offset() + lane * 16;  // codes: one byte each
          *reinterpret_cast<uint4*>(const_cast<std::uint8_t*>(k_codes) + off) = k_row;
          *reinterpret_cast<uint4*>(const_cast<std::uint8_t*>(v_codes) + off) = v_row;
          const int at = Fp8TileOffset<kHeadDim>(r, lane);
          *reinterpret_cast<uint4*>(const_cast<std::uint8_t*>(kc) + at) = k_row;
          *reinterpret_cast<uint4*>(const_cast<std::uint8_t*>(vc) + at) = v_row;
        }
        __syncwarp();  // the row is in the ring before any lane reads the tile
      }
    } else {
      // FP16: the new token came into the ring with its tile; from there into its page (lane c
      // stores 16-byte chunk c of its K and V rows).
      const int r = append_tok - tile_begin(j);
      if (append_tok >= 0 && r >= 0 && r < kWarpTokens && lane < kChunks) {
        const std::int64_t off = append_row_offset() + lane * 8;
        const int at = SwizzledOffset<kHeadDim>(r, lane);
        *reinterpret_cast<uint4*>(const_cast<Half*>(k_base) + off) =
            *reinterpret_cast<const uint4*>(ks + at);
        *reinterpret_cast<uint4*>(const_cast<Half*>(v_base) + off) =
            *reinterpret_cast<const uint4*>(vs + at);
      }
    }

    // S = Q K^T: heads x 16 tokens (two n-tiles of 8).
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    // FP8: this lane's words of V rows 4t..4t+3 (bytes g*D/8 .. +D/8), read before S so their
    // latency overlaps it.
    constexpr int kVWords = kHeadDim / 32;
    std::uint32_t vw[4][kFp8 ? kVWords : 1];
    if constexpr (kFp8) {
      constexpr int kKChunks = kHeadDim / 64;  // 16-byte chunks of a K row per lane
      const int kr0 = 4 * (g >> 1) + (g & 1);  // pi(g): n-tile 0's token; n-tile 1's is kr0 + 2
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = 4 * t + i;
        if constexpr (kHeadDim == 64) {
          const uint2 w = *reinterpret_cast<const uint2*>(vc + Fp8TileOffset<kHeadDim>(r, g >> 1) +
                                                          (g & 1) * 8);
          vw[i][0] = w.x;
          vw[i][1] = w.y;
        } else {
#pragma unroll
          for (int c = 0; c < kHeadDim / 128; ++c) {
            const uint4 w = *reinterpret_cast<const uint4*>(
                vc + Fp8TileOffset<kHeadDim>(r, g * (kHeadDim / 128) + c));
            vw[i][4 * c] = w.x;
            vw[i][4 * c + 1] = w.y;
            vw[i][4 * c + 2] = w.z;
            vw[i][4 * c + 3] = w.w;
          }
        }
      }
#pragma unroll
      for (int c = 0; c < kKChunks; ++c) {
        const uint4 k0 = *reinterpret_cast<const uint4*>(
            kc + Fp8TileOffset<kHeadDim>(kr0, t * kKChunks + c));
        const uint4 k1 = *reinterpret_cast<const uint4*>(
            kc + Fp8TileOffset<kHeadDim>(kr0 + 2, t * kKChunks + c));
        const std::uint32_t w0[4] = {k0.x, k0.y, k0.z, k0.w};
        const std::uint32_t w1[4] = {k1.x, k1.y, k1.z, k1.w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const int kk = 4 * c + w;
          std::uint32_t b0, b1, b2, b3;
          E4M3x4ToHalf(w0[w], b0, b1);
          E4M3x4ToHalf(w1[w], b2, b3);
          Mma16816(s[0], qa0[kk], 0u, qa2[kk], 0u, b0, b1);
          Mma16816(s[1], qa0[kk], 0u, qa2[kk], 0u, b2, b3);
        }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        std::uint32_t b[4];
        LdMatrixX4(ks + SwizzledOffset<kHeadDim>(lm_row, 2 * kk + lm_chunk), b);
        Mma16816(s[0], qa0[kk], 0u, qa2[kk], 0u, b[0], b[1]);
        Mma16816(s[1], qa0[kk], 0u, qa2[kk], 0u, b[2], b[3]);
      }
    }

    // Online softmax of head g over this thread's tokens 2t, 2t+1, 8+2t, 9+2t.
    const int tb = tile_begin(j);
    float x[4] = {s[0][0], s[0][1], s[1][0], s[1][1]};
    float mx = m;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      // Column 2t (+1) of n-tile e/2: token 8(e/2) + 2t (+1); FP8, permuted: 4t + e.
      const int tok = kFp8 ? tb + 4 * t + e : tb + (e >> 1) * 8 + 2 * t + (e & 1);
      x[e] = tok < end ? x[e] * score_scale : -INFINITY;
      mx = fmaxf(mx, x[e]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float corr = exp2f(m - mx);
    m = mx;
    // P rounds to FP16 for the tensor cores; the sum uses the rounded values so numerator and
    // denominator agree.
    __half2 p01 = __floats2half2_rn(exp2f(x[0] - mx), exp2f(x[1] - mx));
    __half2 p23 = __floats2half2_rn(exp2f(x[2] - mx), exp2f(x[3] - mx));
    const float2 f01 = __half22float2(p01), f23 = __half22float2(p23);
    l = l * corr + (f01.x + f01.y + f23.x + f23.y);
    const std::uint32_t pb0 = *reinterpret_cast<std::uint32_t*>(&p01);
    const std::uint32_t pb1 = *reinterpret_cast<std::uint32_t*>(&p23);
    // O^T columns are heads 2t and 2t+1: their rescale factors live in lanes 8t and 8t+4.
    // The rescale is skipped while no head's max moved (most tiles past the first few).
    const bool rescale = __any_sync(0xffffffffu, corr != 1.0f);
    float corr0 = 1.0f, corr1 = 1.0f;
    if (rescale) {
      corr0 = __shfl_sync(0xffffffffu, corr, 8 * t);
      corr1 = __shfl_sync(0xffffffffu, corr, 8 * t + 4);
    }

    // O^T += V^T P^T: D x heads, k = the 16 tokens.
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      if (rescale) {
        o[mt][0] *= corr0;
        o[mt][1] *= corr1;
        o[mt][2] *= corr0;
        o[mt][3] *= corr1;
      }
      std::uint32_t a[4];
      if constexpr (kFp8) {
        // a0: V rows 4t, 4t+1 at d = g*D/8 + 2mt; a1: the same rows at d + 1; a2, a3: rows
        // 4t+2, 4t+3. Interleave the rows' bytes into code pairs, then convert.
        const unsigned sel = (mt & 1) ? 0x7362u : 0x5140u;
        const std::uint32_t r01 = __byte_perm(vw[0][mt >> 1], vw[1][mt >> 1], sel);
        const std::uint32_t r23 = __byte_perm(vw[2][mt >> 1], vw[3][mt >> 1], sel);
        E4M3x4ToHalf(r01, a[0], a[1]);
        E4M3x4ToHalf(r23, a[2], a[3]);
      } else {
        // Matrices: (tokens 0-7, d chunk 2mt), (tokens 0-7, 2mt+1), (8-15, 2mt), (8-15, 2mt+1);
        // transposed, they are the A fragments a0, a1, a2, a3 of V^T.
        LdMatrixX4Trans(vs + SwizzledOffset<kHeadDim>(((lane >> 4) << 3) + (lane & 7),
                                                      2 * mt + ((lane >> 3) & 1)),
                        a);
      }
      Mma16816(o[mt], a[0], a[1], a[2], a[3], pb0, pb1);
    }
    __syncwarp();  // every lane is done with this stage before it is refilled
  }
  CpAsyncWait<0>();
  if constexpr (kFp8) {
    // O was accumulated over V's codes: times V's scale it is over the dequantised V.
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][e] *= v_scale;
    }
  }

  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);

  // Merge the warps through shared memory (the rings, now idle). A head's row is padded by 4
  // floats: the lanes t = 0..3 of a group store heads 2t, 2t+1 at one d, 8t banks apart (with
  // rows of kHeadDim they hit one bank, four-way). Heads past the group (the mma's zero padding)
  // are not stored: at G = 1 one lane in four stores, and the merge never reads them.
  constexpr int kRedStride = kHeadDim + 4;
  static_assert(sizeof(float) * kWarps * kMaxHeadsPerKv * (kRedStride + 2) <=
                    static_cast<std::size_t>(TcSmemBytes<kHeadDim, kWarps, kFp8>()),
                "reduction scratch must fit in the rings");
  __syncthreads();
  StampCta(p.cta_trace, kCtaLoopsDone);
  float* red_o = reinterpret_cast<float*>(tc_smem);                 // [warp][head][kRedStride]
  float* red_ml = red_o + kWarps * kMaxHeadsPerKv * kRedStride;   // [warp][head][2]
  const bool store_h0 = 2 * t < p.group, store_h1 = 2 * t + 1 < p.group;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    // O^T rows g and g+8 of m-tile mt: d and d + 8 (FP8, permuted: g*D/8 + 2mt and + 1).
    const int d = kFp8 ? g * (kHeadDim / 8) + 2 * mt : mt * 16 + g;
    const int d_hi = kFp8 ? d + 1 : d + 8;
    float* h0 = red_o + (warp * kMaxHeadsPerKv + 2 * t) * kRedStride;
    float* h1 = h0 + kRedStride;
    if (store_h0) {
      h0[d] = o[mt][0];
      h0[d_hi] = o[mt][2];
    }
    if (store_h1) {
      h1[d] = o[mt][1];
      h1[d_hi] = o[mt][3];
    }
  }
  if (t == 0) {
    red_ml[(warp * kMaxHeadsPerKv + g) * 2] = m;
    red_ml[(warp * kMaxHeadsPerKv + g) * 2 + 1] = l;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < p.group * kHeadDim; idx += (kWarps * 32)) {
    const int h = idx / kHeadDim;
    const int d = idx % kHeadDim;
    const AttentionState<float> s = MergeAttentionStates<float>(
        kWarps, [&](int w) { return red_ml[(w * kMaxHeadsPerKv + h) * 2]; },
        [&](int w) { return red_ml[(w * kMaxHeadsPerKv + h) * 2 + 1]; },
        [&](int w) { return red_o[(w * kMaxHeadsPerKv + h) * kRedStride + d]; });
    const std::int64_t row =
        static_cast<std::int64_t>(batch_row) * p.num_q_heads + kv_head * p.group + h;
    StoreOutputOrPartial<kHeadDim>(p, row, split, ss.num_splits, d, s);
  }
  StampCta(p.cta_trace, kCtaStored);
  MergeSplitsIfLast<kHeadDim>(p, batch_row, kv_head, p.group, ss.num_splits);
  StampCta(p.cta_trace, kCtaExit);
}

template <int kHeadDim, int kWarps, bool kFp8 = false>
SplitKvKernel TcKernelForConfig() {
  static_assert(TcSmemBytes<kHeadDim, kWarps, kFp8>() <= kMaxTcSmemBytes);
  SplitKvKernel k;
  k.fn = reinterpret_cast<const void*>(TcDecodeKernel<kHeadDim, kWarps, kFp8>);
  k.threads = kWarps * 32;
  k.smem_bytes = TcSmemBytes<kHeadDim, kWarps, kFp8>();
  k.tile_tokens = kWarps * kWarpTokens;
  return k;
}

template <int kHeadDim>
SplitKvKernel TcKernelForDim(int warps, bool fp8) {
  if (fp8) {
    return warps == kTcFp8Warps ? TcKernelForConfig<kHeadDim, kTcFp8Warps, true>()
                                : SplitKvKernel{};
  }
  // A CTA size whose rings exceed what an SM has is not built (8 warps of D = 256: 384 KB).
  auto if_fits = [](auto warps_c) -> SplitKvKernel {
    constexpr int kWarps = decltype(warps_c)::value;
    if constexpr (TcSmemBytes<kHeadDim, kWarps>() <= kMaxTcSmemBytes) {
      return TcKernelForConfig<kHeadDim, kWarps>();
    }
    return {};
  };
  switch (warps) {
    case 2: return if_fits(std::integral_constant<int, 2>{});
    case 4: return if_fits(std::integral_constant<int, 4>{});
    case 8: return if_fits(std::integral_constant<int, 8>{});
    default: return {};
  }
}

}  // namespace

StatusOr<SplitKvKernel> TcKernelFor(int head_dim, int warps, bool fp8) {
  SplitKvKernel k;
  ATTNRT_RETURN_IF_ERROR(DispatchHeadDim(
      head_dim, [&](auto d) { k = TcKernelForDim<decltype(d)::value>(warps, fp8); }));
  if (k.fn == nullptr && fp8) {
    return InvalidArgumentError("config.warps = " + std::to_string(warps) +
                                " is not built for an FP8 KV cache (warps " +
                                std::to_string(kTcFp8Warps) + " only)");
  }
  if (k.fn == nullptr) {
    return InvalidArgumentError("config.warps = " + std::to_string(warps) +
                                " is not built for head_dim = " + std::to_string(head_dim) +
                                " (warps 2, 4, 8; 8 only for head_dim 64 and 128)");
  }
  return k;
}

}  // namespace attnrt::kernels
