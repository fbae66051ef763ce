// KvCache: allocator + sequence table + pools, and the host-side token copies into and out of
// the pools (the HND layout: one (block, head) page holds block_size consecutive tokens of D),
// quantising to and from FP8 E4M3 for an FP8 cache.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "api/internal/fp8_e4m3.h"
#include "kvcache/kvcache.h"

namespace attnrt::kvcache {
namespace {

std::string SeqLayerText(SequenceId id, int layer) {
  return "sequence " + std::to_string(id) + " layer " + std::to_string(layer);
}

Status CheckSingleLayer(const ModelShape& shape, int layer) {
  if (layer >= 0 && layer < shape.num_layers) return Status::Ok();
  return InvalidArgumentError("layer = " + std::to_string(layer) +
                              " is out of range: num_layers = " +
                              std::to_string(shape.num_layers));
}

}  // namespace

KvCache::KvCache(const ModelShape& shape, std::int32_t num_blocks,
                 std::unique_ptr<PoolMemory> pools)
    : shape_(shape),
      kv_scales_(shape.kv_scales.empty()
                     ? std::vector<float>(2 * static_cast<std::size_t>(shape.num_layers) *
                                              shape.num_kv_heads,
                                          1.0f)
                     : shape.kv_scales),
      allocator_(num_blocks),
      sequences_(shape, &allocator_),
      pools_(std::move(pools)) {}

StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const ModelShape& shape,
                                                   std::int32_t num_blocks, PoolKind kind) {
  ATTNRT_RETURN_IF_ERROR(shape.Validate());
  if (num_blocks < 1) {
    return InvalidArgumentError("num_blocks = " + std::to_string(num_blocks) + ", expected >= 1");
  }
  // One pool (K or V) is num_blocks * BlockBytes / 2 bytes; element offsets into it are int64.
  const std::size_t block_bytes_each = BlockBytes(shape) / 2;
  constexpr std::size_t kMaxPoolBytes = std::size_t{1} << 62;
  if (block_bytes_each > kMaxPoolBytes / static_cast<std::size_t>(num_blocks)) {
    return InvalidArgumentError("num_blocks = " + std::to_string(num_blocks) + " blocks of " +
                                std::to_string(block_bytes_each) +
                                " B per pool exceed the 2^62-byte pool limit");
  }
  const std::size_t bytes_each = static_cast<std::size_t>(num_blocks) * block_bytes_each;
  std::unique_ptr<PoolMemory> pools;
  if (kind == PoolKind::kHost) {
    ATTNRT_ASSIGN_OR_RETURN(pools, MakeHostPoolMemory(bytes_each));
  } else {
    ATTNRT_ASSIGN_OR_RETURN(pools, MakeDevicePoolMemory(bytes_each));
  }
  return std::unique_ptr<KvCache>(new KvCache(shape, num_blocks, std::move(pools)));
}

std::int64_t KvCache::TokenOffset(int layer, BlockId block, int head, int offset) const {
  const std::int64_t page = (static_cast<std::int64_t>(layer) * num_blocks() + block) *
                                shape_.num_kv_heads + head;
  return (page * shape_.block_size + offset) * shape_.head_dim;
}

std::size_t KvCache::MetadataBytes() const {
  return sequences_.MetadataBytes() + allocator_.MetadataBytes();
}

Status KvCache::ApplyCopies(std::span<const BlockCopy> copies) {
  if (copies.empty()) return Status::Ok();
  const std::int64_t block_bytes =
      shape_.kv_token_elems() * shape_.block_size * shape_.kv_element_bytes();
  return pools_->CopyBlocks(copies, block_bytes, block_bytes * num_blocks(), shape_.num_layers);
}

Status KvCache::WriteTokens(SequenceId id, int layer, int start, int n, const Half* k,
                            const Half* v) {
  if (k == nullptr || v == nullptr) {
    return InvalidArgumentError(std::string(k == nullptr ? "k" : "v") + " is null");
  }
  ATTNRT_RETURN_IF_ERROR(CheckSingleLayer(shape_, layer));
  if (n < 1) return InvalidArgumentError("n = " + std::to_string(n) + ", expected >= 1");
  if (start < 0) {
    return InvalidArgumentError("start = " + std::to_string(start) + ", expected >= 0");
  }
  ATTNRT_ASSIGN_OR_RETURN(const int length, sequences_.Length(id, layer));
  if (static_cast<std::int64_t>(start) + n > length) {
    return InvalidArgumentError(SeqLayerText(id, layer) + ": positions [" +
                                std::to_string(start) + ", " +
                                std::to_string(static_cast<std::int64_t>(start) + n) +
                                ") go past its length " + std::to_string(length) +
                                " (append first)");
  }
  ATTNRT_ASSIGN_OR_RETURN(const std::span<const BlockId> blocks, sequences_.Blocks(id));
  const int bs = shape_.block_size;
  const int end = start + n;
  for (int j = start / bs; j <= (end - 1) / bs; ++j) {
    const int refs = allocator_.ref_count(blocks[static_cast<std::size_t>(j)]);
    if (refs != 1) {
      return FailedPreconditionError(
          SeqLayerText(id, layer) + ": block " + std::to_string(blocks[static_cast<std::size_t>(j)]) +
          " (table entry " + std::to_string(j) + ") has " + std::to_string(refs) +
          " references; a shared block is copied on write by Append, never written in place");
    }
  }

  const int hkv = shape_.num_kv_heads;
  const int d = shape_.head_dim;
  // An FP8 cache stores codes: quantise the input once ([n][Hkv][D], each head by its scale),
  // then copy bytes as for FP16.
  const void* k_src = k;
  const void* v_src = v;
  std::vector<std::uint8_t> k_codes, v_codes;
  if (shape_.kv_cache_type == KvCacheType::kFp8E4M3) {
    const std::size_t elems = static_cast<std::size_t>(n) * hkv * d;
    k_codes.resize(elems);
    v_codes.resize(elems);
    for (std::size_t i = 0; i < elems; ++i) {
      const int h = static_cast<int>(i / d % hkv);
      k_codes[i] = QuantizeE4M3(HalfToFloat(k[i]), kv_scale(false, layer, h));
      v_codes[i] = QuantizeE4M3(HalfToFloat(v[i]), kv_scale(true, layer, h));
    }
    k_src = k_codes.data();
    v_src = v_codes.data();
  }
  const std::size_t elem_bytes = static_cast<std::size_t>(shape_.kv_element_bytes());
  const std::size_t row_bytes = static_cast<std::size_t>(d) * elem_bytes;
  const std::size_t token_bytes = static_cast<std::size_t>(hkv) * row_bytes;
  const auto* k_bytes = static_cast<const std::byte*>(k_src);
  const auto* v_bytes = static_cast<const std::byte*>(v_src);
  // Whole blocks whose ids run consecutively are one contiguous range of the layer's pool
  // ([block][Hkv][bs][D]): their tokens are put in that order on the host, from the input's
  // [token][Hkv][D], and copied at once. (One strided copy of bs rows per block and head took
  // 4,096 synchronous copies for a 4,096-token prefill of Hkv = 8 into device pools: ~40 ms on
  // an H100 host, 2026-11-28.) A block the write starts or ends inside keeps one strided copy
  // per head: `run` tokens, contiguous in the pool's page, Hkv*D apart in the input.
  constexpr std::size_t kMaxStagedBytes = std::size_t{8} << 20;
  const std::size_t block_bytes = static_cast<std::size_t>(bs) * token_bytes;
  const int max_run_blocks = static_cast<int>(std::max<std::size_t>(1, kMaxStagedBytes / block_bytes));
  std::vector<std::byte> staged;
  for (int pos = start; pos < end;) {
    const int offset = pos % bs;
    const std::size_t first = static_cast<std::size_t>(pos / bs);
    if (offset == 0 && end - pos >= bs) {
      int m = 1;  // whole blocks from `first` whose ids are consecutive
      while (m < max_run_blocks && pos + (m + 1) * bs <= end &&
             blocks[first + static_cast<std::size_t>(m)] == blocks[first] + m) {
        ++m;
      }
      staged.resize(static_cast<std::size_t>(m) * block_bytes);
      const std::size_t dst =
          static_cast<std::size_t>(TokenOffset(layer, blocks[first], 0, 0)) * elem_bytes;
      const std::size_t src = static_cast<std::size_t>(pos - start) * token_bytes;
      for (const auto& [pool, input] : {std::pair{pools_->k(), k_bytes},
                                        std::pair{pools_->v(), v_bytes}}) {
        for (int b = 0; b < m; ++b) {
          for (int h = 0; h < hkv; ++h) {
            for (int t = 0; t < bs; ++t) {
              const std::size_t token = static_cast<std::size_t>(b) * bs + t;
              std::memcpy(staged.data() + ((static_cast<std::size_t>(b) * hkv + h) * bs + t) *
                                              row_bytes,
                          input + src + token * token_bytes + h * row_bytes, row_bytes);
            }
          }
        }
        ATTNRT_RETURN_IF_ERROR(pools_->CopyRowsToPool(pool + dst, row_bytes, staged.data(),
                                                      row_bytes, row_bytes,
                                                      static_cast<std::size_t>(m) * hkv * bs));
      }
      pos += m * bs;
      continue;
    }
    const int run = std::min(bs - offset, end - pos);
    const BlockId block = blocks[first];
    const std::size_t src = static_cast<std::size_t>(pos - start) * token_bytes;
    for (int h = 0; h < hkv; ++h) {
      const std::size_t dst = static_cast<std::size_t>(TokenOffset(layer, block, h, offset)) *
                              elem_bytes;
      const std::size_t src_head = src + static_cast<std::size_t>(h) * row_bytes;
      ATTNRT_RETURN_IF_ERROR(pools_->CopyRowsToPool(pools_->k() + dst, row_bytes,
                                                    k_bytes + src_head, token_bytes, row_bytes,
                                                    run));
      ATTNRT_RETURN_IF_ERROR(pools_->CopyRowsToPool(pools_->v() + dst, row_bytes,
                                                    v_bytes + src_head, token_bytes, row_bytes,
                                                    run));
    }
    pos += run;
  }
  return Status::Ok();
}

Status KvCache::ReadTokenRows(SequenceId id, int layer, int position, void* k, void* v) const {
  if (k == nullptr || v == nullptr) {
    return InvalidArgumentError(std::string(k == nullptr ? "k" : "v") + " is null");
  }
  ATTNRT_RETURN_IF_ERROR(CheckSingleLayer(shape_, layer));
  ATTNRT_ASSIGN_OR_RETURN(const int length, sequences_.Length(id, layer));
  if (position < 0 || position >= length) {
    return InvalidArgumentError(SeqLayerText(id, layer) + ": position = " +
                                std::to_string(position) + " is out of range [0, " +
                                std::to_string(length) + ")");
  }
  ATTNRT_ASSIGN_OR_RETURN(const std::span<const BlockId> blocks, sequences_.Blocks(id));
  const BlockId block = blocks[static_cast<std::size_t>(position / shape_.block_size)];
  const std::size_t elem_bytes = static_cast<std::size_t>(shape_.kv_element_bytes());
  const std::size_t at =
      static_cast<std::size_t>(TokenOffset(layer, block, 0, position % shape_.block_size)) *
      elem_bytes;
  const std::size_t row_bytes = static_cast<std::size_t>(shape_.head_dim) * elem_bytes;
  const std::size_t page_bytes = row_bytes * shape_.block_size;  // head h+1's row is a page on
  const std::size_t rows = static_cast<std::size_t>(shape_.num_kv_heads);
  ATTNRT_RETURN_IF_ERROR(
      pools_->CopyRowsFromPool(k, row_bytes, pools_->k() + at, page_bytes, row_bytes, rows));
  ATTNRT_RETURN_IF_ERROR(
      pools_->CopyRowsFromPool(v, row_bytes, pools_->v() + at, page_bytes, row_bytes, rows));
  return Status::Ok();
}

Status KvCache::ReadTokenBytes(SequenceId id, int layer, int position, void* k, void* v) const {
  return ReadTokenRows(id, layer, position, k, v);
}

Status KvCache::ReadToken(SequenceId id, int layer, int position, Half* k, Half* v) const {
  if (shape_.kv_cache_type != KvCacheType::kFp8E4M3 || k == nullptr || v == nullptr) {
    return ReadTokenRows(id, layer, position, k, v);  // FP16 bits, or the null pointer's error
  }
  const std::size_t elems = static_cast<std::size_t>(shape_.kv_token_elems());
  std::vector<std::uint8_t> k_codes(elems), v_codes(elems);
  ATTNRT_RETURN_IF_ERROR(ReadTokenRows(id, layer, position, k_codes.data(), v_codes.data()));
  const int d = shape_.head_dim;
  for (std::size_t i = 0; i < elems; ++i) {
    const int h = static_cast<int>(i / d);
    k[i] = FloatToHalf(DequantizeE4M3(k_codes[i], kv_scale(false, layer, h)));
    v[i] = FloatToHalf(DequantizeE4M3(v_codes[i], kv_scale(true, layer, h)));
  }
  return Status::Ok();
}

}  // namespace attnrt::kvcache
