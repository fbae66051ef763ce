// BlockAllocator: a stack of free block ids (O(1) allocate and release) and one reference count
// per block. A block is free exactly when its count is 0 and its id is on the stack.
#include <string>

#include "api/check.h"
#include "kvcache/kvcache.h"

namespace attnrt::kvcache {
namespace {

std::string RangeText(std::int32_t num_blocks) {
  return "[0, " + std::to_string(num_blocks) + ")";
}

}  // namespace

BlockAllocator::BlockAllocator(std::int32_t num_blocks) {
  ATTNRT_DCHECK(num_blocks >= 0);
  if (num_blocks < 0) num_blocks = 0;
  ref_counts_.assign(static_cast<std::size_t>(num_blocks), 0);
  free_list_.reserve(static_cast<std::size_t>(num_blocks));
  // Pushed in reverse so that the first Allocate() hands out block 0, then 1, ...
  for (BlockId b = num_blocks - 1; b >= 0; --b) free_list_.push_back(b);
}

StatusOr<BlockId> BlockAllocator::Allocate() {
  if (fail_hook_ && fail_hook_()) {
    return ResourceExhaustedError("no free KV block: allocation failed by injection (" +
                                  std::to_string(num_free()) + " of " +
                                  std::to_string(num_blocks()) + " blocks free)");
  }
  if (free_list_.empty()) {
    return ResourceExhaustedError("no free KV block: all " + std::to_string(num_blocks()) +
                                  " blocks are in use");
  }
  const BlockId block = free_list_.back();
  free_list_.pop_back();
  ATTNRT_DCHECK(ref_counts_[static_cast<std::size_t>(block)] == 0);
  ref_counts_[static_cast<std::size_t>(block)] = 1;
  return block;
}

Status BlockAllocator::AddRef(BlockId block) {
  if (block < 0 || block >= num_blocks()) {
    return InvalidArgumentError("block = " + std::to_string(block) + " is out of range " +
                                RangeText(num_blocks()));
  }
  int& count = ref_counts_[static_cast<std::size_t>(block)];
  if (count == 0) {
    return InvalidArgumentError("block = " + std::to_string(block) +
                                " is free: AddRef needs an allocated block");
  }
  ++count;
  return Status::Ok();
}

Status BlockAllocator::Release(BlockId block) {
  if (block < 0 || block >= num_blocks()) {
    return InvalidArgumentError("block = " + std::to_string(block) + " is out of range " +
                                RangeText(num_blocks()));
  }
  int& count = ref_counts_[static_cast<std::size_t>(block)];
  if (count == 0) {
    return FailedPreconditionError("block = " + std::to_string(block) +
                                   " is already free (double free)");
  }
  if (--count == 0) free_list_.push_back(block);
  return Status::Ok();
}

int BlockAllocator::ref_count(BlockId block) const {
  if (block < 0 || block >= num_blocks()) return 0;
  return ref_counts_[static_cast<std::size_t>(block)];
}

std::int32_t BlockAllocator::num_free() const {
  return static_cast<std::int32_t>(free_list_.size());
}

std::int32_t BlockAllocator::num_blocks() const {
  return static_cast<std::int32_t>(ref_counts_.size());
}

std::size_t BlockAllocator::MetadataBytes() const {
  return sizeof(*this) + ref_counts_.capacity() * sizeof(int) +
         free_list_.capacity() * sizeof(BlockId);
}

}  // namespace attnrt::kvcache
