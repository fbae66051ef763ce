// RecordPool: slabs of request records with their staging carved from one 64-byte-aligned block
// per slab; the free list is a ShardedFreeList, growth takes a mutex (rare: only past the
// high-water mark of live requests).
#include "scheduler/request_record.h"

#include <new>

namespace attnrt::scheduler::internal {

namespace {
constexpr std::size_t kAlign = 64;
std::size_t RoundUp(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

struct RecordPool::Slab {
  Slab(std::size_t n, std::size_t stride, runtime::StagingMemory* memory)
      : count(n), records(new RequestRecord[n]) {
    if (memory != nullptr) staging = static_cast<std::byte*>(memory->Allocate(n * stride));
    if (staging != nullptr) {
      staging_memory = memory;  // 256-byte aligned or better (pinned allocations are pages)
    } else {
      staging = static_cast<std::byte*>(::operator new(n * stride, std::align_val_t{kAlign}));
    }
  }
  ~Slab() {
    if (staging_memory != nullptr) {
      staging_memory->Free(staging);
    } else {
      ::operator delete(staging, std::align_val_t{kAlign});
    }
  }
  std::size_t count;
  std::unique_ptr<RequestRecord[]> records;
  std::byte* staging = nullptr;
  runtime::StagingMemory* staging_memory = nullptr;  // null: heap memory
};

RecordPool::RecordPool(std::size_t q_elems, std::size_t kv_elems, std::size_t lse_elems,
                       int slab_records, runtime::StagingMemory* staging,
                       std::size_t staged_records)
    : q_elems_(q_elems),
      kv_elems_(kv_elems),
      lse_elems_(lse_elems),
      stride_(StrideFor(q_elems, kv_elems, lse_elems)),
      slab_records_(slab_records),
      staging_(staging) {
  // The staged working set up front: allocating device-visible memory (cudaHostAlloc) takes
  // milliseconds and driver locks, so it never happens on the submit path.
  MutexLock lock(&grow_mu_);
  if (staging_ != nullptr && staged_records > 0) {
    for (std::size_t have = 0; staging_ != nullptr && have < staged_records;
         have += slabs_.back()->count) {
      AddSlab(std::max<std::size_t>(slab_records_, 1), staging_, nullptr, 0);
    }
    has_staged_ = slabs_.front()->staging_memory != nullptr;
  }
}

RecordPool::~RecordPool() = default;

std::size_t RecordPool::StrideFor(std::size_t q_elems, std::size_t kv_elems,
                                  std::size_t lse_elems) {
  // q, k, v, out (out has q's shape), then lse.
  return RoundUp(q_elems * sizeof(Half)) * 2 + RoundUp(kv_elems * sizeof(Half)) * 2 +
         RoundUp(lse_elems * sizeof(float));
}

void RecordPool::Grow(RequestRecord** out, std::size_t n) {
  MutexLock lock(&grow_mu_);
  // Past the staged working set: heap memory (those requests take the executor's copy path).
  // Not more staging: cudaHostAlloc on the submit path stalled every producer behind grow_mu_
  // and halved the throughput of an overloaded scheduler (H100, bench/results/
  // 2026-11-26_h100_staged-requests/r1).
  AddSlab(std::max<std::size_t>(slab_records_, n), nullptr, out, n);
}

void RecordPool::AddSlab(std::size_t count, runtime::StagingMemory* memory, RequestRecord** out,
                       std::size_t n) {
  auto slab = std::make_unique<Slab>(count, stride_, memory);
  // Refused (logged once by the allocator): the rest of the working set goes on the heap.
  if (memory != nullptr && slab->staging_memory == nullptr) staging_ = nullptr;
  std::vector<RequestRecord*> rest;
  rest.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    RequestRecord* s = &slab->records[i];
    std::byte* base = slab->staging + i * stride_;
    s->device_visible = slab->staging_memory != nullptr;
    s->q = reinterpret_cast<Half*>(base);
    base += RoundUp(q_elems_ * sizeof(Half));
    s->k = reinterpret_cast<Half*>(base);
    base += RoundUp(kv_elems_ * sizeof(Half));
    s->v = reinterpret_cast<Half*>(base);
    base += RoundUp(kv_elems_ * sizeof(Half));
    s->out = reinterpret_cast<Half*>(base);
    base += RoundUp(q_elems_ * sizeof(Half));
    s->lse = reinterpret_cast<float*>(base);
    if (i < n) {
      out[i] = s;
    } else {
      rest.push_back(s);
    }
  }
  (slab->staging_memory != nullptr ? staged_free_ : heap_free_).PushBulk(rest.data(), rest.size());
  slabs_.push_back(std::move(slab));
}

void RecordPool::TakeHeap(RequestRecord** out, std::size_t n) {
  heap_free_.PopBulk(out, n, [this](RequestRecord** more, std::size_t m) { Grow(more, m); });
}

RequestRecord* RecordPool::Acquire() {
  if (!has_staged_) {
    return heap_free_.Pop([this](RequestRecord** out, std::size_t n) { Grow(out, n); });
  }
  return staged_free_.Pop([this](RequestRecord** out, std::size_t n) { TakeHeap(out, n); });
}

void RecordPool::AcquireBulk(RequestRecord** out, std::size_t n) {
  if (!has_staged_) return TakeHeap(out, n);
  staged_free_.PopBulk(out, n, [this](RequestRecord** more, std::size_t m) { TakeHeap(more, m); });
}

void RecordPool::Release(RequestRecord* record) { ReleaseBulk(&record, 1); }

void RecordPool::ReleaseBulk(RequestRecord* const* records, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t generation =
        GenerationOf(records[i]->state.load(std::memory_order_relaxed));
    records[i]->state.store(((generation + 1) << kGenerationShift) | kPhaseFree,
                          std::memory_order_release);
  }
  // Back to the list of their kind, a run of one kind at a time.
  for (std::size_t i = 0; i < n;) {
    const bool staged = records[i]->device_visible;
    std::size_t end = i + 1;
    while (end < n && records[end]->device_visible == staged) ++end;
    (staged ? staged_free_ : heap_free_).PushBulk(records + i, end - i);
    i = end;
  }
}

std::size_t RecordPool::capacity() const {
  MutexLock lock(&grow_mu_);
  std::size_t total = 0;
  for (const auto& slab : slabs_) total += slab->count;
  return total;
}

}  // namespace attnrt::scheduler::internal
