// The smallest program that embeds attnrt: one sequence, a short prompt, one decode request.
// Build against the `attnrt` target; it picks the GPU when one is present.
#include <cstdio>
#include <cstring>
#include <vector>

#include <attnrt/runtime.h>
#include <attnrt/version.h>

int main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf("embed_minimal: one sequence, one decode request through the attnrt runtime.\n"
                "Takes no options; prints the device used and the first output element.\n");
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("embed_minimal (attnrt %s)\n", attnrt::Version());
    return 0;
  }
  attnrt::RuntimeOptions options;
  options.shape.num_layers = 1;
  options.shape.num_q_heads = 8;
  options.shape.num_kv_heads = 2;
  options.shape.head_dim = 64;
  options.shape.max_context = 1024;
  options.kv_cache_bytes = 64 << 20;
  auto runtime = attnrt::Runtime::Create(options);
  if (!runtime.ok()) {
    std::fprintf(stderr, "%s\n", runtime.status().ToString().c_str());
    return 1;
  }
  attnrt::Runtime& rt = **runtime;

  const int prompt = 16;
  const std::size_t kv = options.shape.kv_token_elems();
  std::vector<attnrt::Half> k(kv * prompt, attnrt::FloatToHalf(0.5f)), v = k;
  if (auto s = rt.CreateSequence(42); !s.ok()) {
    return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
  }
  if (auto s = rt.Prefill(42, /*layer=*/0, prompt, k, v); !s.ok()) {
    return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
  }

  std::vector<attnrt::Half> q(options.shape.num_q_heads * options.shape.head_dim,
                              attnrt::FloatToHalf(1.0f));
  std::vector<attnrt::Half> k_new(kv, attnrt::FloatToHalf(0.5f)), v_new = k_new;
  attnrt::DecodeRequest request;
  request.sequence_id = 42;
  request.q = q;
  request.k = k_new;
  request.v = v_new;
  auto submitted = rt.Submit(request);
  if (!submitted.ok()) {
    return std::fprintf(stderr, "%s\n", submitted.status().ToString().c_str()), 1;
  }
  attnrt::DecodeResult result = submitted->result.get();
  if (!result.status.ok()) return std::fprintf(stderr, "%s\n", result.status.ToString().c_str()), 1;
  // Every V is 0.5, so every output element is 0.5 whatever the scores.
  std::printf("%s: out[0] = %.4f (expected 0.5000), sequence length now %d\n",
              rt.device_description().c_str(), attnrt::HalfToFloat(result.output[0]),
              *rt.SequenceLength(42, 0));
  return attnrt::HalfToFloat(result.output[0]) == 0.5f ? 0 : 1;
}
