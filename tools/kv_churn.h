// A serving-like churn over the KV cache's real bookkeeping (kvcache::SequenceTable over a
// kvcache::BlockAllocator, no K/V data): sequences prefilled with random prompts decode
// round-robin one token at a time; each is freed at its target length and a new one takes its
// slot. What bench/kvcache_layout_bench.cc measures (block layout, host cost) and where
// tools/device_decode.cuh's BlockOrder::kAllocator tables come from (AllocatorBlockTables).
// Header-only; the consumer links attnrt_kvcache (or the library). The same seed gives the same
// calls with every standard library, whatever block ids the allocator hands out (the workload's
// choices depend on lengths and free counts only).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <attnrt/config.h>
#include <attnrt/status.h>
#include "kvcache/kvcache.h"

namespace attnrt::tools {

// SplitMix64 with our own range reduction (the standard distributions differ between libraries).
class ChurnRng {
 public:
  explicit ChurnRng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t Next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi] (the modulo bias is below 2^-40 for these ranges).
  int Uniform(int lo, int hi) {
    if (hi <= lo) return lo;
    return lo + static_cast<int>(Next() % static_cast<std::uint64_t>(hi - lo + 1));
  }

 private:
  std::uint64_t state_;
};

struct ChurnConfig {
  int block_size = 16;
  int max_context = 4096;
  int sequences = 64;       // churning slots, each holding one live sequence at a time
  int min_prompt = 16;      // prefill tokens, uniform in [min_prompt, max_prompt]
  int max_prompt = 2048;
  int min_output = 16;      // decode tokens before the sequence finishes, uniform
  int max_output = 1024;
  std::int32_t pool_blocks = 0;  // 0: PoolBlocksFor(config, 1.5)
  std::uint64_t seed = 1;

  // InvalidArgument naming the field.
  Status Validate() const {
    auto bad = [](const std::string& what) { return InvalidArgumentError("ChurnConfig: " + what); };
    if (block_size < 1 || max_context < 1) {
      return bad("block_size = " + std::to_string(block_size) + ", max_context = " +
                 std::to_string(max_context) + ", expected >= 1");
    }
    if (sequences < 0) return bad("sequences = " + std::to_string(sequences) + ", expected >= 0");
    if (min_prompt < 1 || max_prompt < min_prompt || max_prompt >= max_context) {
      return bad("prompt range [" + std::to_string(min_prompt) + ", " + std::to_string(max_prompt) +
                 "], expected 1 <= min <= max < max_context = " + std::to_string(max_context));
    }
    if (min_output < 1 || max_output < min_output) {
      return bad("output range [" + std::to_string(min_output) + ", " + std::to_string(max_output) +
                 "], expected 1 <= min <= max");
    }
    if (pool_blocks < 0) return bad("pool_blocks = " + std::to_string(pool_blocks) + ", expected >= 0");
    return Status::Ok();
  }
};

// Blocks the live sequences hold on average (a sequence lives from its prompt to its target:
// mean length prompt + output / 2), times `factor`: the pool that leaves 1 - 1/factor free.
inline std::int32_t PoolBlocksFor(const ChurnConfig& c, double factor) {
  const double prompt = 0.5 * (c.min_prompt + c.max_prompt);
  const double output = 0.5 * (c.min_output + c.max_output);
  const double tokens = std::min<double>(prompt + 0.5 * output, c.max_context);
  const double blocks = c.sequences * (tokens / c.block_size + 0.5);  // + half a partial block
  return std::max<std::int32_t>(1, static_cast<std::int32_t>(blocks * factor + 0.5));
}

struct ChurnCounts {
  std::int64_t rounds = 0;
  std::int64_t tokens = 0;      // decode tokens appended
  std::int64_t prefills = 0;    // sequences started (Create + one Append of the prompt)
  std::int64_t finished = 0;    // freed at their target length
  std::int64_t preempted = 0;   // freed early: an append found no free block (or the reserve)
  std::int64_t waiting = 0;     // slot-rounds left empty: the prompt did not fit
  std::int64_t table_calls = 0;      // SequenceTable Create/Append/AppendToken/Free calls
  std::int64_t blocks_allocated = 0;
  std::int64_t blocks_released = 0;
};

// Thread safety: none.
class KvChurn {
 public:
  static StatusOr<std::unique_ptr<KvChurn>> Create(const ChurnConfig& config) {
    ATTNRT_RETURN_IF_ERROR(config.Validate());
    std::unique_ptr<KvChurn> c(new KvChurn(config));
    c->slots_.resize(static_cast<std::size_t>(config.sequences));
    for (Slot& s : c->slots_) ATTNRT_RETURN_IF_ERROR(c->Start(&s));
    // Spelled out: nvcc's front end does not move `c` into the StatusOr on its own.
    return StatusOr<std::unique_ptr<KvChurn>>(std::move(c));
  }

  // One round: each slot's sequence appends one token (slot order; pinned ones after them).
  // A churning sequence at its target is freed and a new one prefilled in its slot; one whose
  // append finds no free block (beyond the pinned sequences' reserve) is preempted (freed) and
  // its slot restarted; a slot whose prompt does not fit waits for a later round. A pinned
  // sequence stops at its target and is never freed; an error for it is returned.
  Status Step() {
    ++counts_.rounds;
    for (Slot& s : slots_) {
      if (!s.live) {
        ATTNRT_RETURN_IF_ERROR(Start(&s));
        continue;
      }
      const bool needs_block = s.length % config_.block_size == 0;
      if (needs_block && allocator_->num_free() <= reserve_) {
        ATTNRT_RETURN_IF_ERROR(Stop(&s));
        ++counts_.preempted;
        continue;
      }
      const Status st = Append(s.id, 1, /*token=*/true);
      if (st.code() == StatusCode::kResourceExhausted) {
        ATTNRT_RETURN_IF_ERROR(Stop(&s));
        ++counts_.preempted;
        continue;
      }
      ATTNRT_RETURN_IF_ERROR(st);
      ++counts_.tokens;
      if (++s.length == s.target) {
        ATTNRT_RETURN_IF_ERROR(Stop(&s));
        ++counts_.finished;
        ATTNRT_RETURN_IF_ERROR(Start(&s));
      }
    }
    for (Pinned& p : pinned_) {
      if (p.length == p.target) continue;
      if (p.length % config_.block_size == 0) --reserve_;  // the block it reserved
      ATTNRT_RETURN_IF_ERROR(Append(p.id, 1, /*token=*/true));
      ++p.length;
    }
    return Status::Ok();
  }

  // Adds a sequence that decodes to `target` tokens from a prompt of `prompt` (1 <= prompt <=
  // target <= max_context) and then stays: churning sequences are preempted to make room for
  // its prompt, and later only allocate beyond what the pinned sequences still need, so every
  // pinned sequence reaches its target if the pool holds all of them. Returns its id.
  StatusOr<SequenceId> AddPinned(int prompt, int target) {
    if (prompt < 1 || target < prompt || target > config_.max_context) {
      return InvalidArgumentError("AddPinned: prompt = " + std::to_string(prompt) + ", target = " +
                                  std::to_string(target) + ", expected 1 <= prompt <= target <= " +
                                  std::to_string(config_.max_context));
    }
    const std::int64_t need = BlocksOf(prompt);
    // Preempt churning sequences (from a rotating slot) until the prompt, the blocks this
    // sequence will still take and the reserve fit (not the prompt alone: the churning ones
    // would take the rest and starve its decode).
    const std::int64_t all_it_needs = BlocksOf(target);
    for (std::size_t tries = 0;
         allocator_->num_free() < all_it_needs + reserve_ && tries < slots_.size(); ++tries) {
      Slot& s = slots_[evict_next_++ % slots_.size()];
      if (!s.live) continue;
      ATTNRT_RETURN_IF_ERROR(Stop(&s));
      ++counts_.preempted;
    }
    Pinned p{next_id_++, prompt, target};
    ATTNRT_RETURN_IF_ERROR(Call(table_->Create(p.id)));
    ATTNRT_RETURN_IF_ERROR(Append(p.id, prompt, /*token=*/false));
    pinned_.push_back(p);
    reserve_ += BlocksOf(target) - need;
    return p.id;
  }
  // True when every pinned sequence is at its target.
  bool PinnedDone() const {
    return std::all_of(pinned_.begin(), pinned_.end(),
                       [](const Pinned& p) { return p.length == p.target; });
  }

  kvcache::BlockLayout Layout() const { return kvcache::MeasureBlockLayout(*table_); }
  const ChurnCounts& counts() const { return counts_; }
  const ChurnConfig& config() const { return config_; }
  const kvcache::BlockAllocator& allocator() const { return *allocator_; }
  const kvcache::SequenceTable& table() const { return *table_; }

 private:
  struct Slot {
    SequenceId id = 0;
    int length = 0;
    int target = 0;
    bool live = false;
  };
  struct Pinned {
    SequenceId id = 0;
    int length = 0;
    int target = 0;
  };

  explicit KvChurn(const ChurnConfig& config) : config_(config), rng_(config.seed) {
    if (config_.pool_blocks == 0) config_.pool_blocks = PoolBlocksFor(config_, 1.5);
    ModelShape shape;
    shape.num_layers = 1;
    shape.num_q_heads = 1;
    shape.num_kv_heads = 1;
    shape.head_dim = 64;
    shape.block_size = config_.block_size;
    shape.max_context = config_.max_context;
    allocator_ = std::make_unique<kvcache::BlockAllocator>(config_.pool_blocks);
    table_ = std::make_unique<kvcache::SequenceTable>(shape, allocator_.get());
  }

  std::int64_t BlocksOf(int tokens) const {
    return (tokens + config_.block_size - 1) / config_.block_size;
  }

  Status Call(Status s) {
    ++counts_.table_calls;
    return s;
  }
  // Append (a prompt) or AppendToken of `n` tokens to every layer, counting the blocks it took.
  Status Append(SequenceId id, int n, bool token) {
    const std::int32_t free_before = allocator_->num_free();
    std::vector<kvcache::BlockCopy>& copies = copies_;
    copies.clear();
    Status st = token ? table_->AppendToken(id, kAll, &copies).status()
                      : table_->Append(id, kAll, n, &copies).status();
    ++counts_.table_calls;
    counts_.blocks_allocated += free_before - allocator_->num_free();
    return st;
  }
  // A new sequence in `s`: its prompt prefilled, or the slot left empty when it does not fit.
  Status Start(Slot* s) {
    s->live = false;
    const int prompt = rng_.Uniform(config_.min_prompt, config_.max_prompt);
    const int output = rng_.Uniform(config_.min_output, config_.max_output);
    const int target = std::min(prompt + output, config_.max_context);
    if (allocator_->num_free() < BlocksOf(prompt) + reserve_) {
      ++counts_.waiting;
      return Status::Ok();
    }
    s->id = next_id_++;
    s->length = prompt;
    s->target = target;
    ATTNRT_RETURN_IF_ERROR(Call(table_->Create(s->id)));
    ATTNRT_RETURN_IF_ERROR(Append(s->id, prompt, /*token=*/false));
    s->live = true;
    ++counts_.prefills;
    return Status::Ok();
  }
  Status Stop(Slot* s) {
    const std::int32_t free_before = allocator_->num_free();
    ATTNRT_RETURN_IF_ERROR(Call(table_->Free(s->id)));
    counts_.blocks_released += allocator_->num_free() - free_before;
    s->live = false;
    return Status::Ok();
  }

  static constexpr int kAll = kvcache::SequenceTable::kAllLayers;
  ChurnConfig config_;
  ChurnRng rng_;
  std::unique_ptr<kvcache::BlockAllocator> allocator_;
  std::unique_ptr<kvcache::SequenceTable> table_;  // after allocator_: destroyed first
  std::vector<Slot> slots_;
  std::vector<Pinned> pinned_;
  std::int64_t reserve_ = 0;  // blocks the pinned sequences still need to reach their targets
  std::vector<kvcache::BlockCopy> copies_;
  SequenceId next_id_ = 0;
  std::size_t evict_next_ = 0;
  ChurnCounts counts_;
};

// Block tables for rows of `lengths` tokens as the KV cache's allocator lays them out in
// serving: a pool of PoolBlocks(lengths) blocks where churning sequences (max(4, rows) slots,
// prompts and outputs scaled to the rows' mean length) first run kWarmupRounds-long churn, then
// each row starts with a prompt of a random half or more of its length and decodes the rest
// token by token among them. Row i's table has ceil(lengths[i] / block_size) entries (none for
// a length 0). InvalidArgument for a length outside [0, max_context].
struct AllocatorTables {
  std::int32_t pool_blocks = 0;                   // ids lie in [0, pool_blocks)
  std::vector<std::vector<kvcache::BlockId>> tables;  // [row]
  kvcache::BlockLayout layout;                    // of `tables`
};

inline StatusOr<AllocatorTables> AllocatorBlockTables(int block_size, int max_context,
                                                      const std::vector<int>& lengths,
                                                      std::uint64_t seed = 1) {
  std::int64_t row_blocks = 0, row_tokens = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 0 || lengths[i] > max_context) {
      return InvalidArgumentError("AllocatorBlockTables: lengths[" + std::to_string(i) + "] = " +
                                  std::to_string(lengths[i]) + ", expected in [0, " +
                                  std::to_string(max_context) + "]");
    }
    row_blocks += (lengths[i] + block_size - 1) / block_size;
    row_tokens += lengths[i];
  }
  const int rows = static_cast<int>(lengths.size());
  const int mean = std::max<int>(
      block_size, static_cast<int>(row_tokens / std::max(1, rows)));
  ChurnConfig c;
  c.block_size = block_size;
  c.max_context = std::max(max_context, 2);
  c.sequences = std::max(4, rows);
  c.max_prompt = std::clamp(mean, 1, c.max_context - 1);
  c.min_prompt = std::max(1, c.max_prompt / 8);
  c.min_output = std::max(1, mean / 16);
  c.max_output = std::max(c.min_output, mean / 2);
  // The rows, and as much again for the churning sequences (a serving pool is never all one
  // batch's); at least one block per slot.
  c.pool_blocks = static_cast<std::int32_t>(2 * row_blocks + c.sequences);
  c.seed = seed;
  ATTNRT_ASSIGN_OR_RETURN(std::unique_ptr<KvChurn> churn, KvChurn::Create(c));
  // Warm-up: every slot's sequence finished or preempted twice on average.
  const std::int64_t warm_until = 2 * static_cast<std::int64_t>(c.sequences);
  for (int r = 0; r < 8 * c.max_context &&
                  churn->counts().finished + churn->counts().preempted < warm_until;
       ++r) {
    ATTNRT_RETURN_IF_ERROR(churn->Step());
  }
  ChurnRng rng(seed ^ 0x5DEECE66Dull);
  std::vector<SequenceId> ids(lengths.size(), 0);  // 0: no row (ids start at the slots')
  for (int i = 0; i < rows; ++i) {
    if (lengths[i] == 0) continue;
    const int prompt = rng.Uniform((lengths[i] + 1) / 2, lengths[i]);
    ATTNRT_ASSIGN_OR_RETURN(ids[i], churn->AddPinned(prompt, lengths[i]));
  }
  while (!churn->PinnedDone()) ATTNRT_RETURN_IF_ERROR(churn->Step());
  AllocatorTables out;
  out.pool_blocks = c.pool_blocks;
  out.tables.resize(lengths.size());
  for (int i = 0; i < rows; ++i) {
    if (lengths[i] == 0) continue;
    ATTNRT_ASSIGN_OR_RETURN(std::span<const kvcache::BlockId> blocks, churn->table().Blocks(ids[i]));
    out.tables[i].assign(blocks.begin(), blocks.end());
    out.layout.Add(blocks);
  }
  return out;
}

}  // namespace attnrt::tools
