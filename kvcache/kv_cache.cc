// KvCache: allocator + sequence table + pools, and the host-side token copies into and out of
// the pools (the HND layout: one (block, head) page holds block_size consecutive tokens of D).
#include <algorithm>
#include <string>

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
  const std::int64_t block_elems = shape_.kv_token_elems() * shape_.block_size;
  return pools_->CopyBlocks(copies, block_elems, block_elems * num_blocks(), shape_.num_layers);
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
  const std::size_t row_bytes = static_cast<std::size_t>(shape_.head_dim) * sizeof(Half);
  const std::size_t token_bytes = static_cast<std::size_t>(hkv) * row_bytes;
  // One strided copy per (block, head): `run` tokens, contiguous in the pool's page, Hkv*D apart
  // in the host input.
  for (int pos = start; pos < end;) {
    const int offset = pos % bs;
    const int run = std::min(bs - offset, end - pos);
    const BlockId block = blocks[static_cast<std::size_t>(pos / bs)];
    const std::int64_t src = static_cast<std::int64_t>(pos - start) * hkv * shape_.head_dim;
    for (int h = 0; h < hkv; ++h) {
      const std::int64_t dst = TokenOffset(layer, block, h, offset);
      const std::int64_t src_head = src + static_cast<std::int64_t>(h) * shape_.head_dim;
      ATTNRT_RETURN_IF_ERROR(pools_->CopyRowsToPool(k_data() + dst, row_bytes, k + src_head,
                                                    token_bytes, row_bytes, run));
      ATTNRT_RETURN_IF_ERROR(pools_->CopyRowsToPool(v_data() + dst, row_bytes, v + src_head,
                                                    token_bytes, row_bytes, run));
    }
    pos += run;
  }
  return Status::Ok();
}

Status KvCache::ReadToken(SequenceId id, int layer, int position, Half* k, Half* v) const {
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
  const std::int64_t at = TokenOffset(layer, block, 0, position % shape_.block_size);
  const std::size_t row_bytes = static_cast<std::size_t>(shape_.head_dim) * sizeof(Half);
  const std::size_t page_bytes = row_bytes * shape_.block_size;  // head h+1's row is a page on
  const std::size_t rows = static_cast<std::size_t>(shape_.num_kv_heads);
  ATTNRT_RETURN_IF_ERROR(
      pools_->CopyRowsFromPool(k, row_bytes, pools_->k() + at, page_bytes, row_bytes, rows));
  ATTNRT_RETURN_IF_ERROR(
      pools_->CopyRowsFromPool(v, row_bytes, pools_->v() + at, page_bytes, row_bytes, rows));
  return Status::Ok();
}

}  // namespace attnrt::kvcache
