// The CUDA executor's step on the stream (cuda_executor_impl.h): the batch views, eager
// enqueue, capture into graphs, and the per-piece node enables.
#include "runtime/cuda_executor_impl.h"

namespace attnrt::runtime {

kernels::DecodeBatchView CudaExecutor::Impl::ViewFor(int bucket, int buffer) const {
  const BufferLayout& l = layouts[bucket];
  const PipelineBuffer& buf = buffers[buffer];
  kernels::DecodeBatchView v;
  v.capacity = l.capacity;
  v.num_q_heads = options.shape.num_q_heads;
  v.max_blocks_per_seq = max_blocks;
  v.kv_lengths = buf.dev_in.as<std::int32_t>(l.kv_lengths);
  v.layers = buf.dev_in.as<std::int32_t>(l.layers);
  v.block_tables = buf.dev_in.as<std::int32_t>(l.block_tables);
  v.q = buf.dev_in.as<Half>(l.q);
  v.k_new = buf.dev_in.as<Half>(l.k);
  v.v_new = buf.dev_in.as<Half>(l.v);
  v.out = buf.dev_out.as<Half>(l.out);
  v.lse = buf.dev_out.as<float>(l.lse);
  v.scale = options.shape.scale();
  return v;
}

BatchIoArgs CudaExecutor::Impl::IoArgsFor(int bucket, int buffer) const {
  const BufferLayout& l = layouts[bucket];
  const PipelineBuffer& buf = buffers[buffer];
  BatchIoArgs a;
  a.capacity = l.capacity;
  a.q_elems = options.shape.num_q_heads * options.shape.head_dim;
  a.kv_elems = static_cast<int>(options.shape.kv_token_elems());
  a.num_q_heads = options.shape.num_q_heads;
  a.kv_lengths = buf.dev_in.as<std::int32_t>(l.kv_lengths);
  a.q_ptrs = buf.dev_in.as<std::uint64_t>(l.q_ptrs);
  a.k_ptrs = buf.dev_in.as<std::uint64_t>(l.k_ptrs);
  a.v_ptrs = buf.dev_in.as<std::uint64_t>(l.v_ptrs);
  a.out_ptrs = buf.dev_in.as<std::uint64_t>(l.out_ptrs);
  a.lse_ptrs = buf.dev_in.as<std::uint64_t>(l.lse_ptrs);
  a.q = buf.dev_in.as<Half>(l.q);
  a.k = buf.dev_in.as<Half>(l.k);
  a.v = buf.dev_in.as<Half>(l.v);
  a.out = buf.dev_out.as<Half>(l.out);
  a.lse = buf.dev_out.as<float>(l.lse);
  return a;
}

// The path's plan for this bucket, run on the pipeline buffer's arrays: append, then decode
// attention.
Status CudaExecutor::Impl::EnqueueCompute(int path, int bucket, int buffer, cudaStream_t st) {
  const DecodePath& p = paths[path];
  return p.variant->run(p.plans[bucket], ViewFor(bucket, buffer), pools,
                        WorkspaceFor(p.plans[bucket]), {st, cublas.get()});
}

void CudaExecutor::Impl::ForwardComputeOrder(int buffer) {
  cudaStream_t st = buffers[buffer].stream.get();
  if (cudaStreamWaitEvent(st, buffers[PreviousBuffer(buffer)].computed.get(), 0) != cudaSuccess ||
      cudaEventRecord(buffers[buffer].computed.get(), st) != cudaSuccess) {
    (void)cudaGetLastError();
    // The next compute could then start before an earlier one ends: wait for all of them.
    Logger().error("cuda executor: could not forward the compute order; synchronizing");
    (void)cudaDeviceSynchronize();
  }
}

Status CudaExecutor::Impl::AddComputeOrderNodes(cudaGraph_t graph,
                                                const std::vector<cudaGraphNode_t>& roots,
                                                const std::vector<cudaGraphNode_t>& leaves,
                                                int buffer) {
  cudaGraphNode_t wait = nullptr, record = nullptr;
  ATTNRT_CUDA_RETURN(cudaGraphAddEventWaitNode(&wait, graph, nullptr, 0,
                                               buffers[PreviousBuffer(buffer)].computed.get()));
  for (cudaGraphNode_t root : roots) {
    ATTNRT_CUDA_RETURN(cudaGraphAddDependencies(graph, &wait, &root, nullptr, 1));
  }
  const std::vector<cudaGraphNode_t> after = leaves.empty() ? std::vector{wait} : leaves;
  ATTNRT_CUDA_RETURN(cudaGraphAddEventRecordNode(&record, graph, after.data(), after.size(),
                                                 buffers[buffer].computed.get()));
  return Status::Ok();
}

kernels::DecodeWorkspace CudaExecutor::Impl::WorkspaceFor(const kernels::DecodePlan& plan) const {
  // workspace_zero_bytes is 0 whenever the workspace is empty (Init sized it to hold them).
  const std::size_t at = plan.workspace_zero_bytes > 0 ? 0 : workspace_zero_bytes;
  return {static_cast<char*>(workspace.data()) + at, workspace.bytes() - at};
}

namespace {

// A graph's nodes, its roots (no dependencies) and its leaves (no dependents).
struct GraphShape {
  std::vector<cudaGraphNode_t> nodes, roots, leaves;
};

StatusOr<GraphShape> ShapeOf(cudaGraph_t graph) {
  GraphShape shape;
  std::size_t n = 0;
  ATTNRT_CUDA_RETURN(cudaGraphGetNodes(graph, nullptr, &n));
  shape.nodes.resize(n);
  ATTNRT_CUDA_RETURN(cudaGraphGetNodes(graph, shape.nodes.data(), &n));
  ATTNRT_CUDA_RETURN(cudaGraphGetRootNodes(graph, nullptr, &n));
  shape.roots.resize(n);
  ATTNRT_CUDA_RETURN(cudaGraphGetRootNodes(graph, shape.roots.data(), &n));
  for (cudaGraphNode_t node : shape.nodes) {
    std::size_t out = 0;
    ATTNRT_CUDA_RETURN(cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, &out));
    if (out == 0) shape.leaves.push_back(node);
  }
  return shape;
}

// A copy between pinned staging and its device mirror: a copy kernel (`by_kernel`:
// CudaExecutor::Impl::CopiesByKernel) or a memcpy node.
Status AddStagingCopy(cudaGraph_t graph, const cudaGraphNode_t* deps, std::size_t num_deps,
                      void* to, const void* from, std::size_t bytes, bool by_kernel,
                      cudaMemcpyKind direction, cudaGraphNode_t* node) {
  if (by_kernel) return kernels::AddCopyNode(graph, deps, num_deps, from, to, bytes, node);
  ATTNRT_CUDA_RETURN(cudaGraphAddMemcpyNode1D(node, graph, deps, num_deps, to, from, bytes,
                                              direction));
  return Status::Ok();
}

}  // namespace

// The same work as one replay, launched op by op (eager mode and warm-up).
Status CudaExecutor::Impl::EnqueueEager(int path, int bucket, int buffer, const NodeEnables& e) {
  const BufferLayout& l = layouts[bucket];
  PipelineBuffer& buf = buffers[buffer];
  cudaStream_t st = buf.stream.get();
  ATTNRT_CUDA_RETURN(cudaMemcpyAsync(buf.dev_in.data(), buf.in.data(),
                                     e.h2d_full ? l.in_bytes : l.meta_bytes,
                                     cudaMemcpyHostToDevice, st));
  const BatchIoArgs io = IoArgsFor(bucket, buffer);
  if (e.device_io) ATTNRT_RETURN_IF_ERROR(LaunchGather(io, st));
  ATTNRT_CUDA_RETURN(cudaStreamWaitEvent(st, buffers[PreviousBuffer(buffer)].computed.get(), 0));
  if (e.compute) ATTNRT_RETURN_IF_ERROR(EnqueueCompute(path, bucket, buffer, st));
  ATTNRT_CUDA_RETURN(cudaEventRecord(buf.computed.get(), st));
  if (e.device_io) ATTNRT_RETURN_IF_ERROR(LaunchScatter(io, st));
  if (e.d2h) {
    ATTNRT_CUDA_RETURN(cudaMemcpyAsync(buf.out.data(), buf.dev_out.data(), l.out_bytes,
                                       cudaMemcpyDeviceToHost, st));
  }
  return Status::Ok();
}

Status CudaExecutor::Impl::Capture(int path, int bucket, int buffer, CapturedGraph* g) {
  const BufferLayout& l = layouts[bucket];
  PipelineBuffer& buf = buffers[buffer];

  // The kernels' own launches (append + decode path) are captured from the stream; the
  // executor's copies and gather/scatter are then added to the same graph as explicit nodes
  // whose handles it keeps (one flat graph: no child-graph node on the launch path).
  ATTNRT_CUDA_RETURN(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
  const Status enqueued = EnqueueCompute(path, bucket, buffer, stream.get());
  cudaGraph_t raw = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream.get(), &raw);
  g->graph = Graph::Adopt(raw);
  ATTNRT_RETURN_IF_ERROR(enqueued);
  ATTNRT_CUDA_RETURN(ended);
  cudaGraph_t graph = g->graph.get();
  ATTNRT_RETURN_IF_ERROR(
      AddHostGraph(path, bucket, buffer, /*compute_order=*/true, &g->host_graph, &g->host_exec));
  if (bucket == 0) {
    ATTNRT_RETURN_IF_ERROR(AddHostGraph(path, bucket, buffer, /*compute_order=*/false,
                                        &g->solo_graph, &g->solo_exec));
  }
  ATTNRT_RETURN_IF_ERROR(AddDeviceGraph(path, bucket, buffer, /*compute_order=*/true,
                                        &g->device_graph, &g->device_exec));
  if (bucket == 0 && paths[path].variant->reads_rows_in_place) {
    ATTNRT_RETURN_IF_ERROR(AddDeviceGraph(path, bucket, buffer, /*compute_order=*/false,
                                          &g->device_solo_graph, &g->device_solo_exec));
  }

  ATTNRT_ASSIGN_OR_RETURN(const GraphShape shape, ShapeOf(graph));
  ATTNRT_RETURN_IF_ERROR(AddComputeOrderNodes(graph, shape.roots, shape.leaves, buffer));
  g->compute_nodes.clear();
  for (cudaGraphNode_t node : shape.nodes) {
    cudaGraphNodeType type{};
    ATTNRT_CUDA_RETURN(cudaGraphNodeGetType(node, &type));
    if (type == cudaGraphNodeTypeKernel || type == cudaGraphNodeTypeMemset ||
        type == cudaGraphNodeTypeMemcpy) {
      g->compute_nodes.push_back(node);
    }
  }

  ATTNRT_CUDA_RETURN(cudaGraphAddMemcpyNode1D(&g->h2d_full, graph, nullptr, 0, buf.dev_in.data(),
                                              buf.in.data(), l.in_bytes, cudaMemcpyHostToDevice));
  ATTNRT_CUDA_RETURN(cudaGraphAddMemcpyNode1D(&g->h2d_meta, graph, nullptr, 0, buf.dev_in.data(),
                                              buf.in.data(), l.meta_bytes, cudaMemcpyHostToDevice));
  const BatchIoArgs io = IoArgsFor(bucket, buffer);
  const cudaGraphNode_t copies[] = {g->h2d_full, g->h2d_meta};
  ATTNRT_RETURN_IF_ERROR(AddGatherNode(graph, copies, 2, io, &g->gather));
  for (cudaGraphNode_t root : shape.roots) {
    ATTNRT_CUDA_RETURN(cudaGraphAddDependencies(graph, &g->gather, &root, nullptr, 1));
  }
  ATTNRT_RETURN_IF_ERROR(
      AddScatterNode(graph, shape.leaves.data(), shape.leaves.size(), io, &g->scatter));
  ATTNRT_CUDA_RETURN(cudaGraphAddMemcpyNode1D(&g->d2h, graph, &g->scatter, 1, buf.out.data(),
                                              buf.dev_out.data(), l.out_bytes,
                                              cudaMemcpyDeviceToHost));
  ATTNRT_ASSIGN_OR_RETURN(g->exec, GraphExec::Instantiate(g->graph));
  ATTNRT_CUDA_RETURN(cudaGraphUpload(g->exec.get(), buf.stream.get()));  // where it will run
  g->enabled.reset();
  return Status::Ok();
}

Status CudaExecutor::Impl::AddHostGraph(int path, int bucket, int buffer, bool compute_order,
                                        Graph* graph, GraphExec* exec) {
  const BufferLayout& l = layouts[bucket];
  PipelineBuffer& buf = buffers[buffer];
  const bool by_kernel = CopiesByKernel(l.in_bytes, l.out_bytes);
  cudaGraph_t raw = nullptr;
  ATTNRT_CUDA_RETURN(cudaGraphCreate(&raw, 0));
  *graph = Graph::Adopt(raw);
  cudaGraphNode_t h2d = nullptr, d2h = nullptr;
  ATTNRT_RETURN_IF_ERROR(AddStagingCopy(raw, nullptr, 0, buf.dev_in.data(), buf.in.data(),
                                        l.in_bytes, by_kernel, cudaMemcpyHostToDevice, &h2d));
  // The compute, captured into this graph behind the H2D: a kernel the path launches with
  // programmatic stream serialization (it waits for its prerequisite grids before reading)
  // then hangs off a copy kernel by a programmatic edge, as it would on a stream, and its
  // launch overlaps the copy instead of following it.
  ATTNRT_CUDA_RETURN(cudaStreamBeginCaptureToGraph(stream.get(), raw, &h2d, nullptr, 1,
                                                   cudaStreamCaptureModeThreadLocal));
  const Status enqueued = EnqueueCompute(path, bucket, buffer, stream.get());
  cudaGraph_t ended = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream.get(), &ended);
  ATTNRT_RETURN_IF_ERROR(enqueued);
  ATTNRT_CUDA_RETURN(end);
  // The compute's roots are the H2D's dependents (asked for with their edge data: a query
  // without it refuses programmatic edges); its leaves are the graph's, the H2D aside.
  std::size_t num_roots = 0;
  ATTNRT_CUDA_RETURN(cudaGraphNodeGetDependentNodes(h2d, nullptr, nullptr, &num_roots));
  std::vector<cudaGraphNode_t> roots(num_roots);
  std::vector<cudaGraphEdgeData> root_edges(num_roots);
  ATTNRT_CUDA_RETURN(
      cudaGraphNodeGetDependentNodes(h2d, roots.data(), root_edges.data(), &num_roots));
  ATTNRT_ASSIGN_OR_RETURN(const GraphShape shape, ShapeOf(raw));
  std::vector<cudaGraphNode_t> leaves;
  for (cudaGraphNode_t node : shape.leaves) {
    if (node != h2d) leaves.push_back(node);
  }
  if (compute_order) ATTNRT_RETURN_IF_ERROR(AddComputeOrderNodes(raw, roots, leaves, buffer));
  if (leaves.empty()) leaves.push_back(h2d);  // (no compute node: the copies in order)
  ATTNRT_RETURN_IF_ERROR(AddStagingCopy(raw, nullptr, 0, buf.out.data(), buf.dev_out.data(),
                                        l.out_bytes, by_kernel, cudaMemcpyDeviceToHost, &d2h));
  // A copy kernel waits for its prerequisite grids first (kernels::AddCopyNode), so it may
  // follow a kernel by a programmatic edge: launched while the compute runs, it copies the
  // outputs as soon as the compute's memory is visible.
  for (cudaGraphNode_t leaf : leaves) {
    cudaGraphNodeType type{};
    ATTNRT_CUDA_RETURN(cudaGraphNodeGetType(leaf, &type));
    cudaGraphEdgeData edge{};
    if (by_kernel && type == cudaGraphNodeTypeKernel) {
      edge.type = cudaGraphDependencyTypeProgrammatic;
      edge.from_port = cudaGraphKernelNodePortProgrammatic;
    }
    ATTNRT_CUDA_RETURN(cudaGraphAddDependencies(raw, &leaf, &d2h, &edge, 1));
  }
  ATTNRT_ASSIGN_OR_RETURN(*exec, GraphExec::Instantiate(*graph));
  ATTNRT_CUDA_RETURN(cudaGraphUpload(exec->get(), buf.stream.get()));
  return Status::Ok();
}

namespace {

// Rows [first, first + rows) of a bucket's batch view / gather-scatter arguments.
kernels::DecodeBatchView ViewRows(kernels::DecodeBatchView v, const ModelShape& shape, int first,
                                  int rows) {
  const std::int64_t q = static_cast<std::int64_t>(first) * shape.num_q_heads * shape.head_dim;
  const std::int64_t kv = static_cast<std::int64_t>(first) * shape.kv_token_elems();
  v.capacity = rows;
  v.kv_lengths += first;
  v.layers += first;
  v.block_tables += static_cast<std::int64_t>(first) * v.max_blocks_per_seq;
  v.q += q;
  v.k_new += kv;
  v.v_new += kv;
  v.out += q;
  if (v.lse != nullptr) v.lse += static_cast<std::int64_t>(first) * v.num_q_heads;
  if (v.q_rows != nullptr) {
    v.q_rows += first;
    v.out_rows += first;
    v.lse_rows += first;
  }
  if (v.k_rows != nullptr) {
    v.k_rows += first;
    v.v_rows += first;
  }
  return v;
}

BatchIoArgs IoRows(BatchIoArgs a, int first, int rows) {
  const std::int64_t q = static_cast<std::int64_t>(first) * a.q_elems;
  const std::int64_t kv = static_cast<std::int64_t>(first) * a.kv_elems;
  a.capacity = rows;
  a.kv_lengths += first;
  a.q_ptrs += first;
  a.k_ptrs += first;
  a.v_ptrs += first;
  a.out_ptrs += first;
  a.lse_ptrs += first;
  a.q += q;
  a.k += kv;
  a.v += kv;
  a.out += q;
  a.lse += static_cast<std::int64_t>(first) * a.num_q_heads;
  return a;
}

}  // namespace

int CudaExecutor::Impl::ChunkBucket(int path, int bucket) const {
  // A path that reads its requests in place has no gather or scatter to overlap: chunks would
  // only add each compute's tail (H100, lone B=128 piece: 133-135 us in one, 155-160 in chunks
  // of 64 rows; bench/results/2026-11-27_h100_device-io-chunks/, r6).
  if (paths[path].variant->reads_rows_in_place) return bucket;
  const int rows = options.device_io_chunk_rows;
  const int capacity = options.buckets[bucket];
  if (rows <= 0 || capacity < 2 * rows || capacity % rows != 0) return bucket;
  for (int b = 0; b < num_buckets(); ++b) {
    if (options.buckets[b] == rows &&
        runnable[static_cast<std::size_t>(path) * num_buckets() + b]) {
      return b;
    }
  }
  return bucket;
}

Status CudaExecutor::Impl::AddDeviceGraph(int path, int bucket, int buffer, bool compute_order,
                                          Graph* graph, GraphExec* exec) {
  const BufferLayout& l = layouts[bucket];
  PipelineBuffer& buf = buffers[buffer];
  const DecodePath& p = paths[path];
  const bool in_place = p.variant->reads_rows_in_place;
  const int chunk_bucket = ChunkBucket(path, bucket);
  const kernels::DecodePlan& plan = p.plans[chunk_bucket];
  const int rows = options.buckets[chunk_bucket];
  cudaGraph_t raw = nullptr;
  ATTNRT_CUDA_RETURN(cudaGraphCreate(&raw, 0));
  *graph = Graph::Adopt(raw);

  cudaGraphNode_t h2d = nullptr, wait = nullptr, record = nullptr;
  if (pinned_is_device_addressable) {
    // Only the blocks each row reads (kernels::MetadataCopyArgs), by a kernel: H200, bucket 128
    // at max_context 2773, a memcpy node of the whole 89 KB cost the launch ~2 us more
    // (bench/results/2026-11-29_h200_launch-cost/ r1, r2).
    kernels::MetadataCopyArgs meta;
    meta.from = buf.in.as<unsigned char>();
    meta.to = static_cast<unsigned char*>(buf.dev_in.data());
    meta.head_bytes = l.block_tables;
    meta.kv_lengths = l.kv_lengths;
    meta.tables = l.block_tables;
    meta.tail = l.q_ptrs;
    meta.end = l.meta_bytes;
    meta.capacity = l.capacity;
    meta.max_blocks = max_blocks;
    meta.block_size = options.shape.block_size;
    ATTNRT_RETURN_IF_ERROR(kernels::AddMetadataCopyNode(raw, nullptr, 0, meta, &h2d));
  } else {
    ATTNRT_RETURN_IF_ERROR(AddStagingCopy(raw, nullptr, 0, buf.dev_in.data(), buf.in.data(),
                                          l.meta_bytes, /*by_kernel=*/false,
                                          cudaMemcpyHostToDevice, &h2d));
  }
  if (compute_order) {
    ATTNRT_CUDA_RETURN(cudaGraphAddEventWaitNode(&wait, raw, nullptr, 0,
                                                 buffers[PreviousBuffer(buffer)].computed.get()));
  }
  kernels::DecodeBatchView view = ViewFor(bucket, buffer);
  BatchIoArgs io = IoArgsFor(bucket, buffer);
  if (in_place) {  // every request read and written where it is: no gather, no scatter
    view.q_rows = io.q_ptrs;
    view.k_rows = io.k_ptrs;
    view.v_rows = io.v_ptrs;
    view.out_rows = io.out_ptrs;
    view.lse_rows = io.lse_ptrs;
  }
  // The gathers at the device's greatest priority: the block scheduler gives a gather's CTAs
  // the first SM slots that the running compute frees, so the next chunk's inputs cross PCIe
  // while this chunk computes rather than after it. (Measured only together with the chunks,
  // not apart from them.)
  int least_priority = 0, greatest_priority = 0;
  ATTNRT_CUDA_RETURN(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
  cudaKernelNodeAttrValue urgent{};
  urgent.priority = greatest_priority;
  cudaGraphNode_t gather = h2d;
  std::vector<cudaGraphNode_t> after;  // what the next compute waits for
  if (compute_order) after.push_back(wait);
  if (in_place) after.push_back(h2d);
  for (int first = 0; first < l.capacity; first += rows) {
    const BatchIoArgs chunk_io = IoRows(io, first, rows);
    if (!in_place) {
      ATTNRT_RETURN_IF_ERROR(AddGatherNode(raw, &gather, 1, chunk_io, &gather));
      ATTNRT_CUDA_RETURN(
          cudaGraphKernelNodeSetAttribute(gather, cudaKernelNodeAttributePriority, &urgent));
      after.push_back(gather);
    }
    // The chunk's compute, captured into this graph after `after`; its last nodes are what
    // the capture's next node would depend on.
    ATTNRT_CUDA_RETURN(cudaStreamBeginCaptureToGraph(stream.get(), raw, after.data(), nullptr,
                                                     after.size(),
                                                     cudaStreamCaptureModeThreadLocal));
    const Status enqueued = p.variant->run(plan, ViewRows(view, options.shape, first, rows),
                                           pools, WorkspaceFor(plan),
                                           {stream.get(), cublas.get()});
    cudaStreamCaptureStatus capturing{};
    const cudaGraphNode_t* last = nullptr;
    const cudaGraphEdgeData* edges = nullptr;  // asked for, so that no edge type is refused
    std::size_t num_last = 0;
    const cudaError_t info = cudaStreamGetCaptureInfo(stream.get(), &capturing, nullptr, nullptr,
                                                      &last, &edges, &num_last);
    std::vector<cudaGraphNode_t> leaves;
    if (info == cudaSuccess) leaves.assign(last, last + num_last);
    cudaGraph_t ended = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream.get(), &ended);
    ATTNRT_RETURN_IF_ERROR(enqueued);
    ATTNRT_CUDA_RETURN(info);
    ATTNRT_CUDA_RETURN(end);
    if (!leaves.empty()) after = std::move(leaves);  // (nothing captured: the same deps)
    if (!in_place) {
      cudaGraphNode_t scatter = nullptr;
      ATTNRT_RETURN_IF_ERROR(AddScatterNode(raw, after.data(), after.size(), chunk_io, &scatter));
    }
  }
  if (compute_order) {
    ATTNRT_CUDA_RETURN(cudaGraphAddEventRecordNode(&record, raw, after.data(), after.size(),
                                                   buf.computed.get()));
  }
  ATTNRT_ASSIGN_OR_RETURN(*exec, GraphExec::Instantiate(*graph));
  ATTNRT_CUDA_RETURN(cudaGraphUpload(exec->get(), buf.stream.get()));
  return Status::Ok();
}

Status CudaExecutor::Impl::SetEnables(CapturedGraph& g, const NodeEnables& e) {
  if (g.enabled == e) return Status::Ok();
  cudaGraphExec_t x = g.exec.get();
  const std::optional<NodeEnables> before = g.enabled;
  g.enabled.reset();  // unknown until every call below succeeded
  ATTNRT_CUDA_RETURN(cudaGraphNodeSetEnabled(x, g.h2d_full, e.h2d_full));
  ATTNRT_CUDA_RETURN(cudaGraphNodeSetEnabled(x, g.h2d_meta, !e.h2d_full));
  ATTNRT_CUDA_RETURN(cudaGraphNodeSetEnabled(x, g.gather, e.device_io));
  ATTNRT_CUDA_RETURN(cudaGraphNodeSetEnabled(x, g.scatter, e.device_io));
  ATTNRT_CUDA_RETURN(cudaGraphNodeSetEnabled(x, g.d2h, e.d2h));
  if (!before.has_value() || before->compute != e.compute) {
    for (cudaGraphNode_t node : g.compute_nodes) {
      ATTNRT_CUDA_RETURN(cudaGraphNodeSetEnabled(x, node, e.compute));
    }
  }
  g.enabled = e;
  return Status::Ok();
}

// Orders host-side pool writes (prefill, copy-on-write through KvCache) after every queued
// piece; the cache's synchronous copies run on the legacy stream, so the device is synced after.
Status CudaExecutor::Impl::DrainStream() {
  ATTNRT_CUDA_RETURN(cudaStreamSynchronize(stream.get()));
  for (PipelineBuffer& buf : buffers) ATTNRT_CUDA_RETURN(cudaStreamSynchronize(buf.stream.get()));
  return Status::Ok();
}

}  // namespace attnrt::runtime
