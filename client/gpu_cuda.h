/*
 * gpu_cuda.h - the CUDA driver API as libgranary sees it: the types, the
 * constants and a table of the entry points it calls, loaded at run time.
 *
 * libgranary never links against CUDA.  gr__cuda_load() dlopens the
 * driver ("libcuda.so.1", or $GRANARY_LIBCUDA: the tests point it at a
 * stand-in), finds cuGetProcAddress_v2 (CUDA 12+; cuGetProcAddress on an
 * 11.x driver) and asks it for every other entry point at ABI version
 * GR_CUDA_ABI, so the signatures below are those of CUDA 12.0 whatever
 * driver runs.  The toolkit's stub library (lib64/stubs/libcuda.so) is never
 * named; if it is found anyway, cuInit fails with 34 and the GPU path says
 * "no GPU".
 *
 * With the toolkit's cuda.h on the include path (the Makefile adds
 * /usr/local/cuda/include when it exists) its types are used and every
 * pointer type in the table is checked against cuda.h's prototype at
 * compile time (gpu_drv.c); without it, the minimal declarations below
 * stand in (define GR_NO_CUDA_H to force that; tests/test_gpu.sh builds
 * both ways).  Internal to libgranary and its tests: gr__ names.
 */
#ifndef GR_GPU_CUDA_H
#define GR_GPU_CUDA_H

#include <stddef.h>
#include <stdint.h>

#if !defined(GR_NO_CUDA_H) && defined(__has_include)
#if __has_include(<cuda.h>)
#define GR_HAVE_CUDA_H 1
#endif
#endif

#ifdef GR_HAVE_CUDA_H
#include <cuda.h>
#else
/* The subset of cuda.h (CUDA 12/13, 64-bit Linux) that libgranary uses. */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef int CUdevice_attribute;
typedef int CUpointer_attribute;
typedef unsigned long long cuuint64_t;
typedef int CUdriverProcAddressQueryResult;
typedef void (*CUhostFn)(void *userData);
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_DEINITIALIZED 4
#define CUDA_ERROR_STUB_LIBRARY 34
#define CUDA_ERROR_DEVICE_UNAVAILABLE 46
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_ILLEGAL_ADDRESS 700
#define CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712
#define CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED 713
#define CUDA_ERROR_NOT_PERMITTED 800
#define CUDA_ERROR_NOT_SUPPORTED 801
#define CUDA_ERROR_SYSTEM_NOT_READY 802
#define CUDA_ERROR_SYSTEM_DRIVER_MISMATCH 803
#define CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE 804
#define CUDA_ERROR_UNKNOWN 999
#define CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING 41
#define CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED 99
#define CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED 113
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_MEMORYTYPE_HOST 0x01
#define CU_MEMORYTYPE_DEVICE 0x02
#define CU_MEMORYTYPE_UNIFIED 0x04
#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_READ_ONLY 0x08
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_GET_PROC_ADDRESS_DEFAULT 0
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
#endif

/* The ABI (CUDA version) whose signatures the table has: the driver hands
 * out the entry point versions of CUDA 12.0 (cuMemAlloc_v2 and friends). */
#define GR_CUDA_ABI 12000
#define GR_CUDA_MIN_DRIVER 11030        /* cuGetProcAddress appeared in 11.3 */

/* X(name, return-and-arguments): every driver entry point libgranary or its
 * tests call.  The names are the base names cuGetProcAddress takes. */
#define GR_CUDA_FUNCS(X) \
    X(cuInit, (unsigned int flags)) \
    X(cuDriverGetVersion, (int *version)) \
    X(cuDeviceGet, (CUdevice *dev, int ordinal)) \
    X(cuDeviceGetCount, (int *count)) \
    X(cuDeviceGetAttribute, (int *pi, CUdevice_attribute attrib, CUdevice dev)) \
    X(cuDeviceGetName, (char *name, int len, CUdevice dev)) \
    X(cuDevicePrimaryCtxRetain, (CUcontext *pctx, CUdevice dev)) \
    X(cuDevicePrimaryCtxRelease, (CUdevice dev)) \
    X(cuCtxGetCurrent, (CUcontext *pctx)) \
    X(cuCtxSetCurrent, (CUcontext ctx)) \
    X(cuCtxPushCurrent, (CUcontext ctx)) \
    X(cuCtxPopCurrent, (CUcontext *pctx)) \
    X(cuCtxGetDevice, (CUdevice *dev)) \
    X(cuCtxSynchronize, (void)) \
    X(cuStreamCreate, (CUstream *ps, unsigned int flags)) \
    X(cuStreamDestroy, (CUstream s)) \
    X(cuStreamSynchronize, (CUstream s)) \
    X(cuStreamWaitEvent, (CUstream s, CUevent ev, unsigned int flags)) \
    X(cuStreamGetCtx, (CUstream s, CUcontext *pctx)) \
    X(cuEventCreate, (CUevent *pev, unsigned int flags)) \
    X(cuEventDestroy, (CUevent ev)) \
    X(cuEventRecord, (CUevent ev, CUstream s)) \
    X(cuEventQuery, (CUevent ev)) \
    X(cuEventSynchronize, (CUevent ev)) \
    X(cuEventElapsedTime, (float *ms, CUevent start, CUevent end)) \
    X(cuLaunchHostFunc, (CUstream s, CUhostFn fn, void *arg)) \
    X(cuMemHostRegister, (void *p, size_t len, unsigned int flags)) \
    X(cuMemHostUnregister, (void *p)) \
    X(cuMemHostAlloc, (void **pp, size_t len, unsigned int flags)) \
    X(cuMemFreeHost, (void *p)) \
    X(cuMemAlloc, (CUdeviceptr *dp, size_t len)) \
    X(cuMemFree, (CUdeviceptr dp)) \
    X(cuMemGetAddressRange, (CUdeviceptr *base, size_t *size, CUdeviceptr dp)) \
    X(cuPointerGetAttribute, (void *data, CUpointer_attribute attr, CUdeviceptr dp)) \
    X(cuMemcpyHtoDAsync, (CUdeviceptr dst, const void *src, size_t len, CUstream s)) \
    X(cuMemcpyDtoDAsync, (CUdeviceptr dst, CUdeviceptr src, size_t len, CUstream s)) \
    X(cuMemcpyHtoD, (CUdeviceptr dst, const void *src, size_t len)) \
    X(cuMemcpyDtoH, (void *dst, CUdeviceptr src, size_t len)) \
    X(cuMemsetD8, (CUdeviceptr dst, unsigned char v, size_t len)) \
    X(cuGetErrorName, (CUresult err, const char **s)) \
    X(cuGetErrorString, (CUresult err, const char **s))

typedef struct gr__cuda {
#define GR_CUDA_FIELD(name, args) CUresult (*name) args;
    GR_CUDA_FUNCS(GR_CUDA_FIELD)
#undef GR_CUDA_FIELD
    int driver_version;         /* cuDriverGetVersion, e.g. 13000 */
    int ndevices;               /* cuDeviceGetCount after cuInit */
    char path[256];             /* what was dlopened */
} gr__cuda;

/*
 * The process's driver table, loaded and cuInit'ed on the first call (once
 * per process; later calls return the same answer).  Returns the table, or
 * NULL with *err (static text, valid forever) saying why and *errnum the
 * errno to report: ENODEV (no driver, no device, the stub library, a driver
 * too old) or ENOSYS (an entry point missing).  The library is never
 * unloaded.  Threads: any.
 */
const gr__cuda *gr__cuda_load(const char **err, int *errnum);

/* errno for a CUresult: ENOMEM, EINVAL (a bad value, handle or context),
 * ENODEV (no usable GPU), ENOTSUP (not supported or not permitted), EFAULT
 * (an illegal address), EIO otherwise. */
int gr__cuda_errno(CUresult r);

/* "NAME (description)" of a CUresult in buf; returns buf.  Works with a
 * NULL table (the number only). */
const char *gr__cuda_strerror(const gr__cuda *cu, CUresult r, char *buf, size_t len);

/*
 * GPUDirect Storage: whether libcufile can be loaded in this process
 * (dlopen of "libcufile.so.0", or $GRANARY_LIBCUFILE; once per process).
 * 1 with *what naming the library found, 0 with *what saying why not.
 * libgranary only detects it: reads reach the GPU through the DRAM arena
 * either way (see granary.h).  Threads: any.
 */
int gr__cufile_probe(const char **what);

#endif
