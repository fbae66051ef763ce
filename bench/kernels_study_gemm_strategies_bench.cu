// Study 1 (after "Scaling Analysis of cuBLAS GEMMs for Self-Attention Kernels", A100, FP32):
// iterative vs pointer-array batched vs strided-batched vs big GEMM, equal FLOPs, GPU time and
// wall-clock time separately, FP32 (no TF32) and FP16 (FP32 compute).
//   square:  k products A[NxN] B[NxN] (N = 1024, 2560, 4096; k = 2 .. a cap per N that keeps
//            each case under ~0.2 s); big GEMM = A[NxN] x B[N x kN].
//   llama:   the QK^T of one attention layer, H heads (32, 64, 128 = Llama-3.1 8B/70B/405B),
//            D = 128, context T = 1024 .. 16384; prefill (q-len T) and decode (q-len 1);
//            big GEMM = Q_0 x K_all^T (one Q against every head's K: same FLOPs and bytes).
// Cases over kMemoryCapBytes are reported as skipped. Names: study/family/dtype/sizes/method.
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/gpu_bench_util.h"

namespace attnrt::bench {
namespace {

constexpr double kMemoryCapBytes = 36e9;

enum class Method { kIterative, kPointerBatched, kStridedBatched, kBigGemm };
constexpr Method kMethods[] = {Method::kIterative, Method::kPointerBatched,
                               Method::kStridedBatched, Method::kBigGemm};
const char* MethodName(Method m) {
  switch (m) {
    case Method::kIterative: return "iterative";
    case Method::kPointerBatched: return "pointer_batched";
    case Method::kStridedBatched: return "strided_batched";
    case Method::kBigGemm: return "big_gemm";
  }
  return "?";
}

// `batch` column-major products C_i[m x n] = op(A_i)[m x k] * B_i[k x n], and the one big GEMM
// with the same FLOPs over the same buffers.
struct Problem {
  std::string family;
  bool fp16 = false;
  cublasOperation_t op_a = CUBLAS_OP_N;
  int m = 0, n = 0, k = 0;
  int lda = 0, ldb = 0, ldc = 0;
  long long stride_a = 0, stride_b = 0, stride_c = 0;
  int batch = 0;
  int big_m = 0, big_n = 0, big_ldc = 0;
  std::vector<std::pair<std::string, double>> params;  // reported as counters

  std::size_t elem() const { return fp16 ? 2 : 4; }
  double bytes() const {
    return static_cast<double>(elem()) * batch * (stride_a + stride_b + stride_c);
  }
  double flops() const { return 2.0 * m * n * k * batch; }
};

Problem Square(bool fp16, int n, int k) {
  Problem p;
  p.family = "square";
  p.fp16 = fp16;
  p.m = p.n = p.k = n;
  p.lda = p.ldb = p.ldc = n;
  p.stride_a = p.stride_b = p.stride_c = static_cast<long long>(n) * n;
  p.batch = k;
  p.big_m = n;
  p.big_n = k * n;
  p.big_ldc = n;
  p.params = {{"N", n}, {"k", k}};
  return p;
}

// S_h^T[T x Tq] = K_h[T x D] Q_h^T[D x Tq] per head (row-major Q, K as in a framework).
Problem LlamaQk(bool fp16, bool prefill, int heads, int t) {
  constexpr int kD = 128;
  const int tq = prefill ? t : 1;
  Problem p;
  p.family = prefill ? "llama_prefill" : "llama_decode";
  p.fp16 = fp16;
  p.op_a = CUBLAS_OP_T;
  p.m = t;
  p.n = tq;
  p.k = kD;
  p.lda = kD;
  p.ldb = kD;
  p.ldc = t;
  p.stride_a = static_cast<long long>(t) * kD;
  p.stride_b = static_cast<long long>(tq) * kD;
  p.stride_c = static_cast<long long>(t) * tq;
  p.batch = heads;
  p.big_m = heads * t;
  p.big_n = tq;
  p.big_ldc = heads * t;
  p.params = {{"H", heads}, {"T", t}, {"q_len", tq}};
  return p;
}

struct Context {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
};
Context& Ctx() {
  static Context c = [] {
    Context x;
    Check(cudaStreamCreateWithFlags(&x.stream, cudaStreamNonBlocking), "stream");
    Check(cublasCreate(&x.cublas), "cublasCreate");
    Check(cublasSetStream(x.cublas, x.stream), "cublasSetStream");
    return x;
  }();
  return c;
}

void RunCase(benchmark::State& state, const Problem& p, Method method) {
  if (p.bytes() > kMemoryCapBytes) {
    state.SkipWithError("skipped: needs more than the 36 GB memory cap");
    return;
  }
  Context& ctx = Ctx();
  const std::size_t e = p.elem();
  char* a = nullptr;
  char* b = nullptr;
  char* c = nullptr;
  const std::int64_t na = p.stride_a * p.batch, nb = p.stride_b * p.batch, nc = p.stride_c * p.batch;
  if (cudaMalloc(&a, na * e) != cudaSuccess || cudaMalloc(&b, nb * e) != cudaSuccess ||
      cudaMalloc(&c, nc * e) != cudaSuccess) {
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaGetLastError();
    state.SkipWithError("skipped: cudaMalloc failed");
    return;
  }
  if (p.fp16) {
    FillNormal(reinterpret_cast<__half*>(a), na, 11, ctx.stream);
    FillNormal(reinterpret_cast<__half*>(b), nb, 12, ctx.stream);
  } else {
    FillNormal(reinterpret_cast<float*>(a), na, 11, ctx.stream);
    FillNormal(reinterpret_cast<float*>(b), nb, 12, ctx.stream);
  }
  void** arrays = nullptr;  // pointer-array operands, built once (outside the timing)
  if (method == Method::kPointerBatched) {
    std::vector<void*> host(3 * static_cast<std::size_t>(p.batch));
    for (int i = 0; i < p.batch; ++i) {
      host[i] = a + i * p.stride_a * e;
      host[p.batch + i] = b + i * p.stride_b * e;
      host[2 * p.batch + i] = c + i * p.stride_c * e;
    }
    Check(cudaMalloc(&arrays, host.size() * sizeof(void*)), "malloc arrays");
    Check(cudaMemcpy(arrays, host.data(), host.size() * sizeof(void*), cudaMemcpyHostToDevice),
          "copy arrays");
  }
  const cudaDataType t = p.fp16 ? CUDA_R_16F : CUDA_R_32F;
  const float alpha = 1.0f, beta = 0.0f;
  auto enqueue = [&] {
    switch (method) {
      case Method::kIterative:
        for (int i = 0; i < p.batch; ++i) {
          Check(cublasGemmEx(ctx.cublas, p.op_a, CUBLAS_OP_N, p.m, p.n, p.k, &alpha,
                             a + i * p.stride_a * e, t, p.lda, b + i * p.stride_b * e, t, p.ldb,
                             &beta, c + i * p.stride_c * e, t, p.ldc, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT),
                "cublasGemmEx");
        }
        break;
      case Method::kPointerBatched:
        Check(cublasGemmBatchedEx(ctx.cublas, p.op_a, CUBLAS_OP_N, p.m, p.n, p.k, &alpha,
                                  arrays, t, p.lda, arrays + p.batch, t, p.ldb, &beta,
                                  arrays + 2 * p.batch, t, p.ldc, p.batch, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT),
              "cublasGemmBatchedEx");
        break;
      case Method::kStridedBatched:
        Check(cublasGemmStridedBatchedEx(ctx.cublas, p.op_a, CUBLAS_OP_N, p.m, p.n, p.k, &alpha,
                                         a, t, p.lda, p.stride_a, b, t, p.ldb, p.stride_b, &beta,
                                         c, t, p.ldc, p.stride_c, p.batch, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT),
              "cublasGemmStridedBatchedEx");
        break;
      case Method::kBigGemm:
        Check(cublasGemmEx(ctx.cublas, p.op_a, CUBLAS_OP_N, p.big_m, p.big_n, p.k, &alpha, a, t,
                           p.lda, b, t, p.ldb, &beta, c, t, p.big_ldc, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx(big)");
        break;
    }
  };
  GpuTimer timer(ctx.stream);
  MeasureInto(state, timer, enqueue);
  for (const auto& [name, value] : p.params) state.counters[name] = value;
  state.counters["fp16"] = p.fp16 ? 1 : 0;
  state.counters["launches"] = method == Method::kIterative ? p.batch : 1;
  state.counters["tflops"] = p.flops() / (state.counters["gpu_us"].value * 1e-6) / 1e12;
  cudaFree(arrays);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
}

void Register(const Problem& p, const std::string& sizes) {
  for (Method m : kMethods) {
    const std::string name = "strategies/" + p.family + "/" + (p.fp16 ? "fp16" : "fp32") + "/" +
                             sizes + "/" + MethodName(m);
    benchmark::RegisterBenchmark(name.c_str(), [p, m](benchmark::State& s) { RunCase(s, p, m); })
        ->UseManualTime()
        ->Iterations(3)
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace
}  // namespace attnrt::bench

int main(int argc, char** argv) {
  using namespace attnrt::bench;
  for (bool fp16 : {false, true}) {
    // k caps: each case's largest execution stays near 0.1-0.2 s in FP32 on an H100.
    const std::pair<int, int> square[] = {{1024, 256}, {2560, 64}, {4096, 32}};
    for (auto [n, k_max] : square) {
      for (int k = 2; k <= k_max; k *= 2) {
        Register(Square(fp16, n, k), "N:" + std::to_string(n) + "/k:" + std::to_string(k));
      }
    }
    for (bool prefill : {true, false}) {
      for (int h : {32, 64, 128}) {
        for (int t = 1024; t <= 16384; t *= 2) {
          Register(LlamaQk(fp16, prefill, h, t),
                   "H:" + std::to_string(h) + "/T:" + std::to_string(t));
        }
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
