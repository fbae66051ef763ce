// BlockAllocator: reference counts, and the free blocks as maximal runs with their length at both
// ends (boundary tags) on size-class lists, so that allocate (the block after a hint, or a split
// of the longest run) and release (merging with free neighbours) are O(1), as in TLSF.
#include <algorithm>
#include <bit>
#include <cstdlib>
#include <new>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "api/check.h"
#include "kvcache/kvcache.h"

namespace attnrt::kvcache {
namespace {

std::string RangeText(std::int32_t num_blocks) {
  return "[0, " + std::to_string(num_blocks) + ")";
}

constexpr std::size_t kHugePage = std::size_t{2} << 20;

}  // namespace

void* AllocateHugePageArray(std::size_t bytes) {
  if (bytes < kHugePage) return ::operator new(bytes);
  const std::size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  (void)madvise(p, rounded, MADV_HUGEPAGE);  // a hint: without THP the pages stay 4 KiB
#endif
  return p;
}

void FreeHugePageArray(void* p, std::size_t bytes) {
  if (bytes < kHugePage) {
    ::operator delete(p);
  } else {
    std::free(p);
  }
}

BlockAllocator::BlockAllocator(std::int32_t num_blocks) {
  ATTNRT_DCHECK(num_blocks >= 0);
  if (num_blocks < 0) num_blocks = 0;
  const std::size_t n = static_cast<std::size_t>(num_blocks);
  words_.assign(n, 0);
  links_.assign(n, RunLinks{});
  table_end_.assign(n, 0);
  for (BlockId& head : class_head_) head = kNoBlock;
  if (num_blocks > 0) InsertRun(0, num_blocks);
  num_free_ = num_blocks;
}

int BlockAllocator::SizeClass(std::int32_t length) {
  ATTNRT_DCHECK(length >= 1);
  if (length < 4) return length - 1;
  // Quarters of [2^f, 2^(f+1)): runs of one class differ by less than 25% in length.
  const int f = std::bit_width(static_cast<std::uint32_t>(length)) - 1;  // >= 2
  return 4 * (f - 1) + ((length >> (f - 2)) & 3);
}

void BlockAllocator::InsertRun(BlockId start, std::int32_t length) {
  const BlockId last = start + length - 1;
  words_[static_cast<std::size_t>(start)] = -length;
  words_[static_cast<std::size_t>(last)] = -length;
  const int c = SizeClass(length);
  const BlockId head = class_head_[c];
  links_[static_cast<std::size_t>(last)].next = head;
  links_[static_cast<std::size_t>(last)].prev = kNoBlock;
  if (head != kNoBlock) links_[static_cast<std::size_t>(head)].prev = last;
  class_head_[c] = last;
  nonempty_[c / 64] |= std::uint64_t{1} << (c % 64);
}

void BlockAllocator::RemoveRun(BlockId start, std::int32_t length) {
  const int c = SizeClass(length);
  const BlockId next = links_[static_cast<std::size_t>(start + length - 1)].next;
  const BlockId prev = links_[static_cast<std::size_t>(start + length - 1)].prev;
  if (prev != kNoBlock) {
    links_[static_cast<std::size_t>(prev)].next = next;
  } else {
    class_head_[c] = next;
    if (next == kNoBlock) nonempty_[c / 64] &= ~(std::uint64_t{1} << (c % 64));
  }
  if (next != kNoBlock) links_[static_cast<std::size_t>(next)].prev = prev;
}

void BlockAllocator::ReplaceRun(BlockId start, std::int32_t length, BlockId new_start,
                                std::int32_t new_length) {
  const int c = SizeClass(length);
  if (SizeClass(new_length) != c) {
    RemoveRun(start, length);
    InsertRun(new_start, new_length);
    return;
  }
  const BlockId last = start + length - 1;
  const BlockId new_last = new_start + new_length - 1;
  if (new_last != last) {  // the list entry moves with the run's last block
    const BlockId next = links_[static_cast<std::size_t>(last)].next;
    const BlockId prev = links_[static_cast<std::size_t>(last)].prev;
    links_[static_cast<std::size_t>(new_last)].next = next;
    links_[static_cast<std::size_t>(new_last)].prev = prev;
    if (prev != kNoBlock) {
      links_[static_cast<std::size_t>(prev)].next = new_last;
    } else {
      class_head_[c] = new_last;
    }
    if (next != kNoBlock) links_[static_cast<std::size_t>(next)].prev = new_last;
  }
  words_[static_cast<std::size_t>(new_start)] = -new_length;
  words_[static_cast<std::size_t>(new_last)] = -new_length;
}

BlockId BlockAllocator::Take(BlockId block, BlockId start, std::int32_t length) {
  if (block == start && length > 1) {
    // The common case, a table growing into the run after it: the run keeps its last block.
    ReplaceRun(start, length, start + 1, length - 1);
  } else {
    RemoveRun(start, length);
    if (block > start) InsertRun(start, block - start);
    const BlockId end = start + length;
    if (block + 1 < end) InsertRun(block + 1, end - block - 1);
  }
  words_[static_cast<std::size_t>(block)] = 1;
  table_end_[static_cast<std::size_t>(block)] = 1;
  --num_free_;
  return block;
}

BlockId BlockAllocator::LongestRun() const {
  const int c = nonempty_[1] != 0 ? 127 - std::countl_zero(nonempty_[1])
                                  : 63 - std::countl_zero(nonempty_[0]);
  // A run that follows no table's end can be begun at its start: prefer one (a bounded look).
  auto start_of = [this](BlockId last) {
    return last + words_[static_cast<std::size_t>(last)] + 1;  // last - length + 1
  };
  BlockId last = class_head_[c];
  for (int i = 0; i < kEndProbe && last != kNoBlock; ++i) {
    if (!FollowsTableEnd(start_of(last))) return start_of(last);
    last = links_[static_cast<std::size_t>(last)].next;
  }
  return start_of(class_head_[c]);
}

bool BlockAllocator::FollowsTableEnd(BlockId start) const {
  return start > 0 && table_end_[static_cast<std::size_t>(start) - 1] != 0;
}

StatusOr<BlockId> BlockAllocator::Allocate(const BlockHint& hint) {
  if (fail_hook_ && fail_hook_()) {
    return ResourceExhaustedError("no free KV block: allocation failed by injection (" +
                                  std::to_string(num_free()) + " of " +
                                  std::to_string(num_blocks()) + " blocks free)");
  }
  if (num_free_ == 0) {
    return ResourceExhaustedError("no free KV block: all " + std::to_string(num_blocks()) +
                                  " blocks are in use");
  }
  const BlockId after = hint.after;
  if (after >= 0 && after < num_blocks() && words_[static_cast<std::size_t>(after)] > 0) {
    table_end_[static_cast<std::size_t>(after)] = 0;  // its table goes on past it
    // The block after an allocated one is, when free, the first of its run.
    const BlockId next = after + 1;
    if (next < num_blocks() && words_[static_cast<std::size_t>(next)] < 0) {
      return Take(next, next, -words_[static_cast<std::size_t>(next)]);
    }
  }
  const BlockId start = LongestRun();
  ATTNRT_DCHECK(start != kNoBlock && words_[static_cast<std::size_t>(start)] < 0);
  const std::int32_t length = -words_[static_cast<std::size_t>(start)];
  const std::int32_t want = std::max(hint.run_blocks, 1);
  // After a table's end: centre the new blocks, so that both tables keep room to grow.
  const BlockId block =
      FollowsTableEnd(start) && length > want ? start + (length - want) / 2 : start;
  return Take(block, start, length);
}

Status BlockAllocator::AddRef(BlockId block) {
  if (block < 0 || block >= num_blocks()) {
    return InvalidArgumentError("block = " + std::to_string(block) + " is out of range " +
                                RangeText(num_blocks()));
  }
  std::int32_t& count = words_[static_cast<std::size_t>(block)];
  if (count <= 0) {
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
  std::int32_t& count = words_[static_cast<std::size_t>(block)];
  if (count <= 0) {
    return FailedPreconditionError("block = " + std::to_string(block) +
                                   " is already free (double free)");
  }
  if (--count > 0) return Status::Ok();
  table_end_[static_cast<std::size_t>(block)] = 0;
  ++num_free_;
  // Merge with the free runs on either side (their ends are next to this block). A table
  // released from its last block to its first grows the run after each block at its start,
  // which leaves that run's list entry (at its last block) where it is.
  const bool left_free = block > 0 && words_[static_cast<std::size_t>(block) - 1] < 0;
  const bool right_free =
      block + 1 < num_blocks() && words_[static_cast<std::size_t>(block) + 1] < 0;
  const std::int32_t left = left_free ? -words_[static_cast<std::size_t>(block) - 1] : 0;
  const std::int32_t right = right_free ? -words_[static_cast<std::size_t>(block) + 1] : 0;
  if (left_free && right_free) {
    RemoveRun(block - left, left);
    RemoveRun(block + 1, right);
    InsertRun(block - left, left + 1 + right);
  } else if (left_free) {
    ReplaceRun(block - left, left, block - left, left + 1);
  } else if (right_free) {
    ReplaceRun(block + 1, right, block, right + 1);
  } else {
    InsertRun(block, 1);
  }
  return Status::Ok();
}

int BlockAllocator::ref_count(BlockId block) const {
  if (block < 0 || block >= num_blocks()) return 0;
  const std::int32_t w = words_[static_cast<std::size_t>(block)];
  return w > 0 ? w : 0;
}

std::int32_t BlockAllocator::num_free() const { return num_free_; }

std::int32_t BlockAllocator::num_blocks() const {
  return static_cast<std::int32_t>(words_.size());
}

std::size_t BlockAllocator::MetadataBytes() const {
  return sizeof(*this) + words_.capacity() * sizeof(std::int32_t) +
         links_.capacity() * sizeof(RunLinks) + table_end_.capacity() * sizeof(std::uint8_t);
}

Status BlockAllocator::CheckInvariantsForTesting() const {
  auto broken = [](const std::string& what) {
    return InternalError("BlockAllocator invariant: " + what);
  };
  // Every maximal run of free blocks: its tags, and its place on its class's list.
  std::vector<int> class_of_last(words_.size(), -1);
  std::int32_t free = 0, runs = 0;
  const std::int32_t n = num_blocks();
  for (BlockId b = 0; b < n;) {
    if (words_[static_cast<std::size_t>(b)] > 0) {
      ++b;
      continue;
    }
    BlockId e = b;
    while (e + 1 < n && words_[static_cast<std::size_t>(e) + 1] <= 0) ++e;
    const std::int32_t length = e - b + 1;
    if (words_[static_cast<std::size_t>(b)] != -length ||
        words_[static_cast<std::size_t>(e)] != -length) {
      return broken("free run [" + std::to_string(b) + ", " + std::to_string(e) +
                    "] has end tags " + std::to_string(words_[static_cast<std::size_t>(b)]) +
                    " and " + std::to_string(words_[static_cast<std::size_t>(e)]) +
                    ", expected -" + std::to_string(length));
    }
    class_of_last[static_cast<std::size_t>(e)] = SizeClass(length);
    free += length;
    ++runs;
    b = e + 1;
  }
  if (free != num_free_) {
    return broken(std::to_string(free) + " free blocks, num_free " + std::to_string(num_free_));
  }
  std::int32_t listed = 0;
  for (int c = 0; c < kSizeClasses; ++c) {
    const bool bit = (nonempty_[c / 64] >> (c % 64)) & 1;
    if (bit != (class_head_[c] != kNoBlock)) {
      return broken("class " + std::to_string(c) + ": bitmap and list disagree");
    }
    BlockId prev = kNoBlock;
    for (BlockId s = class_head_[c]; s != kNoBlock; s = links_[static_cast<std::size_t>(s)].next) {
      if (s < 0 || s >= n || class_of_last[static_cast<std::size_t>(s)] != c ||
          links_[static_cast<std::size_t>(s)].prev != prev || ++listed > runs) {
        return broken("class " + std::to_string(c) + " lists block " + std::to_string(s) +
                      ", which is not the last block of a free run of that class (or is linked "
                      "wrong)");
      }
      prev = s;
    }
  }
  if (listed != runs) {
    return broken(std::to_string(runs) + " free runs, " + std::to_string(listed) + " listed");
  }
  return Status::Ok();
}

}  // namespace attnrt::kvcache
