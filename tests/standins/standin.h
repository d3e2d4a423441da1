/* standin.h — what the cuBLASLt and NCCL stand-ins take from the driver stand-in (libcuda.so.1).
 *
 * The three stand-in libraries (tests/standins/) replace libcuda.so.1, libcublasLt.so.13 and
 * libnccl.so.2 for runtime/device/dev_cuda.c when HYP_CUDA_LIBDIR names the folder they were built
 * into. The cuBLASLt and NCCL stand-ins link the driver stand-in (DT_NEEDED, rpath $ORIGIN), so one
 * process holds one instance of its memory map and streams. This header is the whole interface
 * between them; it must never expose the host view of device memory to anything but a stand-in. */
#ifndef HYP_STANDIN_H
#define HYP_STANDIN_H
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The host-readable view of device bytes [p, p + bytes): NULL when the range is not inside one live
 * allocation of the current context (the reason is recorded, as the driver's sticky error would be). */
void *hypsi_host_view(CUdeviceptr p, size_t bytes, const char *who);
/* Runs fn(arg) on stream s after everything enqueued on s before it, as a kernel would run;
 * free_arg(arg) is called after fn (NULL: none). Returns CUDA_SUCCESS or the driver's error. */
CUresult hypsi_enqueue(CUstream s, void (*fn)(void *arg), void *arg, void (*free_arg)(void *arg));
/* Records an error that a later call on the stream (and cuStreamSynchronize) reports, as an
 * asynchronous fault does on hardware. */
void hypsi_stream_fault(CUstream s, CUresult r, const char *why);
/* The ordinal of the device whose context is current on this thread (-1: none), so the NCCL
 * stand-in can refuse two ranks on one GPU as NCCL does ("Duplicate GPU detected"). */
int hypsi_current_device(void);

#ifdef __cplusplus
}
#endif
#endif
