/* runtime/cuda/info.c — `dprun --device cuda --info`: each CUDA library
 * dpc loads (where from, which rule, which version, or where it looked and
 * which package provides it), NVRTC's architectures, and the devices. See
 * cuda.h. */
#include "runtime/cuda/cuda.h"

#ifdef DPC_HAVE_CUDA

#include <stdio.h>

#include "runtime/cuda/loader.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/env.h"

/* One device's line; 0, or -1 when the driver cannot describe it. */
static int print_device(int ordinal, FILE *out) {
    CUdevice dev;
    char name[128] = "", why[512];
    int major = 0, minor = 0, sms = 0;
    size_t mem = 0;
    if (cuTry(rt_cu.cuDeviceGet(&dev, ordinal), why, sizeof why) ||
        cuTry(rt_cu.cuDeviceGetName(name, (int)sizeof name, dev), why, sizeof why) ||
        cuTry(rt_cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
              why, sizeof why) ||
        cuTry(rt_cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
              why, sizeof why) ||
        cuTry(rt_cu.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), why,
              sizeof why) ||
        cuTry(rt_cu.cuDeviceTotalMem(&mem, dev), why, sizeof why)) {
        fprintf(out, "device %d: %s\n", ordinal, why);
        return -1;
    }
    fprintf(out, "device %d: %s, compute capability %d.%d (sm_%d%d), %d SMs, %.1f GiB\n", ordinal,
            name, major, minor, major, minor, sms, (double)mem / (1024.0 * 1024 * 1024));
    return 0;
}

int rt_cuda_info(FILE *out) {
    int ok = 1;
    fprintf(out, "CUDA libraries (found in this order: DPC_LIB*, the loader's search, "
                 "$CUDA_HOME/lib64, pip wheels, $CONDA_PREFIX/lib, driver directories):\n");
    for (int id = 0; id < RT_LIB_COUNT; id++)
        if (rt_lib_report((rt_lib_id)id, out) && rt_lib_descs[id].required) ok = 0;
    int archs[64];
    int n = rt_nvrtc_archs(archs, 64);
    if (n) {
        fprintf(out, "NVRTC architectures:");
        for (int i = 0; i < n; i++) fprintf(out, " sm_%d", archs[i]);
        fprintf(out, "\n");
    }
    rt_lib_status st;
    rt_lib_status_get(RT_LIB_CUDA, &st);
    if (!st.loaded) {
        fprintf(out, "devices: none (no CUDA driver)\n");
        return 1;
    }
    int drv = 0;
    char why[512];
    if (cuTry(rt_cu.cuInit(0), why, sizeof why) ||
        cuTry(rt_cu.cuDriverGetVersion(&drv), why, sizeof why)) {
        fprintf(out, "devices: none (%s)\n", why);
        return 1;
    }
    int count = rt_cuda_device_count(why, sizeof why);
    fprintf(out, "driver: CUDA %d.%d, %d device%s%s%s\n", drv / 1000, drv % 1000 / 10, count,
            count == 1 ? "" : "s", count ? "" : ": ", count ? "" : why);
    if (count == 0) return 1;
    int pick = rt_env_int("DPC_CUDA_DEVICE", -1);
    if (pick >= count) {
        fprintf(out, "DPC_CUDA_DEVICE=%d: the driver sees devices 0 to %d\n", pick, count - 1);
        return 1;
    }
    for (int d = pick >= 0 ? pick : 0; d < (pick >= 0 ? pick + 1 : count); d++)
        if (print_device(d, out)) ok = 0;
    return ok ? 0 : 1;
}

#else
/* Without the cuda backend (CUDA=0) stubs.c answers. */
typedef int rt_cuda_info_unused;
#endif
