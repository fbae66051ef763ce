// The paged KV cache: a block allocator with reference counts, per-sequence block tables shared
// by all layers (fork shares blocks, copy-on-write on the first write into a shared block), and
// the K/V page pools behind an allocator interface (host memory or device memory).
//
// Pool layout (the KV contract): per layer, K and V each [num_blocks][num_kv_heads][block_size]
// [head_dim] elements of the shape's KV cache type (ModelShape::kv_cache_type: FP16, 2 bytes, or
// FP8 E4M3, 1 byte); layer l starts at l * num_blocks * num_kv_heads * block_size * head_dim
// elements from the pool's start (TokenOffset), so both types share every element offset and
// differ only in bytes per element (element_bytes()). FP8 pools hold E4M3 codes under the
// per-(K/V, layer, KV head) scales of kv_scales() (the rule: attnrt::KvCacheType).
//
// Every mutating call either succeeds or returns a Status and leaves every table, count and block
// exactly as before.
//
// Metadata overhead: per block 17 host bytes (a 4-byte block-table entry, a 4-byte reference
// count, 9 bytes of free runs and placement), per sequence about 80 bytes of index plus 4 bytes
// per layer length. For 32 layers, Hkv = 8, D = 128, block size 16 a block holds 2 MiB of K+V,
// so 64 sequences of 4096 tokens (16384 blocks, 32 GiB of K+V) carry 295 KB of metadata: 8.6e-6 of
// the KV bytes; 1024 one-block sequences 1.1e-4. Bound: 1% (tests/kvcache/sequence_table_test.cc
// computes it from MetadataBytes(); bench/NOTES.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/half.h>
#include <attnrt/status.h>

namespace attnrt::kvcache {

// Loads the cache line at `p` without waiting for it. An asm statement: GCC 13 dropped a
// __builtin_prefetch whose address came from another load (the block count's), leaving the
// hint an empty function.
inline void PrefetchLine(const void* p) {
#if defined(__x86_64__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#elif defined(__aarch64__)
  asm volatile("prfm pldl1keep, %0" : : "Q"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p);
#endif
}

// An allocator for the block allocator's per-block arrays: one of 2 MiB or more is placed on
// 2 MiB boundaries and offered to the kernel for transparent huge pages before it is touched
// (madvise). A plan appends to sequences anywhere in the pool, one random read of each array
// per request; over 4 KiB pages a pool of millions of blocks took a TLB miss for each
// (runtime_plan_bench BM_PlanFillSettle128Over). Smaller ones come from operator new.
template <typename T>
struct HugePageArrayAllocator {
  using value_type = T;
  HugePageArrayAllocator() = default;
  template <typename U>
  HugePageArrayAllocator(const HugePageArrayAllocator<U>&) {}
  T* allocate(std::size_t n);
  void deallocate(T* p, std::size_t n);
  friend bool operator==(const HugePageArrayAllocator&, const HugePageArrayAllocator&) {
    return true;
  }
};
void* AllocateHugePageArray(std::size_t bytes);
void FreeHugePageArray(void* p, std::size_t bytes);
template <typename T>
T* HugePageArrayAllocator<T>::allocate(std::size_t n) {
  return static_cast<T*>(AllocateHugePageArray(n * sizeof(T)));
}
template <typename T>
void HugePageArrayAllocator<T>::deallocate(T* p, std::size_t n) {
  FreeHugePageArray(p, n * sizeof(T));
}
template <typename T>
using BlockArray = std::vector<T, HugePageArrayAllocator<T>>;

using attnrt::SequenceId;
using BlockId = std::int32_t;

inline constexpr BlockId kNoBlock = -1;

// Where Allocate should put a new block. The decode kernel reads a table's consecutive ascending
// blocks faster than scattered ones (BlockLayout), so a table grows best into the block right
// after its last one, and a new table best starts where it has room to grow.
struct BlockHint {
  // The block the new one follows in the caller's table, held by the caller: after + 1 is
  // handed out when it is free. kNoBlock (or a block that is not allocated): a new run.
  BlockId after = kNoBlock;
  // Blocks the caller is about to take in a row, this one included (a prefill's): a new run is
  // placed where that many fit, if any free run is that long.
  std::int32_t run_blocks = 1;
};

// Fixed pool of block ids with O(1) allocate/free and reference counts, placing blocks so that
// each sequence's table tends to be consecutive ascending (BlockHint). Whenever a block is free,
// Allocate hands one out: placement never makes an allocation fail.
// Placement: hint.after + 1 when that block is free; else a block of the longest free run
// (within 25%): its first block, unless the run follows the end of a table (the last block
// Allocate handed out for some table, as far as the hints tell), whose growth it is; then the
// run_blocks are centred in it, so that both tables keep room to grow. Deterministic: the same
// calls give the same ids.
// Thread safety: none; the owner serialises calls.
class BlockAllocator {
 public:
  explicit BlockAllocator(std::int32_t num_blocks);

  // A free block with reference count 1, or ResourceExhausted (only when no block is free, or
  // by the failure hook; then nothing changed).
  StatusOr<BlockId> Allocate(const BlockHint& hint = {});
  // +1 reference on an allocated block; InvalidArgument if out of range or free.
  Status AddRef(BlockId block);
  // -1 reference; the block returns to the free runs at 0. FailedPrecondition on a free block.
  // A table released from its last block to its first takes the cheapest merges.
  Status Release(BlockId block);

  int ref_count(BlockId block) const;  // 0 for a free block (and for an id out of range)
  // A hint: loads ref_count(block)'s word into the cache (nothing for an id out of range).
  void PrefetchRefCount(BlockId block) const {
    if (block >= 0 && static_cast<std::size_t>(block) < words_.size()) {
      PrefetchLine(&words_[static_cast<std::size_t>(block)]);
    }
  }
  std::int32_t num_free() const;
  std::int32_t num_blocks() const;
  // Host bytes of the reference counts and the free runs (13 per block).
  std::size_t MetadataBytes() const;

  // Test-only: while set, Allocate asks `fail` first and answers ResourceExhausted when it
  // returns true, as a full pool would (runtime/fault_injection.h). Empty clears it.
  void SetFailureHookForTesting(std::function<bool()> fail) { fail_hook_ = std::move(fail); }
  // Test-only, O(num_blocks): Internal naming the first broken invariant of the free runs
  // (maximal, tagged with their length, each on its size class's list once, counted in
  // num_free), else Ok.
  Status CheckInvariantsForTesting() const;

 private:
  // Free blocks form maximal runs [start, start + length). A run's first and last block hold
  // -length in words_, and the run is on the doubly linked list (links_, at its last block)
  // of its size class: lengths 1, 2, 3, then each power of two split in four quarters,
  // so that a bitmap of non-empty classes finds the longest in O(1) (as in TLSF).
  static constexpr int kSizeClasses = 128;
  // Runs of the longest class looked at for one that follows no table's end.
  static constexpr int kEndProbe = 4;
  static int SizeClass(std::int32_t length);
  void InsertRun(BlockId start, std::int32_t length);
  void RemoveRun(BlockId start, std::int32_t length);
  // The run [start, start + length) becomes [new_start, new_start + new_length): in its list
  // place when the size class stays (and with no list change when its last block stays).
  void ReplaceRun(BlockId start, std::int32_t length, BlockId new_start, std::int32_t new_length);
  // Hands out `block` of the free run [start, start + length), splitting the rest around it.
  BlockId Take(BlockId block, BlockId start, std::int32_t length);
  // The start of a run of the longest non-empty class (num_free_ > 0).
  BlockId LongestRun() const;
  bool FollowsTableEnd(BlockId start) const;

  // Per block: its reference count when > 0; <= 0 when free (-length at either end of a run,
  // any value <= 0 inside one).
  BlockArray<std::int32_t> words_;
  struct RunLinks {
    BlockId next = kNoBlock;
    BlockId prev = kNoBlock;
  };
  BlockArray<RunLinks> links_;  // size-class lists, meaningful at a run's last block
  // Per block: 1 while it ends a table (handed out, and no later hint named it as `after`).
  BlockArray<std::uint8_t> table_end_;
  BlockId class_head_[kSizeClasses];
  std::uint64_t nonempty_[kSizeClasses / 64] = {};  // bit c: class c's list is not empty
  std::int32_t num_free_ = 0;
  std::function<bool()> fail_hook_;
};

// A whole-block copy (every layer, K and V) that a copy-on-write needs before the next write.
struct BlockCopy {
  BlockId src = 0;
  BlockId dst = 0;
  friend bool operator==(const BlockCopy&, const BlockCopy&) = default;
};

// Where one layer's new token goes: its position in the sequence and the place in the pools.
struct TokenPosition {
  BlockId block = 0;
  std::int32_t offset = 0;    // token index inside the block
  std::int32_t position = 0;  // token index in the sequence (length before the append)
};

// Per-sequence block tables and per-layer lengths. Each layer of a sequence has its own length
// (decode requests advance one layer at a time); the block table covers the longest layer.
// Thread safety: none; the owner serialises calls.
class SequenceTable {
 public:
  // `allocator` must outlive the table.
  SequenceTable(const ModelShape& shape, BlockAllocator* allocator);
  ~SequenceTable();  // releases every block still held

  Status Create(SequenceId id);                       // AlreadyExists on a duplicate id
  Status Fork(SequenceId parent, SequenceId child);   // child shares every block of parent
  Status Free(SequenceId id);                         // NotFound on an unknown id
  // Advances `layer` of `id` (every layer with kAllLayers) by n tokens, growing the block table
  // to cover them; returns the first new position (kAllLayers needs equal layer lengths, else
  // FailedPrecondition). Blocks that must be copied before the new
  // tokens are written (copy-on-write) are appended to *copies (never null).
  static constexpr int kAllLayers = -1;
  StatusOr<int> Append(SequenceId id, int layer, int n, std::vector<BlockCopy>* copies);
  // Append(id, layer, 1) for decode: returns where the new token's K/V go.
  StatusOr<TokenPosition> AppendToken(SequenceId id, int layer, std::vector<BlockCopy>* copies);

  // A live sequence's entry, for several calls on it after one lookup (a batch planner's
  // validation, append and block-row read); null when `id` is unknown. Valid until Free(id)
  // or the table's destruction; other sequences' calls leave it valid.
  struct Sequence;
  Sequence* Find(SequenceId id);
  // AppendToken / Blocks on an entry from Find (`id` is its id: named in errors).
  StatusOr<TokenPosition> AppendToken(Sequence& sequence, SequenceId id, int layer,
                                      std::vector<BlockCopy>* copies);
  std::span<const BlockId> Blocks(const Sequence& sequence) const;
  // Hints before AppendToken on many entries at once (a batch's): PrefetchForAppend issues the
  // loads of an entry's length row and last table entry; PrefetchLastBlockCount, called once
  // those have had time to land (after PrefetchForAppend of the other entries), that of its last
  // block's reference count. A plan over a table larger than the caches otherwise waited on
  // these misses one request after another (runtime_plan_bench BM_PlanFillSettle128Over).
  // No effect on any result.
  void PrefetchForAppend(const Sequence& sequence) const;
  void PrefetchLastBlockCount(const Sequence& sequence) const;

  // With kAllLayers: the common length of every layer (FailedPrecondition if they differ).
  StatusOr<int> Length(SequenceId id, int layer) const;
  // The block table; valid until the next call that changes this table.
  StatusOr<std::span<const BlockId>> Blocks(SequenceId id) const;
  bool Contains(SequenceId id) const;
  std::size_t num_sequences() const;
  // Every live sequence id, in no particular order (snapshots, tests, debugging).
  std::vector<SequenceId> SequenceIds() const;
  // Host bytes of block tables, lengths and index structures.
  std::size_t MetadataBytes() const;

  const ModelShape& shape() const { return shape_; }

 private:
  // Append on a found entry; returns the first new position.
  StatusOr<int> AppendImpl(Sequence& seq, SequenceId id, int layer, int n,
                           std::vector<BlockCopy>* copies);

  ModelShape shape_;
  BlockAllocator* allocator_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// How consecutive block tables lie in the pool: of each table's adjacent entries (b[i], b[i+1]),
// those with b[i+1] == b[i] + 1. The decode kernel reads a run of consecutive ascending blocks
// as one stream (pool layer [num_blocks][Hkv][block_size][D]); measured on an H100 it is 1.7-2.4%
// faster over tables in order than over scattered ones (tools/device_decode.cuh BlockOrder).
struct BlockLayout {
  std::int64_t tables = 0;             // non-empty tables
  std::int64_t blocks = 0;             // their entries
  std::int64_t adjacent_pairs = 0;     // sum of (size - 1)
  std::int64_t consecutive_pairs = 0;  // pairs with b[i+1] == b[i] + 1

  void Add(std::span<const BlockId> table);
  void Add(const BlockLayout& other);
  // consecutive_pairs / adjacent_pairs; 1 with no pair (every table a single block).
  double consecutive_fraction() const;
  // Blocks per maximal consecutive ascending run; 0 with no table.
  double mean_run_blocks() const;
};
class SequenceTable;
// Every table of `table` (shared blocks counted in each table that holds them).
BlockLayout MeasureBlockLayout(const SequenceTable& table);

// Backing memory for the K and V pools of all layers: bytes, whatever the element type (the
// cache passes sizes in bytes).
class PoolMemory {
 public:
  virtual ~PoolMemory() = default;
  virtual std::byte* k() = 0;
  virtual std::byte* v() = 0;
  virtual bool on_device() const = 0;
  virtual std::size_t bytes() const = 0;  // K + V
  // Copies whole blocks (all layers, K and V) src -> dst. `block_bytes` is one layer's block
  // (num_kv_heads * block_size * head_dim elements), `layer_bytes` one layer's pool.
  virtual Status CopyBlocks(std::span<const BlockCopy> copies, std::int64_t block_bytes,
                            std::int64_t layer_bytes, int num_layers) = 0;
  // Strided copies between host memory and the pools (synchronous): `rows` rows of `row_bytes`
  // bytes, consecutive rows `pool_pitch` bytes apart in the pool and `host_pitch` bytes apart in
  // host memory. `pool` points into k() or v(); InvalidArgument if the rows leave the pool.
  virtual Status CopyRowsToPool(std::byte* pool, std::size_t pool_pitch, const void* host,
                                std::size_t host_pitch, std::size_t row_bytes,
                                std::size_t rows) = 0;
  virtual Status CopyRowsFromPool(void* host, std::size_t host_pitch, const std::byte* pool,
                                  std::size_t pool_pitch, std::size_t row_bytes,
                                  std::size_t rows) const = 0;
};

// `bytes_each` bytes for K and again for V.
StatusOr<std::unique_ptr<PoolMemory>> MakeHostPoolMemory(std::size_t bytes_each);
// cudaMalloc'd pools; Unavailable where no CUDA device is present.
StatusOr<std::unique_ptr<PoolMemory>> MakeDevicePoolMemory(std::size_t bytes_each);

enum class PoolKind { kHost, kDevice };

// Bytes of K+V one block takes across all layers, at the shape's element size (FP8 blocks are
// half the FP16 bytes); 0 for a shape with a non-positive dimension.
std::size_t BlockBytes(const ModelShape& shape);
// Blocks that fit a K+V byte budget.
std::int32_t BlocksForBudget(const ModelShape& shape, std::size_t kv_bytes);
// Blocks that fit `fraction` of the device's free memory; Unavailable without a device.
StatusOr<std::int32_t> BlocksForFreeDeviceMemory(const ModelShape& shape, double fraction);

// Allocator + sequence table + pools.
class KvCache {
 public:
  static StatusOr<std::unique_ptr<KvCache>> Create(const ModelShape& shape, std::int32_t num_blocks,
                                                   PoolKind kind);

  const ModelShape& shape() const { return shape_; }
  std::int32_t num_blocks() const { return allocator_.num_blocks(); }
  BlockAllocator& allocator() { return allocator_; }
  const BlockAllocator& allocator() const { return allocator_; }
  SequenceTable& sequences() { return sequences_; }
  const SequenceTable& sequences() const { return sequences_; }
  PoolMemory& pools() { return *pools_; }
  KvCacheType type() const { return shape_.kv_cache_type; }
  int element_bytes() const { return shape_.kv_element_bytes(); }  // 2 (FP16) or 1 (FP8)
  // The pools as FP16 (a kFp16 cache) or as E4M3 codes (kFp8E4M3); host or device memory as
  // the pool kind. The other type's view of a cache points at the same bytes and means nothing.
  Half* k_data() { return reinterpret_cast<Half*>(pools_->k()); }
  Half* v_data() { return reinterpret_cast<Half*>(pools_->v()); }
  std::uint8_t* k_fp8() { return reinterpret_cast<std::uint8_t*>(pools_->k()); }
  std::uint8_t* v_fp8() { return reinterpret_cast<std::uint8_t*>(pools_->v()); }
  // The dequantisation scales, host memory, always 2 * num_layers * num_kv_heads of them in
  // ModelShape::kv_scales' order (K's, then V's, layer-major: index
  // shape().kv_scale_index(is_v, layer, kv_head)): the shape's kv_scales, or 1.0 each where it
  // gave none (and for an FP16 cache, whose values are stored unscaled). An executor copies
  // them to its device once; they never change.
  std::span<const float> kv_scales() const { return kv_scales_; }
  float kv_scale(bool value, int layer, int kv_head) const {
    return kv_scales_[static_cast<std::size_t>(shape_.kv_scale_index(value, layer, kv_head))];
  }

  // Applies copy-on-write copies the sequence table asked for. Every src/dst is checked
  // (InvalidArgument naming the entry) before anything is copied.
  Status ApplyCopies(std::span<const BlockCopy> copies);
  // Writes `n` tokens of K and V ([n][Hkv][D] FP16, host memory) for `layer` at positions
  // [start, start + n) of a sequence whose table already covers them (host or device pools;
  // synchronous); an FP8 cache stores QuantizeE4M3(x, kv_scale(...)) of each. Requires
  // start + n <= Length(id, layer), and every block written to be held by this sequence alone
  // (FailedPrecondition otherwise: a shared block is copied on write by Append/AppendToken,
  // never written in place).
  Status WriteTokens(SequenceId id, int layer, int start, int n, const Half* k, const Half* v);
  // Reads token `position` of `layer` into host k/v ([Hkv][D] FP16) (host or device pools); an
  // FP8 cache's values dequantised (code * scale, rounded to FP16: exact with scale 1.0).
  Status ReadToken(SequenceId id, int layer, int position, Half* k, Half* v) const;
  // The stored bytes of that token: [Hkv][D] elements of element_bytes() each into k and v
  // (FP16 bits or E4M3 codes).
  Status ReadTokenBytes(SequenceId id, int layer, int position, void* k, void* v) const;

  // Element offset of token `offset` of kv head `head` in `block` of `layer`, from k_data() or
  // k_fp8() (likewise V): ((layer * num_blocks + block) * Hkv + head) * block_size * D + offset * D.
  // Times element_bytes() it is the byte offset from pools().k().
  std::int64_t TokenOffset(int layer, BlockId block, int head, int offset) const;
  // Host metadata: the sequence table's plus the allocator's.
  std::size_t MetadataBytes() const;
  // K + V bytes of the pools.
  std::size_t kv_bytes() const { return pools_->bytes(); }

 private:
  KvCache(const ModelShape& shape, std::int32_t num_blocks, std::unique_ptr<PoolMemory> pools);
  // Copies one token's Hkv rows between the pools and host memory (`host` holds element_bytes()
  // elements, [Hkv][D]).
  Status ReadTokenRows(SequenceId id, int layer, int position, void* k, void* v) const;
  ModelShape shape_;
  std::vector<float> kv_scales_;  // 2 * num_layers * num_kv_heads
  BlockAllocator allocator_;
  SequenceTable sequences_;
  std::unique_ptr<PoolMemory> pools_;
};

}  // namespace attnrt::kvcache
