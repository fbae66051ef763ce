// Paged decode attention (every path in the variant table, the GEMM path included) on the issue's
// shapes, timed as CUDA-graph replays with CUDA events (manual time): each graph runs `steps`
// runs of one plan (optionally append + decode) cycling over several input sets whose total
// exceeds L2, so no step reads K/V left in L2 by the previous one. Reports µs per step, achieved
// TB/s (K/V bytes once per kv head + q + out) and the ratio to a device read ceiling measured in
// this process (a read-only 16-byte-load reduction over a 4 GiB buffer, best of 10), and to the
// paged read ceiling of the shape's page slice (the same read in shuffled chunks of block_size x
// head_dim elements: what a paged cache allows, kernels/read_ceiling.h). Shapes
// "*_append" plan DecodeStep::kAppendAndDecode (fused in split_kv, the append kernel first in the
// other paths); "skew_*" batches give row 0 its own (long) context. Each shape also runs as
// BM_Decode/<shape>/default: the production default dispatch (DefaultDecodeVariant), whatever
// entry that is, beside every entry by name. The shape names are bench/sdpa_compare.py's. Use
// --benchmark_repetitions and the median aggregate (the registrations below ask for 5
// repetitions). --blocks picks the block tables' layout (tools::BlockOrder): shuffled (the
// default), in-order, or allocator (as the KV cache's allocator places them in serving); the
// counter `consecutive` is the fraction of adjacent table entries that are consecutive.
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bench/gpu_bench_util.h"
#include "api/internal/cuda_check.h"
#include "kernels/decode.h"
#include "kvcache/kvcache.h"
#include "tests/support/device_paged_batch.h"
#include "tests/support/random_fp16.h"

namespace attnrt::kernels {
namespace {

using testing::DeviceArray;

constexpr std::size_t kRotationBytes = 256ull << 20;  // > 5x the H100's 50 MB L2
constexpr int kMinSteps = 20;

// --blocks, set once by main before any benchmark runs.
tools::BlockOrder& BlockOrderFlag() {
  static tools::BlockOrder order = tools::BlockOrder::kShuffled;
  return order;
}
const char* BlockOrderName(tools::BlockOrder order) {
  switch (order) {
    case tools::BlockOrder::kShuffled: return "shuffled";
    case tools::BlockOrder::kInOrder: return "in-order";
    case tools::BlockOrder::kAllocator: return "allocator";
  }
  return "?";
}

void FillRandom(Half* p, std::size_t n, std::uint32_t seed) {
  if (n == 0) return;
  bench::FillNormal(reinterpret_cast<__half*>(p), static_cast<std::int64_t>(n), seed, nullptr);
}

// Clears bit 6 of every byte: any byte is then an E4M3 code of magnitude below 2 (exponent
// field <= 7), never NaN.
__global__ void MaskToSmallE4M3(std::uint32_t* p, std::size_t words) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < words;
       i += std::size_t{gridDim.x} * blockDim.x) {
    p[i] &= 0xBFBFBFBFu;
  }
}
// `bytes` random E4M3 codes (from N(0,1) FP16 bits, masked): the timing does not depend on the
// values, as long as none is NaN.
void FillRandomE4M3(void* p, std::size_t bytes, std::uint32_t seed) {
  if (bytes == 0) return;
  FillRandom(static_cast<Half*>(p), bytes / 2, seed);
  MaskToSmallE4M3<<<1024, 256>>>(static_cast<std::uint32_t*>(p), bytes / 4);
  bench::Check(cudaGetLastError(), "MaskToSmallE4M3");
}

struct Ceilings {
  double read_tbps = 0.0;
  double copy_tbps = 0.0;  // D2D cudaMemcpy, bytes read + written (for reference)
};

// Measured once per process, before any case, so every ratio uses the same ceilings.
const Ceilings& MeasureCeilings() {
  static const Ceilings c{bench::MeasureReadBandwidth() / 1e12,
                          bench::MeasureCopyBandwidth(nullptr) / 1e12};
  return c;
}

// The read ceiling of a paged pool whose pages hold `chunk_bytes` per (block, kv head), TB/s:
// kernels::MeasurePagedReadBandwidth, once per chunk size per process (no paged kernel can read
// the cache faster; the flat ceiling is what contiguous K/V, SDPA's, can reach).
double PagedCeilingTbps(std::size_t chunk_bytes) {
  static std::map<std::size_t, double> measured;
  auto it = measured.find(chunk_bytes);
  if (it == measured.end()) {
    const StatusOr<double> bw = MeasurePagedReadBandwidth(chunk_bytes);
    bench::CheckOk(bw, "MeasurePagedReadBandwidth");
    it = measured.emplace(chunk_bytes, *bw / 1e12).first;
  }
  return it->second;
}

struct BenchShape {
  const char* name;
  int batch, q_heads, kv_heads, context, head_dim, block_size;
  bool with_append;
  int max_context;
  int first_context = 0;  // > 0: row 0 attends this many tokens (a skewed batch); others `context`
  bool fp8 = false;       // an FP8 E4M3 KV cache (scales 1.0), else FP16; names end in _fp8
};

// Tokens row `row` of the batch attends.
int RowContext(const BenchShape& s, int row) {
  return row == 0 && s.first_context > 0 ? s.first_context : s.context;
}
int LongestContext(const BenchShape& s) { return std::max(s.context, s.first_context); }

// The issue's table (H100, FP16, D=128 unless said), then the shapes it adds: D 64 and 256, GQA
// 32/4, GQA at blocks 32 and 64, B=8 T=16384, B=128 T=1024, one 32K sequence among 31 of 512.
const BenchShape kShapes[] = {
    {"mha_b32_h32_t4096_bs16", 32, 32, 32, 4096, 128, 16, false, 4096},
    {"mha_b32_h32_t4096_bs32", 32, 32, 32, 4096, 128, 32, false, 4096},
    {"mha_b32_h32_t4096_bs64", 32, 32, 32, 4096, 128, 64, false, 4096},
    {"b1_h32_t4096", 1, 32, 32, 4096, 128, 16, false, 4096},
    {"b1_h32_t65536", 1, 32, 32, 65536, 128, 16, false, 65536},
    {"gqa32_8_b32_t4096", 32, 32, 8, 4096, 128, 16, false, 4096},
    {"gqa64_8_b32_t4096", 32, 64, 8, 4096, 128, 16, false, 4096},
    {"b32_h8_t128_d64", 32, 8, 8, 128, 64, 16, false, 4096},
    {"b32_h8_t128_d64_append", 32, 8, 8, 128, 64, 16, true, 4096},
    {"mha_b32_h32_t4096_d64", 32, 32, 32, 4096, 64, 16, false, 4096},
    {"gqa16_8_b32_t4096_d256", 32, 16, 8, 4096, 256, 16, false, 4096},
    {"gqa32_4_b32_t4096", 32, 32, 4, 4096, 128, 16, false, 4096},
    {"gqa32_8_b32_t4096_bs32", 32, 32, 8, 4096, 128, 32, false, 4096},
    {"gqa32_8_b32_t4096_bs64", 32, 32, 8, 4096, 128, 64, false, 4096},
    {"b8_h32_t16384", 8, 32, 32, 16384, 128, 16, false, 16384},
    {"b128_h32_t1024", 128, 32, 32, 1024, 128, 16, false, 1024},
    {"skew_b32_h32_1x32768_31x512", 32, 32, 32, 512, 128, 16, false, 32768, 32768},
    // Issue 13: the FP8 E4M3 cache on the issue's shapes (sdpa_compare.py times each against
    // FP16 SDPA on the shape without the suffix).
    {"mha_b32_h32_t4096_bs16_fp8", 32, 32, 32, 4096, 128, 16, false, 4096, 0, true},
    {"b1_h32_t4096_fp8", 1, 32, 32, 4096, 128, 16, false, 4096, 0, true},
    {"b1_h32_t65536_fp8", 1, 32, 32, 65536, 128, 16, false, 65536, 0, true},
    {"gqa32_8_b32_t4096_fp8", 32, 32, 8, 4096, 128, 16, false, 4096, 0, true},
    {"gqa64_8_b32_t4096_fp8", 32, 64, 8, 4096, 128, 16, false, 4096, 0, true},
    {"b32_h8_t128_d64_append_fp8", 32, 8, 8, 128, 64, 16, true, 4096, 0, true},
};

ModelShape ToModelShape(const BenchShape& s) {
  ModelShape m;
  m.num_layers = 1;
  m.num_q_heads = s.q_heads;
  m.num_kv_heads = s.kv_heads;
  m.head_dim = s.head_dim;
  m.block_size = s.block_size;
  m.max_context = s.max_context;
  if (s.fp8) m.kv_cache_type = KvCacheType::kFp8E4M3;  // scales: 1.0 each
  return m;
}

// Bytes one decode step must move: K and V once per kv head, q read, out written.
double StepBytes(const BenchShape& s) {
  double tokens = 0.0;
  for (int row = 0; row < s.batch; ++row) tokens += RowContext(s, row);
  const double kv = 2.0 * s.kv_heads * tokens * s.head_dim * (s.fp8 ? 1 : 2);
  const double qo = 2.0 * s.batch * s.q_heads * s.head_dim * 2;
  return kv + qo;
}

// Device-side input sets for one shape, shared by all variants (built once per shape).
struct InputSet {
  DeviceArray<Half> k_pool, v_pool, q, k_new, v_new, out;
  DeviceArray<std::int32_t> lengths, layers, tables;
  DeviceArray<float> lse;
  DeviceArray<float> kv_scales;  // FP8 shapes: 1.0 each
  int num_blocks = 0, max_blocks = 0;
  std::vector<std::int32_t> host_tables, host_lengths;  // for the reference check
  double consecutive = 0.0;  // adjacent table entries b[i+1] == b[i] + 1, of all adjacent pairs
};

struct Fixture {
  const BenchShape* shape = nullptr;
  std::vector<std::unique_ptr<InputSet>> sets;
};

Fixture& FixtureFor(const BenchShape& s) {
  static Fixture f;
  if (f.shape == &s) return f;
  f.sets.clear();
  f.shape = &s;
  const ModelShape m = ToModelShape(s);
  const std::size_t set_bytes = static_cast<std::size_t>(StepBytes(s));
  const int n_sets = static_cast<int>(std::max<std::size_t>(2, (kRotationBytes + set_bytes - 1) / set_bytes));
  std::vector<int> blocks_of_row(s.batch);
  for (int row = 0; row < s.batch; ++row) {
    blocks_of_row[row] = (RowContext(s, row) + s.block_size - 1) / s.block_size;
  }
  std::vector<std::int32_t> lengths(s.batch);
  for (int row = 0; row < s.batch; ++row) lengths[row] = RowContext(s, row);
  for (int k = 0; k < n_sets; ++k) {
    auto in = std::make_unique<InputSet>();
    in->max_blocks = m.max_blocks_per_sequence();
    // Set k's tables per --blocks (-1 past a row's blocks: the reference check reads them).
    StatusOr<tools::PlacedTables> placed = tools::PlaceBlockTables(
        s.block_size, m.max_context, lengths, BlockOrderFlag(), 1 + k, /*unused=*/-1);
    bench::CheckOk(placed, "PlaceBlockTables");
    const std::vector<std::int32_t>& tables = placed->tables;
    in->num_blocks = placed->num_blocks;
    const std::size_t pool = static_cast<std::size_t>(in->num_blocks) * m.kv_token_elems() * s.block_size;
    if (s.fp8) {  // `pool` one-byte codes, in arrays typed as halves (rounded up)
      bench::CheckOk(in->k_pool.Allocate((pool + 1) / 2), "in->k_pool.Allocate");
      bench::CheckOk(in->v_pool.Allocate((pool + 1) / 2), "in->v_pool.Allocate");
      FillRandomE4M3(in->k_pool.get(), pool, 1000 + 2 * k);
      FillRandomE4M3(in->v_pool.get(), pool, 1001 + 2 * k);
      bench::CheckOk(in->kv_scales.Upload(std::vector<float>(2 * s.kv_heads, 1.0f)),
                     "in->kv_scales.Upload");
    } else {
      bench::CheckOk(in->k_pool.Allocate(pool), "in->k_pool.Allocate");
      bench::CheckOk(in->v_pool.Allocate(pool), "in->v_pool.Allocate");
      FillRandom(in->k_pool.get(), pool, 1000 + 2 * k);
      FillRandom(in->v_pool.get(), pool, 1001 + 2 * k);
    }
    const std::size_t qn = static_cast<std::size_t>(s.batch) * s.q_heads * s.head_dim;
    const std::size_t kvn = static_cast<std::size_t>(s.batch) * s.kv_heads * s.head_dim;
    bench::CheckOk(in->q.Allocate(qn), "in->q.Allocate");
    bench::CheckOk(in->out.Allocate(qn), "in->out.Allocate");
    bench::CheckOk(in->k_new.Allocate(kvn), "in->k_new.Allocate");
    bench::CheckOk(in->v_new.Allocate(kvn), "in->v_new.Allocate");
    bench::CheckOk(in->lse.Allocate(static_cast<std::size_t>(s.batch) * s.q_heads),
                   "in->lse.Allocate");
    FillRandom(in->q.get(), qn, 77 + k);
    FillRandom(in->k_new.get(), kvn, 88 + k);
    FillRandom(in->v_new.get(), kvn, 99 + k);
    kvcache::BlockLayout layout;
    for (int b = 0; b < s.batch; ++b) {
      layout.Add(std::span<const std::int32_t>(
          tables.data() + static_cast<std::size_t>(b) * in->max_blocks, blocks_of_row[b]));
    }
    in->consecutive = layout.consecutive_fraction();
    bench::CheckOk(in->tables.Upload(tables), "in->tables.Upload");
    in->host_tables = tables;
    in->host_lengths = lengths;
    bench::CheckOk(in->lengths.Upload(lengths), "in->lengths.Upload");
    bench::CheckOk(in->layers.Upload(std::vector<std::int32_t>(s.batch, 0)), "in->layers.Upload");
    f.sets.push_back(std::move(in));
  }
  bench::Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return f;
}

// What each benchmark checks before it times: set 0's output of the run just made (outputs
// poisoned before it) against the CPU reference in FP64 over the pools as that run left them
// (the new token appended, where the shape appends), on the batch's first and last rows (the
// skewed batch's long row and a short one). Exits (status 1) naming the benchmark on a mismatch:
// max |out - ref| > 2e-3 or relative L2 > 1e-3 (N(0,1) q, K/V N(0,1) or E4M3 codes below 2).
void CheckAgainstReferenceOrExit(const BenchShape& s, const ModelShape& m, const InputSet& in,
                                 std::string_view variant) {
  std::vector<int> rows = {0};
  if (s.batch > 1) rows.push_back(s.batch - 1);
  const int eb = s.fp8 ? 1 : 2;  // bytes per K/V element
  const std::int64_t block_elems = static_cast<std::int64_t>(s.kv_heads) * s.block_size * s.head_dim;
  const std::size_t qrow = static_cast<std::size_t>(s.q_heads) * s.head_dim;
  // The checked rows' blocks, copied into a compact host pool (block ids renumbered).
  std::vector<std::uint8_t> k_bytes, v_bytes;
  std::vector<std::int32_t> tables(rows.size() * in.max_blocks, -1), lengths, layers(rows.size(), 0);
  std::vector<Half> q(rows.size() * qrow), got(rows.size() * qrow), out(rows.size() * qrow);
  int next_block = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const int r = rows[i];
    lengths.push_back(in.host_lengths[r]);
    const int nb = (in.host_lengths[r] + s.block_size - 1) / s.block_size;
    for (int j = 0; j < nb; ++j) {
      const std::int64_t id = in.host_tables[static_cast<std::size_t>(r) * in.max_blocks + j];
      const std::size_t bytes = static_cast<std::size_t>(block_elems) * eb;
      k_bytes.resize(k_bytes.size() + bytes);
      v_bytes.resize(v_bytes.size() + bytes);
      const char* kd = reinterpret_cast<const char*>(in.k_pool.get()) + id * bytes;
      const char* vd = reinterpret_cast<const char*>(in.v_pool.get()) + id * bytes;
      bench::Check(cudaMemcpy(k_bytes.data() + next_block * bytes, kd, bytes, cudaMemcpyDeviceToHost),
                   "cudaMemcpy K block");
      bench::Check(cudaMemcpy(v_bytes.data() + next_block * bytes, vd, bytes, cudaMemcpyDeviceToHost),
                   "cudaMemcpy V block");
      tables[i * in.max_blocks + j] = next_block++;
    }
    bench::Check(cudaMemcpy(q.data() + i * qrow, in.q.get() + r * qrow, qrow * sizeof(Half),
                            cudaMemcpyDeviceToHost), "cudaMemcpy q row");
    bench::Check(cudaMemcpy(got.data() + i * qrow, in.out.get() + r * qrow, qrow * sizeof(Half),
                            cudaMemcpyDeviceToHost), "cudaMemcpy out row");
  }
  KvPoolView pools;
  pools.k = reinterpret_cast<Half*>(k_bytes.data());
  pools.v = reinterpret_cast<Half*>(v_bytes.data());
  pools.num_layers = 1;
  pools.num_blocks = next_block;
  pools.num_kv_heads = s.kv_heads;
  pools.block_size = s.block_size;
  pools.head_dim = s.head_dim;
  DecodeBatchView batch;
  batch.capacity = static_cast<int>(rows.size());
  batch.num_q_heads = s.q_heads;
  batch.max_blocks_per_seq = in.max_blocks;
  batch.kv_lengths = lengths.data();
  batch.layers = layers.data();
  batch.block_tables = tables.data();
  batch.q = q.data();
  batch.out = out.data();
  batch.scale = m.scale();
  std::vector<float> ref(out.size());
  if (s.fp8) {
    const std::vector<float> ones(2 * static_cast<std::size_t>(s.kv_heads), 1.0f);
    Fp8KvPoolView fp8;
    fp8.geometry = pools;
    fp8.k = k_bytes.data();
    fp8.v = v_bytes.data();
    fp8.scales = ones.data();
    ReferenceDecode(batch, fp8, ReferencePrecision::kFloat64, ref.data());
  } else {
    ReferenceDecode(batch, pools, ReferencePrecision::kFloat64, ref.data());
  }
  double max_abs = 0, diff2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(HalfToFloat(got[i])) - ref[i];
    max_abs = std::isfinite(d) ? std::max(max_abs, std::abs(d)) : INFINITY;
    diff2 += d * d;
    ref2 += static_cast<double>(ref[i]) * ref[i];
  }
  const double rel_l2 = std::sqrt(diff2 / std::max(ref2, 1e-30));
  if (!(max_abs <= 2e-3) || !(rel_l2 <= 1e-3)) {
    std::fprintf(stderr,
                 "kernels_decode_bench: %s/%.*s: output differs from the FP64 reference "
                 "(rows 0 and %d): max |out - ref| %.3g (limit 2e-3), relative L2 %.3g (limit "
                 "1e-3)\n",
                 s.name, static_cast<int>(variant.size()), variant.data(), s.batch - 1, max_abs,
                 rel_l2);
    std::exit(1);
  }
}

void BM_Decode(benchmark::State& state, const BenchShape* s, const DecodeVariant* v) {
  const ModelShape m = ToModelShape(*s);
  if (const Status supported = v->supports(m); !supported.ok()) {
    state.SkipWithError(supported.ToString().c_str());
    return;
  }
  const Ceilings& ceil = MeasureCeilings();
  Fixture& f = FixtureFor(*s);
  const int n_sets = static_cast<int>(f.sets.size());
  const int steps = (kMinSteps + n_sets - 1) / n_sets * n_sets;
  // One plan serves every input set (same shape and capacity); the GEMM path's Tpad bucket is
  // the one the executor would pick for this context.
  const DecodePlan plan =
      bench::PlanOrExit(*v, m, s->batch,
                        s->with_append ? DecodeStep::kAppendAndDecode : DecodeStep::kDecode,
                        LongestContext(*s));
  DeviceArray<char> ws_storage;
  bench::CheckOk(ws_storage.Allocate(plan.workspace_bytes), "ws_storage.Allocate");
  const DecodeWorkspace ws{ws_storage.get(), plan.workspace_bytes};
  bench::CheckOk(PrepareDecodeWorkspace(plan, ws, nullptr), "PrepareDecodeWorkspace");
  bench::Check(cudaDeviceSynchronize(), "sync after PrepareDecodeWorkspace");
  cublasHandle_t cublas = nullptr;
  if (plan.uses_cublas) bench::Check(cublasCreate(&cublas), "cublasCreate");

  auto views = [&](const InputSet& in) {
    KvPoolView p;
    p.k = in.k_pool.get();
    p.v = in.v_pool.get();
    p.num_layers = 1;
    p.num_blocks = in.num_blocks;
    p.num_kv_heads = s->kv_heads;
    p.block_size = s->block_size;
    p.head_dim = s->head_dim;
    p.scales = s->fp8 ? in.kv_scales.get() : nullptr;
    DecodeBatchView b;
    b.capacity = s->batch;
    b.num_q_heads = s->q_heads;
    b.max_blocks_per_seq = in.max_blocks;
    b.kv_lengths = in.lengths.get();
    b.layers = in.layers.get();
    b.block_tables = in.tables.get();
    b.q = in.q.get();
    b.k_new = in.k_new.get();
    b.v_new = in.v_new.get();
    b.out = in.out.get();
    b.lse = in.lse.get();
    b.scale = m.scale();
    return std::make_pair(p, b);
  };

  cudaStream_t stream;
  bench::Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  const DecodeRunContext context{stream, cublas};
  {
    // One eager run before capture: module loading and cuBLAS's kernel choice stay out of it;
    // its output (poisoned first) is checked against the reference.
    const auto [pools, batch] = views(*f.sets[0]);
    bench::Check(cudaMemset(f.sets[0]->out.get(), 0xFF, f.sets[0]->out.size() * sizeof(Half)),
                 "cudaMemset out");
    bench::CheckOk(v->run(plan, batch, pools, ws, context), "warm-up run");
    bench::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    CheckAgainstReferenceOrExit(*s, m, *f.sets[0], v->name);
  }
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  bench::Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int i = 0; i < steps; ++i) {
    const auto [pools, batch] = views(*f.sets[i % n_sets]);
    bench::CheckOk(v->run(plan, batch, pools, ws, context), "v->run");
  }
  bench::Check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  bench::Check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cudaEvent_t a, b;
  bench::Check(cudaEventCreate(&a), "cudaEventCreate");
  bench::Check(cudaEventCreate(&b), "cudaEventCreate");
  for (int w = 0; w < 3; ++w) bench::Check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");  // warm-up
  bench::Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::vector<double> step_s;
  for (auto _ : state) {
    bench::Check(cudaEventRecord(a, stream), "cudaEventRecord");
    bench::Check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    bench::Check(cudaEventRecord(b, stream), "cudaEventRecord");
    bench::Check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    bench::Check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    step_s.push_back(ms * 1e-3 / steps);
    state.SetIterationTime(step_s.back());
  }
  // Median step time of this repetition (Google Benchmark then reports the median over
  // repetitions as well).
  std::nth_element(step_s.begin(), step_s.begin() + step_s.size() / 2, step_s.end());
  const double t = step_s[step_s.size() / 2];
  const double bytes = StepBytes(*s);
  state.counters["us"] = t * 1e6;
  state.counters["TBps"] = bytes / t / 1e12;
  state.counters["ratio_to_read_ceiling"] = bytes / t / 1e12 / ceil.read_tbps;
  state.counters["ceiling_TBps"] = ceil.read_tbps;
  const double paged_tbps = PagedCeilingTbps(static_cast<std::size_t>(s->block_size) *
                                             s->head_dim * (s->fp8 ? 1 : sizeof(Half)));
  state.counters["paged_ceiling_TBps"] = paged_tbps;
  state.counters["ratio_to_paged_ceiling"] = bytes / t / 1e12 / paged_tbps;
  state.counters["d2d_copy_TBps"] = ceil.copy_tbps;
  state.counters["bytes"] = bytes;
  state.counters["rotation_sets"] = n_sets;
  state.counters["consecutive"] = f.sets[0]->consecutive;
  state.counters["pool_blocks"] = f.sets[0]->num_blocks;
  const bool shuffled = BlockOrderFlag() == tools::BlockOrder::kShuffled;  // the label as before
  state.SetLabel(std::string(v->name) + (s->fp8 ? " fp8" : "") +
                 (shuffled ? "" : " " + std::string(BlockOrderName(BlockOrderFlag())) + " blocks") +
                 (s->with_append ? " append+decode" : " decode") +
                 (s->first_context > 0 ? " (ragged: row 0 at " + std::to_string(s->first_context) +
                                             ", the rest at " + std::to_string(s->context) + ")"
                                       : std::string()));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  if (cublas != nullptr) cublasDestroy(cublas);
}

void BM_ReadCeiling(benchmark::State& state) {
  const Ceilings& c = MeasureCeilings();
  for (auto _ : state) state.SetIterationTime(1.0);
  state.counters["read_TBps"] = c.read_tbps;
  state.counters["d2d_copy_TBps"] = c.copy_tbps;
}

int RegisterAll() {
  benchmark::RegisterBenchmark("BM_ReadCeiling", BM_ReadCeiling)->UseManualTime()->Iterations(1);
  for (const BenchShape& s : kShapes) {
    auto add = [&](std::string_view row, const DecodeVariant* v) {
      benchmark::RegisterBenchmark(("BM_Decode/" + std::string(s.name) + "/" + std::string(row)).c_str(),
                                   BM_Decode, &s, v)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->MinTime(0.02)
          ->Repetitions(5)
          ->ReportAggregatesOnly(true);
    };
    for (const DecodeVariant& v : DecodeVariants()) add(v.name, &v);
    add("default", &DefaultDecodeVariant());  // its label names the entry it resolved to
  }
  return 0;
}
const int kRegistered = RegisterAll();

}  // namespace
}  // namespace attnrt::kernels

// Google Benchmark's main, after taking out --blocks (this benchmark's own flag).
int main(int argc, char** argv) {
  using attnrt::tools::BlockOrder;
  constexpr const char* kBlocksHelp =
      "  --blocks=shuffled|in-order|allocator\n"
      "      block tables: ids shuffled over the pool (default), each row's in order, or as the\n"
      "      KV cache's block allocator places them after a churn warm-up\n";
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") std::printf("kernels_decode_bench flags:\n%s\n", kBlocksHelp);
    std::string_view value;
    if (arg.starts_with("--blocks=")) {
      value = arg.substr(9);
    } else if (arg == "--blocks" && i + 1 < argc) {
      value = argv[++i];
    } else if (arg == "--blocks") {
      value = "";
    } else {
      rest.push_back(argv[i]);
      continue;
    }
    if (value == "shuffled") {
      attnrt::kernels::BlockOrderFlag() = BlockOrder::kShuffled;
    } else if (value == "in-order") {
      attnrt::kernels::BlockOrderFlag() = BlockOrder::kInOrder;
    } else if (value == "allocator") {
      attnrt::kernels::BlockOrderFlag() = BlockOrder::kAllocator;
    } else {
      std::fprintf(stderr, "kernels_decode_bench: --blocks = '%.*s', expected one of:\n%s",
                   static_cast<int>(value.size()), value.data(), kBlocksHelp);
      return 2;
    }
  }
  int rest_argc = static_cast<int>(rest.size());
  rest.push_back(nullptr);
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
