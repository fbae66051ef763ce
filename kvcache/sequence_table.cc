// SequenceTable: a hash map from sequence id to its block table, plus one slab of per-layer
// lengths (one row of num_layers ints per sequence, rows reused after Free). Append checks every
// precondition and allocates every block it needs before it changes anything, so a failed call
// leaves tables, lengths and reference counts exactly as they were.
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "api/check.h"
#include "api/internal/log.h"
#include "kvcache/kvcache.h"

namespace attnrt::kvcache {
struct SequenceTable::Sequence {
  std::vector<BlockId> blocks;  // covers the longest layer: ceil(max length / block_size)
  std::int32_t row = 0;         // row in Impl::lengths
};

namespace {

// Rough heap cost of one allocation beyond its payload (glibc malloc chunk header and rounding),
// counted so that MetadataBytes() does not flatter the table.
constexpr std::size_t kHeapChunkOverhead = 16;

std::string SeqText(SequenceId id) { return "sequence " + std::to_string(id); }

// An allocator call that cannot fail where it is made (DCHECKed there): a build without DCHECKs
// leaves a warning rather than going on in silence. Not used on the per-request append path.
void WarnIfFailed(const Status& s, const char* call, SequenceId id) {
  if (!s.ok()) {
    Logger().warn("kv cache: {} of a block of {} failed: {}", call, SeqText(id), s.ToString());
  }
}

}  // namespace

struct SequenceTable::Impl {
  std::unordered_map<SequenceId, Sequence> sequences;
  std::vector<std::int32_t> lengths;     // [row][num_layers]
  std::vector<std::int32_t> free_rows;   // rows of `lengths` not in use
  std::vector<BlockId> scratch;          // blocks one Append allocated before it commits
  std::size_t table_capacity = 0;        // sum of blocks.capacity() over all sequences
  int num_layers = 1;

  std::int32_t* Row(std::int32_t row) {
    return lengths.data() + static_cast<std::size_t>(row) * num_layers;
  }
  const std::int32_t* Row(std::int32_t row) const {
    return lengths.data() + static_cast<std::size_t>(row) * num_layers;
  }
  // A zeroed row of lengths.
  std::int32_t AcquireRow() {
    std::int32_t row;
    if (!free_rows.empty()) {
      row = free_rows.back();
      free_rows.pop_back();
    } else {
      row = static_cast<std::int32_t>(lengths.size() / num_layers);
      lengths.resize(lengths.size() + num_layers);
    }
    std::fill_n(Row(row), num_layers, 0);
    return row;
  }
  void ReleaseRow(std::int32_t row) { free_rows.push_back(row); }
};

SequenceTable::SequenceTable(const ModelShape& shape, BlockAllocator* allocator)
    : shape_(shape), allocator_(allocator), impl_(std::make_unique<Impl>()) {
  ATTNRT_DCHECK(allocator != nullptr);
  ATTNRT_DCHECK(shape.num_layers >= 1 && shape.block_size >= 1);
  impl_->num_layers = std::max(shape.num_layers, 1);
}

SequenceTable::~SequenceTable() {
  for (auto& [id, seq] : impl_->sequences) {
    for (auto b = seq.blocks.rbegin(); b != seq.blocks.rend(); ++b) {  // as Free
      Status s = allocator_->Release(*b);
      ATTNRT_DCHECK(s.ok());
      WarnIfFailed(s, "Release", id);
    }
  }
}

Status SequenceTable::Create(SequenceId id) {
  auto [it, inserted] = impl_->sequences.try_emplace(id);
  if (!inserted) return AlreadyExistsError(SeqText(id) + " already exists");
  it->second.row = impl_->AcquireRow();
  return Status::Ok();
}

Status SequenceTable::Fork(SequenceId parent, SequenceId child) {
  auto parent_it = impl_->sequences.find(parent);
  if (parent_it == impl_->sequences.end()) {
    return NotFoundError("fork parent " + SeqText(parent) + " not found");
  }
  if (impl_->sequences.contains(child)) {
    return AlreadyExistsError("fork child " + SeqText(child) + " already exists");
  }
  // References to elements survive a rehash, so `from` stays valid across the emplace.
  const Sequence& from = parent_it->second;
  Sequence& to = impl_->sequences.try_emplace(child).first->second;
  to.blocks = from.blocks;
  impl_->table_capacity += to.blocks.capacity();
  to.row = impl_->AcquireRow();
  std::copy_n(impl_->Row(from.row), impl_->num_layers, impl_->Row(to.row));
  for (BlockId b : to.blocks) {
    Status s = allocator_->AddRef(b);  // cannot fail: the parent holds every block
    ATTNRT_DCHECK(s.ok());
    WarnIfFailed(s, "AddRef", child);
  }
  return Status::Ok();
}

Status SequenceTable::Free(SequenceId id) {
  auto it = impl_->sequences.find(id);
  if (it == impl_->sequences.end()) return NotFoundError(SeqText(id) + " not found");
  Sequence& seq = it->second;
  // Last block first: each joins the free run after it (the allocator's cheapest merge).
  for (auto b = seq.blocks.rbegin(); b != seq.blocks.rend(); ++b) {
    Status s = allocator_->Release(*b);  // cannot fail: this table holds a reference
    ATTNRT_DCHECK(s.ok());
    WarnIfFailed(s, "Release", id);
  }
  impl_->table_capacity -= seq.blocks.capacity();
  impl_->ReleaseRow(seq.row);
  impl_->sequences.erase(it);
  return Status::Ok();
}

namespace {

Status CheckLayer(const ModelShape& shape, int layer) {
  if (layer == SequenceTable::kAllLayers || (layer >= 0 && layer < shape.num_layers)) {
    return Status::Ok();
  }
  return InvalidArgumentError("layer = " + std::to_string(layer) + " is out of range: num_layers = " +
                              std::to_string(shape.num_layers) + " (or kAllLayers = -1)");
}

// The length of `layer`, or with kAllLayers the common length of every layer.
StatusOr<int> LayerLength(const std::int32_t* row, int num_layers, int layer, SequenceId id) {
  if (layer != SequenceTable::kAllLayers) return row[layer];
  for (int l = 1; l < num_layers; ++l) {
    if (row[l] != row[0]) {
      return FailedPreconditionError(
          SeqText(id) + ": kAllLayers needs equal layer lengths, but layer 0 has " +
          std::to_string(row[0]) + " tokens and layer " + std::to_string(l) + " has " +
          std::to_string(row[l]));
    }
  }
  return row[0];
}

// The capacity a table of `capacity` entries that must hold `end` grows to: geometrically, by
// half again at least (a table filled by a prefill then takes its first decode tokens without a
// reallocation: sequences prefilled to one length otherwise all reallocate in their first decode
// batch; runtime_plan_bench's BM_FirstDecodeAfterPrefill128, 2-core VM: 10.9-11.1 us a B=128
// plan against 6.5-7.1), plus a share of up to half again that depends on the sequence id.
// Without it, tables prefilled to one length and decoded in lockstep (a static batch, or the
// host-path bench's 1,024 sequences) all reallocated again in the same few batches, at 1.5x
// their prefilled length: the 70%-load runs' largest late clusters sat exactly there on the
// H200 (T=384, 512 and 640; 2026-11-29). Sequence ids in a row spread over the whole range.
std::size_t GrownCapacity(SequenceId id, std::size_t capacity, std::size_t end) {
  std::uint64_t h = static_cast<std::uint64_t>(id) * 0x9E3779B97F4A7C15ull;  // Fibonacci hashing
  h ^= h >> 29;
  const std::size_t spread = end / 2 + 1;
  return std::max(2 * capacity, end + end / 2 + static_cast<std::size_t>(h % spread));
}

// An append's arguments, checked before the sequence is looked up (so they are named first).
Status CheckAppendArguments(const ModelShape& shape, int layer, int n,
                            const std::vector<BlockCopy>* copies) {
  if (copies == nullptr) return InvalidArgumentError("copies is null");
  ATTNRT_RETURN_IF_ERROR(CheckLayer(shape, layer));
  if (n < 1) return InvalidArgumentError("n = " + std::to_string(n) + ", expected >= 1");
  return Status::Ok();
}

}  // namespace

StatusOr<int> SequenceTable::Append(SequenceId id, int layer, int n,
                                    std::vector<BlockCopy>* copies) {
  ATTNRT_RETURN_IF_ERROR(CheckAppendArguments(shape_, layer, n, copies));
  Sequence* seq = Find(id);
  if (seq == nullptr) return NotFoundError(SeqText(id) + " not found");
  return AppendImpl(*seq, id, layer, n, copies);
}

SequenceTable::Sequence* SequenceTable::Find(SequenceId id) {
  auto it = impl_->sequences.find(id);
  return it == impl_->sequences.end() ? nullptr : &it->second;
}

StatusOr<int> SequenceTable::AppendImpl(Sequence& seq, SequenceId id, int layer, int n,
                                        std::vector<BlockCopy>* copies) {
  std::int32_t* row = impl_->Row(seq.row);
  ATTNRT_ASSIGN_OR_RETURN(const int old_len, LayerLength(row, impl_->num_layers, layer, id));
  const std::int64_t new_len = static_cast<std::int64_t>(old_len) + n;
  if (new_len > shape_.max_context) {
    return InvalidArgumentError(SeqText(id) + " layer " + std::to_string(layer) +
                                ": length would be " + std::to_string(new_len) +
                                ", max_context " + std::to_string(shape_.max_context));
  }

  // Blocks [first, end) receive the new tokens. Those already in the table and shared with
  // another table are copied first; those past the table are new.
  const std::int64_t bs = shape_.block_size;
  const std::size_t first = static_cast<std::size_t>(old_len / bs);
  const std::size_t end = static_cast<std::size_t>((new_len + bs - 1) / bs);
  std::vector<BlockId>& blocks = seq.blocks;
  const std::size_t covered_end = std::min(end, blocks.size());
  std::int64_t num_cow = 0;
  for (std::size_t j = first; j < covered_end; ++j) {
    if (allocator_->ref_count(blocks[j]) > 1) ++num_cow;
  }
  const std::int64_t num_new = end > blocks.size() ? static_cast<std::int64_t>(end - blocks.size()) : 0;
  const std::int64_t needed = num_cow + num_new;

  if (needed > 0) {
    if (needed > allocator_->num_free()) {
      return ResourceExhaustedError(
          SeqText(id) + " layer " + std::to_string(layer) + ": appending " + std::to_string(n) +
          " tokens needs " + std::to_string(needed) + " free KV blocks (" +
          std::to_string(num_new) + " new, " + std::to_string(num_cow) +
          " copy-on-write), but only " + std::to_string(allocator_->num_free()) + " of " +
          std::to_string(allocator_->num_blocks()) + " are free");
    }
    // Allocate everything before touching the table; give it all back if anything fails.
    // In table order (the copies of shared blocks in [first, covered_end), then the new ones),
    // each hinted to follow the entry before it, so the table stays consecutive where it can.
    std::vector<BlockId>& scratch = impl_->scratch;
    scratch.clear();
    BlockId prev = first > 0 ? blocks[first - 1] : kNoBlock;
    for (std::size_t j = first; j < end; ++j) {
      if (j < covered_end && allocator_->ref_count(blocks[j]) <= 1) {
        prev = blocks[j];  // written in place
        continue;
      }
      const BlockHint hint{prev, static_cast<std::int32_t>(end - j)};
      StatusOr<BlockId> b = allocator_->Allocate(hint);
      if (!b.ok()) {
        // Released in reverse: the free runs end as they were (the allocator's guess of which
        // blocks end a table may not).
        for (auto r = scratch.rbegin(); r != scratch.rend(); ++r) {
          Status s = allocator_->Release(*r);
          ATTNRT_DCHECK(s.ok());
          (void)s;
        }
        scratch.clear();
        return b.status();
      }
      scratch.push_back(*b);
      prev = *b;
    }
    ATTNRT_DCHECK(static_cast<std::int64_t>(scratch.size()) == needed);
    if (end > blocks.capacity()) {
      const std::size_t cap_limit = static_cast<std::size_t>(shape_.max_blocks_per_sequence());
      const std::size_t cap = std::max(end, std::min(GrownCapacity(id, blocks.capacity(), end),
                                                     cap_limit));
      impl_->table_capacity -= blocks.capacity();
      blocks.reserve(cap);
      impl_->table_capacity += blocks.capacity();
    }
    // Commit; nothing below can fail.
    std::size_t next = 0;
    for (std::size_t j = first; j < covered_end; ++j) {
      const BlockId old_block = blocks[j];
      if (allocator_->ref_count(old_block) <= 1) continue;
      const BlockId new_block = scratch[next++];
      copies->push_back(BlockCopy{old_block, new_block});
      Status s = allocator_->Release(old_block);  // still held by the other tables
      ATTNRT_DCHECK(s.ok());
      (void)s;
      blocks[j] = new_block;
    }
    while (next < scratch.size()) blocks.push_back(scratch[next++]);
    scratch.clear();
  }

  if (layer == kAllLayers) {
    for (int l = 0; l < impl_->num_layers; ++l) row[l] += n;
  } else {
    row[layer] += n;
  }
  return old_len;
}

StatusOr<TokenPosition> SequenceTable::AppendToken(SequenceId id, int layer,
                                                   std::vector<BlockCopy>* copies) {
  Sequence* seq = Find(id);
  if (seq == nullptr) {
    ATTNRT_RETURN_IF_ERROR(CheckAppendArguments(shape_, layer, 1, copies));
    return NotFoundError(SeqText(id) + " not found");
  }
  return AppendToken(*seq, id, layer, copies);
}

StatusOr<TokenPosition> SequenceTable::AppendToken(Sequence& seq, SequenceId id, int layer,
                                                   std::vector<BlockCopy>* copies) {
  ATTNRT_RETURN_IF_ERROR(CheckAppendArguments(shape_, layer, 1, copies));
  ATTNRT_ASSIGN_OR_RETURN(const int position, AppendImpl(seq, id, layer, 1, copies));
  TokenPosition token;
  token.block = seq.blocks[static_cast<std::size_t>(position / shape_.block_size)];
  token.offset = position % shape_.block_size;
  token.position = position;
  return token;
}

void SequenceTable::PrefetchForAppend(const Sequence& sequence) const {
  PrefetchLine(impl_->Row(sequence.row));
  // Every line of the table: the append reads its last entry, the block rows then copy it all.
  const auto begin = reinterpret_cast<std::uintptr_t>(sequence.blocks.data()) & ~std::uintptr_t{63};
  const auto end = reinterpret_cast<std::uintptr_t>(sequence.blocks.data() + sequence.blocks.size());
  for (std::uintptr_t line = begin; line < end; line += 64) {
    PrefetchLine(reinterpret_cast<const void*>(line));
  }
}

void SequenceTable::PrefetchLastBlockCount(const Sequence& sequence) const {
  if (!sequence.blocks.empty()) allocator_->PrefetchRefCount(sequence.blocks.back());
}

StatusOr<int> SequenceTable::Length(SequenceId id, int layer) const {
  ATTNRT_RETURN_IF_ERROR(CheckLayer(shape_, layer));
  auto it = impl_->sequences.find(id);
  if (it == impl_->sequences.end()) return NotFoundError(SeqText(id) + " not found");
  return LayerLength(impl_->Row(it->second.row), impl_->num_layers, layer, id);
}

StatusOr<std::span<const BlockId>> SequenceTable::Blocks(SequenceId id) const {
  auto it = impl_->sequences.find(id);
  if (it == impl_->sequences.end()) return NotFoundError(SeqText(id) + " not found");
  return std::span<const BlockId>(it->second.blocks);
}

std::span<const BlockId> SequenceTable::Blocks(const Sequence& sequence) const {
  return sequence.blocks;
}

bool SequenceTable::Contains(SequenceId id) const { return impl_->sequences.contains(id); }

std::size_t SequenceTable::num_sequences() const { return impl_->sequences.size(); }

std::vector<SequenceId> SequenceTable::SequenceIds() const {
  std::vector<SequenceId> ids;
  ids.reserve(impl_->sequences.size());
  for (const auto& [id, seq] : impl_->sequences) ids.push_back(id);
  return ids;
}

std::size_t SequenceTable::MetadataBytes() const {
  using Map = decltype(impl_->sequences);
  const Map& map = impl_->sequences;
  // A hash node holds the next pointer and the (id, Sequence) pair; a non-empty block table is
  // one more heap allocation.
  const std::size_t node_bytes = sizeof(void*) + sizeof(Map::value_type) + kHeapChunkOverhead;
  return sizeof(*this) + sizeof(Impl) + map.bucket_count() * sizeof(void*) +
         map.size() * (node_bytes + kHeapChunkOverhead) +
         impl_->table_capacity * sizeof(BlockId) +
         impl_->lengths.capacity() * sizeof(std::int32_t) +
         impl_->free_rows.capacity() * sizeof(std::int32_t) +
         impl_->scratch.capacity() * sizeof(BlockId);
}

}  // namespace attnrt::kvcache
