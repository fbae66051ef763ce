// Per-request validation and token planning shared by the CPU and CUDA executors.
#include "runtime/batch_plan.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "api/check.h"

namespace attnrt::runtime {
namespace {

std::string Prefix(int index) { return "request " + std::to_string(index) + ": "; }

Status WithPrefix(const Status& s, int index) {
  return Status(s.code(), Prefix(index) + s.message());
}

}  // namespace

Status ValidateBatchShape(const Batch& batch, int max_batch_size, int parted) {
  if (batch.requests.empty() && parted == 0) {
    return InvalidArgumentError("batch has 0 requests, expected >= 1");
  }
  const std::size_t total = batch.requests.size() + static_cast<std::size_t>(parted);
  if (total > static_cast<std::size_t>(max_batch_size)) {
    return InvalidArgumentError(
        "batch has " + std::to_string(total) + " requests" +
        (parted > 0 ? " (" + std::to_string(parted) + " of them handed over by SubmitPart)" : "") +
        ", more than max_batch_size " + std::to_string(max_batch_size));
  }
  return Status::Ok();
}

Status ValidatePart(const Batch& part, int max_batch_size, int parted) {
  if (part.requests.empty()) return InvalidArgumentError("part has 0 requests, expected >= 1");
  if (part.ready_event != nullptr) {
    return InvalidArgumentError("part sets ready_event; only the Submit that closes the batch may");
  }
  return ValidateBatchShape(part, max_batch_size, parted);
}

Status ValidateBuckets(const std::vector<int>& buckets) {
  if (buckets.empty()) return InvalidArgumentError("buckets is empty, expected >= 1 bucket");
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i] <= 0 || (i > 0 && buckets[i] <= buckets[i - 1])) {
      return InvalidArgumentError("buckets[" + std::to_string(i) + "] = " +
                                  std::to_string(buckets[i]) +
                                  ", expected positive and strictly ascending");
    }
  }
  return Status::Ok();
}

Status ValidatePrefill(const kvcache::SequenceTable& table, SequenceId id, int layer,
                       int num_tokens, const Half* k, const Half* v) {
  const int num_layers = table.shape().num_layers;
  if (num_tokens <= 0) {
    return InvalidArgumentError("num_tokens " + std::to_string(num_tokens) + ", expected >= 1");
  }
  if (k == nullptr) return InvalidArgumentError("k is null");
  if (v == nullptr) return InvalidArgumentError("v is null");
  if (layer < 0 || layer >= num_layers) {
    return InvalidArgumentError("layer " + std::to_string(layer) + " is out of range [0, " +
                                std::to_string(num_layers) + ")");
  }
  if (!table.Contains(id)) {
    return NotFoundError("sequence_id " + std::to_string(id) + " is unknown");
  }
  return Status::Ok();
}

Status PrefillCache(kvcache::KvCache& cache, SequenceId id, int layer, int num_tokens,
                    const Half* k, const Half* v) {
  ATTNRT_RETURN_IF_ERROR(ValidatePrefill(cache.sequences(), id, layer, num_tokens, k, v));
  std::vector<kvcache::BlockCopy> copies;
  StatusOr<int> start = cache.sequences().Append(id, layer, num_tokens, &copies);
  if (!start.ok()) return start.status();
  Status s = cache.ApplyCopies(copies);
  if (s.ok()) s = cache.WriteTokens(id, layer, *start, num_tokens, k, v);
  if (!s.ok()) {
    return Status(s.code(), "prefill of sequence_id " + std::to_string(id) + " layer " +
                                std::to_string(layer) + " appended " +
                                std::to_string(num_tokens) +
                                " tokens but could not write them: " + s.message());
  }
  return Status::Ok();
}

void BatchPlanner::PlanFrom(const Batch& batch, int first, BatchPlan* plan, int capacity) {
  MutexLock lock(&table_mu_);
  const int n = static_cast<int>(batch.requests.size());
  const int num_layers = table_->shape().num_layers;
  ATTNRT_DCHECK(first >= 0 && first <= n);
  ATTNRT_DCHECK(first == 0 || static_cast<int>(plan->statuses.size()) == first);
  if (first == 0) {
    plan->statuses.clear();
    plan->live.clear();
    plan->copies.clear();
    plan->any_host = plan->any_device = false;
    plan->copies_applied = true;
    seen_room_ = std::max(n, capacity);
    seen_.Reset(static_cast<std::size_t>(seen_room_));
  } else if (n > seen_room_) {  // more than the capacity given: a larger set, refilled
    seen_room_ = 2 * n;
    seen_.Reset(static_cast<std::size_t>(seen_room_));
    for (const PlannedRequest& p : plan->live) {
      seen_.Insert(batch.requests[p.index].sequence_id, batch.requests[p.index].layer);
    }
  }
  plan->statuses.resize(static_cast<std::size_t>(n), Status::Ok());
  plan->live.reserve(static_cast<std::size_t>(std::max(n, capacity)));
  // The batch's lookups first, then the loads each append needs, in two waves: over a table
  // larger than the caches each request otherwise waited on its own misses (its entry, its
  // table's last entry, that block's reference count) in turn. B=128 plan over 16,384 sequences
  // on the 2-core VM: see runtime_plan_bench BM_PlanFillSettle128Over and bench/NOTES.md.
  found_.resize(static_cast<std::size_t>(n));
  for (int i = first; i < n; ++i) {
    found_[i] = table_->Find(batch.requests[i].sequence_id);
    if (found_[i] != nullptr) table_->PrefetchForAppend(*found_[i]);
  }
  constexpr int kAhead = 8;  // requests between a block count's prefetch and its use
  for (int i = first; i < std::min(n, first + kAhead); ++i) {
    if (found_[i] != nullptr) table_->PrefetchLastBlockCount(*found_[i]);
  }

  for (int i = first; i < n; ++i) {
    if (i + kAhead < n && found_[i + kAhead] != nullptr) {
      table_->PrefetchLastBlockCount(*found_[i + kAhead]);
    }
    const BatchRequest& r = batch.requests[i];
    Status& status = plan->statuses[i];
    if (r.memory == MemoryKind::kDevice && !allow_device_memory_) {
      status = UnimplementedError(Prefix(i) +
                                  "memory is kDevice; this executor runs host memory only");
      continue;
    }
    if (r.memory != MemoryKind::kHost && r.memory != MemoryKind::kDevice) {
      status = InvalidArgumentError(Prefix(i) + "memory has unknown value " +
                                    std::to_string(static_cast<int>(r.memory)));
      continue;
    }
    const char* null_field = r.q == nullptr   ? "q"
                             : r.k == nullptr ? "k"
                             : r.v == nullptr ? "v"
                             : r.out == nullptr ? "out"
                                                : nullptr;
    if (null_field != nullptr) {
      status = InvalidArgumentError(Prefix(i) + null_field + " is null");
      continue;
    }
    if (r.layer < 0 || r.layer >= num_layers) {
      status = InvalidArgumentError(Prefix(i) + "layer " + std::to_string(r.layer) +
                                    " is out of range [0, " + std::to_string(num_layers) + ")");
      continue;
    }
    kvcache::SequenceTable::Sequence* sequence = found_[i];
    if (sequence == nullptr) {
      status = NotFoundError(Prefix(i) + "sequence_id " + std::to_string(r.sequence_id) +
                             " is unknown");
      continue;
    }
    if (lost_count_.load(std::memory_order_relaxed) > 0) {
      status = LostTokenStatus(r.sequence_id, r.layer);
      if (!status.ok()) {
        status = WithPrefix(status, i);
        continue;
      }
    }
    if (r.memory == MemoryKind::kDevice && device_check_ != nullptr) {
      status = device_check_(r, i);
      if (!status.ok()) continue;
    }
    if (!seen_.Insert(r.sequence_id, r.layer)) {
      status = InvalidArgumentError(Prefix(i) + "(sequence_id " + std::to_string(r.sequence_id) +
                                    ", layer " + std::to_string(r.layer) +
                                    ") appears twice in one batch; the later request must wait "
                                    "for the next batch");
      continue;
    }
    const std::size_t copies_before = plan->copies.size();
    StatusOr<kvcache::TokenPosition> token =
        table_->AppendToken(*sequence, r.sequence_id, r.layer, &plan->copies);
    if (!token.ok()) {
      status = WithPrefix(token.status(), i);
      continue;
    }
    plan->live.push_back(PlannedRequest{i, token->position + 1,
                                        plan->copies.size() > copies_before, sequence});
    (r.memory == MemoryKind::kHost ? plan->any_host : plan->any_device) = true;
  }
}

Status BatchPlanner::FillBlockRow(const Batch& batch, const PlannedRequest& p,
                                  std::int32_t* row) const {
  MutexLock lock(&table_mu_);
  return FillBlockRowLocked(batch, p, row);
}

void BatchPlanner::FillBlockRows(const Batch& batch, std::span<const PlannedRequest> planned,
                                 std::size_t row_stride, std::int32_t* rows,
                                 std::vector<Status>* statuses) const {
  MutexLock lock(&table_mu_);
  for (std::size_t i = 0; i < planned.size(); ++i) {
    const PlannedRequest& p = planned[i];
    Status s = FillBlockRowLocked(batch, p, rows + i * row_stride);
    if (!s.ok()) (*statuses)[p.index] = std::move(s);
  }
}

Status BatchPlanner::FillBlockRowLocked(const Batch& batch, const PlannedRequest& p,
                                        std::int32_t* row) const {
  ATTNRT_DCHECK(p.sequence != nullptr);  // Plan sets it on every planned request
  const SequenceId id = batch.requests[p.index].sequence_id;
  const std::span<const kvcache::BlockId> blocks = table_->Blocks(*p.sequence);
  const int bs = table_->shape().block_size;
  const std::size_t needed = static_cast<std::size_t>((p.kv_length + bs - 1) / bs);
  if (needed > blocks.size()) {
    return InternalError("sequence_id " + std::to_string(id) + " has " +
                         std::to_string(blocks.size()) + " blocks, fewer than the " +
                         std::to_string(needed) + " its length " + std::to_string(p.kv_length) +
                         " needs");
  }
  static_assert(sizeof(kvcache::BlockId) == sizeof(std::int32_t), "block ids are int32");
  std::memcpy(row, blocks.data(), needed * sizeof(std::int32_t));
  return Status::Ok();
}

Status BatchPlanner::LostTokenStatus(SequenceId id, int layer) const {
  auto it = lost_.find({id, layer});
  if (it == lost_.end()) return Status::Ok();
  return FailedPreconditionError(
      "sequence_id " + std::to_string(id) + " layer " + std::to_string(layer) +
      " lost its token at position " + std::to_string(it->second.position) +
      " when its batch failed (" + it->second.cause.ToString() +
      "); its K/V there is undefined, so the sequence must be freed");
}

void BatchPlanner::MarkTokenLost(SequenceId id, int layer, int position, const Status& cause) {
  MutexLock lock(&table_mu_);
  if (!table_->Contains(id)) return;  // freed meanwhile: nothing left to protect
  RecordLost(id, layer, position, cause);
}

void BatchPlanner::MarkBlockLost(SequenceId id, int position, const Status& cause) {
  MutexLock lock(&table_mu_);
  if (!table_->Contains(id)) return;
  const int block_start = position / table_->shape().block_size * table_->shape().block_size;
  // A layer whose length (now: later batches may have grown it) reaches into the block had
  // tokens there that the missing copy should have brought.
  for (int layer = 0; layer < table_->shape().num_layers; ++layer) {
    StatusOr<int> length = table_->Length(id, layer);
    if (length.ok() && *length > block_start) RecordLost(id, layer, block_start, cause);
  }
}

void BatchPlanner::RecordLost(SequenceId id, int layer, int position, const Status& cause) {
  auto [it, inserted] = lost_.try_emplace({id, layer}, LostToken{position, cause});
  if (inserted) {
    lost_count_.fetch_add(1, std::memory_order_relaxed);
  } else if (position < it->second.position) {
    it->second = LostToken{position, cause};  // the earliest loss is the one that matters
  }
}

Status BatchPlanner::CheckTokensIntact(SequenceId id, int layer, int kv_length) const {
  if (lost_count_.load(std::memory_order_relaxed) == 0) return Status::Ok();
  MutexLock lock(&table_mu_);
  auto it = lost_.find({id, layer});
  if (it == lost_.end() || it->second.position >= kv_length - 1) return Status::Ok();
  return LostTokenStatus(id, layer);
}

void FillKvStats(const BatchPlanner& planner, const kvcache::KvCache& cache, ExecutorStats* stats) {
  planner.WithTable([&](const kvcache::SequenceTable& table) {
    stats->kv_blocks_total = cache.num_blocks();
    stats->kv_blocks_in_use = cache.num_blocks() - cache.allocator().num_free();
    stats->sequences = static_cast<std::int64_t>(table.num_sequences());
    return 0;
  });
}

void BatchPlanner::Settle(const Batch& batch, BatchPlan* plan) {
  for (const PlannedRequest& p : plan->live) {
    const BatchRequest& r = batch.requests[p.index];
    Status& status = plan->statuses[p.index];
    if (!status.ok() && p.copied && !plan->copies_applied) {
      MarkBlockLost(r.sequence_id, p.kv_length - 1, status);
    } else if (!status.ok()) {
      MarkTokenLost(r.sequence_id, r.layer, p.kv_length - 1, status);
    } else {
      status = CheckTokensIntact(r.sequence_id, r.layer, p.kv_length);
    }
  }
}

Status BatchPlanner::Create(SequenceId id) {
  MutexLock lock(&table_mu_);
  ATTNRT_RETURN_IF_ERROR(table_->Create(id));
  DirectoryShard& shard = ShardOf(id);
  MutexLock shard_lock(&shard.mu);
  shard.ids.insert(id);
  return Status::Ok();
}

bool BatchPlanner::Contains(SequenceId id) const {
  DirectoryShard& shard = ShardOf(id);
  MutexLock lock(&shard.mu);
  return shard.ids.count(id) != 0;
}

Status BatchPlanner::Free(SequenceId id) {
  MutexLock lock(&table_mu_);
  ATTNRT_RETURN_IF_ERROR(table_->Free(id));
  {
    DirectoryShard& shard = ShardOf(id);
    MutexLock shard_lock(&shard.mu);
    shard.ids.erase(id);
  }
  if (lost_count_.load(std::memory_order_relaxed) > 0) {
    for (int layer = 0; layer < table_->shape().num_layers; ++layer) {
      if (lost_.erase({id, layer}) > 0) lost_count_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  return Status::Ok();
}

Status BatchPlanner::Fork(SequenceId parent, SequenceId child) {
  MutexLock lock(&table_mu_);
  ATTNRT_RETURN_IF_ERROR(table_->Fork(parent, child));
  {
    DirectoryShard& shard = ShardOf(child);
    MutexLock shard_lock(&shard.mu);
    shard.ids.insert(child);
  }
  if (lost_count_.load(std::memory_order_relaxed) > 0) {  // the child shares the lost positions
    for (int layer = 0; layer < table_->shape().num_layers; ++layer) {
      auto it = lost_.find({parent, layer});
      if (it == lost_.end()) continue;
      lost_.emplace(std::pair{child, layer}, it->second);
      lost_count_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return Status::Ok();
}

Status BatchPlanner::Prefill(kvcache::KvCache& cache, SequenceId id, int layer, int num_tokens,
                             const Half* k, const Half* v) {
  MutexLock lock(&table_mu_);
  if (lost_count_.load(std::memory_order_relaxed) > 0) {
    ATTNRT_RETURN_IF_ERROR(LostTokenStatus(id, layer));
  }
  return PrefillCache(cache, id, layer, num_tokens, k, v);
}

}  // namespace attnrt::runtime
