/*
 * gpu_drv.c - loading the CUDA driver at run time (see gpu_cuda.h).
 *
 * One table per process, filled once under a pthread_once: dlopen the
 * driver, cuGetProcAddress_v2 for each entry point at GR_CUDA_ABI, cuInit,
 * count devices.  Every way this can fail ends in a NULL table and a reason
 * the caller turns into errno and gr_strerror_last() text; nothing here
 * prints.  The driver is never dlclosed (CUDA does not support unloading).
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_cuda.h"

#ifdef GR_HAVE_CUDA_H
/* The table's signatures must be cuda.h's (of the ABI we ask for): a
 * mismatch fails the build here rather than corrupting a call. */
#define GR_CUDA_CHECK(name, args)                                                       \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&name), CUresult (*) args), \
                   #name ": the table's signature differs from cuda.h's");
GR_CUDA_FUNCS(GR_CUDA_CHECK)
#undef GR_CUDA_CHECK
#endif

typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t,
                              CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa_v1_fn)(const char *, void **, int, cuuint64_t);

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static gr__cuda cuda_table;
static const gr__cuda *cuda_ok;
static const char *cuda_err = "not loaded";
static int cuda_errnum = ENODEV;
static char cuda_errbuf[512];

/* A reason with printf formatting, kept in cuda_errbuf. */
static void load_fail(int errnum, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void load_fail(int errnum, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(cuda_errbuf, sizeof(cuda_errbuf), fmt, ap);
    va_end(ap);
    cuda_err = cuda_errbuf;
    cuda_errnum = errnum;
}

static void load_once(void)
{
    const char *path = getenv("GRANARY_LIBCUDA");
    gpa_v2_fn gpa2;
    gpa_v1_fn gpa1;
    CUresult (*getver)(int *);
    gr__cuda *t = &cuda_table;
    void *h;
    int abi;
    CUresult r;
    char eb[160];

    if (!path || !*path)
        path = "libcuda.so.1";
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        load_fail(ENODEV, "no CUDA driver: %s", e ? e : path);
        return;
    }
    snprintf(t->path, sizeof(t->path), "%s", path);
    getver = (CUresult (*)(int *))dlsym(h, "cuDriverGetVersion");
    gpa2 = (gpa_v2_fn)dlsym(h, "cuGetProcAddress_v2");
    gpa1 = gpa2 ? NULL : (gpa_v1_fn)dlsym(h, "cuGetProcAddress");
    if (!getver || (!gpa2 && !gpa1)) {
        load_fail(ENODEV, "%s: not a CUDA driver of 11.3 or later (no cuGetProcAddress)", path);
        return;
    }
    if ((r = getver(&t->driver_version)) != CUDA_SUCCESS) {
        load_fail(ENODEV, "%s: cuDriverGetVersion failed (%d)", path, (int)r);
        return;
    }
    if (t->driver_version < GR_CUDA_MIN_DRIVER) {
        load_fail(ENODEV, "%s: CUDA driver %d.%d is too old (11.3 or later needed)", path,
                  t->driver_version / 1000, t->driver_version % 1000 / 10);
        return;
    }
    abi = t->driver_version < GR_CUDA_ABI ? t->driver_version : GR_CUDA_ABI;
#define GR_CUDA_RESOLVE(name, args)                                                  \
    {                                                                                \
        void *fn = NULL;                                                             \
        CUdriverProcAddressQueryResult st = 0;                                       \
        r = gpa2 ? gpa2(#name, &fn, abi, CU_GET_PROC_ADDRESS_DEFAULT, &st)           \
                 : gpa1(#name, &fn, abi, CU_GET_PROC_ADDRESS_DEFAULT);               \
        if (r != CUDA_SUCCESS || !fn) {                                              \
            load_fail(ENOSYS, "%s: the driver has no %s for CUDA %d (%d)", path, #name, \
                      abi, (int)r);                                                  \
            return;                                                                  \
        }                                                                            \
        memcpy(&t->name, &fn, sizeof(fn));                                           \
    }
    GR_CUDA_FUNCS(GR_CUDA_RESOLVE)
#undef GR_CUDA_RESOLVE
    r = t->cuInit(0);
    if (r != CUDA_SUCCESS) {
        load_fail(ENODEV, "no usable GPU: cuInit: %s", gr__cuda_strerror(t, r, eb, sizeof(eb)));
        return;
    }
    t->ndevices = 0;                    /* left untouched on error (facts.md) */
    r = t->cuDeviceGetCount(&t->ndevices);
    if (r != CUDA_SUCCESS || t->ndevices <= 0) {
        load_fail(ENODEV, "no CUDA device (cuDeviceGetCount: %s, %d devices)",
                  gr__cuda_strerror(t, r, eb, sizeof(eb)), t->ndevices);
        return;
    }
    cuda_ok = t;
    cuda_err = "";
    cuda_errnum = 0;
}

const gr__cuda *gr__cuda_load(const char **err, int *errnum)
{
    pthread_once(&cuda_once, load_once);
    if (err)
        *err = cuda_err;
    if (errnum)
        *errnum = cuda_errnum;
    return cuda_ok;
}

int gr__cuda_errno(CUresult r)
{
    switch ((int)r) {
    case CUDA_SUCCESS:
        return 0;
    case CUDA_ERROR_OUT_OF_MEMORY:
        return ENOMEM;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_CONTEXT:
        return EINVAL;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_SYSTEM_NOT_READY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
        return ENODEV;
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NOT_PERMITTED:
        return ENOTSUP;
    case CUDA_ERROR_ILLEGAL_ADDRESS:
        return EFAULT;
    default:
        return EIO;
    }
}

const char *gr__cuda_strerror(const gr__cuda *cu, CUresult r, char *buf, size_t len)
{
    const char *name = NULL, *desc = NULL;

    if (cu) {
        if (cu->cuGetErrorName(r, &name) != CUDA_SUCCESS)
            name = NULL;
        if (cu->cuGetErrorString(r, &desc) != CUDA_SUCCESS)
            desc = NULL;
    }
    if (name && desc)
        snprintf(buf, len, "%s (%s)", name, desc);
    else
        snprintf(buf, len, "CUDA error %d", (int)r);
    return buf;
}

static pthread_once_t cufile_once = PTHREAD_ONCE_INIT;
static int cufile_found;
static char cufile_what[384];

static void cufile_once_fn(void)
{
    const char *path = getenv("GRANARY_LIBCUFILE");
    void *h;

    if (!path || !*path)
        path = "libcufile.so.0";
    h = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
    if (h) {
        cufile_found = 1;
        snprintf(cufile_what, sizeof(cufile_what), "%s found (detected only: this libgranary "
                 "reads NVMe-tier chunks through the DRAM arena)", path);
        return;                     /* kept loaded: cheap, and dlclose of CUDA libraries is unsafe */
    }
    snprintf(cufile_what, sizeof(cufile_what), "not available: %s", dlerror());
}

int gr__cufile_probe(const char **what)
{
    pthread_once(&cufile_once, cufile_once_fn);
    if (what)
        *what = cufile_what;
    return cufile_found;
}
