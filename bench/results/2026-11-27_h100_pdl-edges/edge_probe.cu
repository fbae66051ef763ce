// Does stream capture into a graph, behind a kernel node, turn a launch with programmatic stream
// serialization into a programmatic edge? (The executor's host graphs rely on it.)
#include <cstdio>
#include <cuda_runtime.h>
__global__ void First(int* p) { asm volatile("griddepcontrol.launch_dependents;"); p[0] = 1; }
__global__ void Second(int* p) { asm volatile("griddepcontrol.wait;" ::: "memory"); p[1] = p[0] + 1; }
int main() {
  int* d = nullptr;
  cudaMalloc(&d, 64);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaGraph_t g;
  cudaGraphCreate(&g, 0);
  cudaGraphNode_t a;
  void* args[] = {&d};
  cudaKernelNodeParams p{};
  p.func = (void*)First; p.gridDim = dim3(1); p.blockDim = dim3(32); p.kernelParams = args;
  cudaGraphAddKernelNode(&a, g, nullptr, 0, &p);
  cudaStreamBeginCaptureToGraph(s, g, &a, nullptr, 1, cudaStreamCaptureModeThreadLocal);
  cudaLaunchAttribute at{};
  at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t c{};
  c.gridDim = dim3(1); c.blockDim = dim3(32); c.stream = s; c.attrs = &at; c.numAttrs = 1;
  cudaLaunchKernelEx(&c, Second, d);
  cudaGraph_t e;
  cudaError_t r = cudaStreamEndCapture(s, &e);
  std::size_t n = 4;
  cudaGraphNode_t dep[4];
  cudaGraphEdgeData ed[4] = {};
  cudaError_t q = cudaGraphNodeGetDependentNodes(a, dep, ed, &n);
  std::printf("capture end %s, query %s: %zu dependent(s); edge type %d (programmatic = %d), "
              "from_port %d (programmatic port = %d)\n", cudaGetErrorName(r), cudaGetErrorName(q),
              n, n ? ed[0].type : -1, int(cudaGraphDependencyTypeProgrammatic),
              n ? ed[0].from_port : -1, int(cudaGraphKernelNodePortProgrammatic));
  cudaGraphExec_t x;
  cudaError_t i = cudaGraphInstantiate(&x, g, 0);
  cudaError_t l = cudaGraphLaunch(x, s);
  cudaError_t w = cudaStreamSynchronize(s);
  int h[2] = {};
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  std::printf("instantiate %s, launch %s, sync %s, result %d %d (expect 1 2)\n",
              cudaGetErrorName(i), cudaGetErrorName(l), cudaGetErrorName(w), h[0], h[1]);
  return 0;
}
