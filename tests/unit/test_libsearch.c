/* tests/unit/test_libsearch.c — the places dpc looks for the CUDA libraries
 * (runtime/cuda/libsearch.h), in order, for environments laid out in a
 * temporary directory: DPC_LIB* alone when set; then the loader's search,
 * $CUDA_HOME/lib64 (/usr/local/cuda without it), the wheel directories of
 * each python3 on PATH (a venv's own prefix and the installation its
 * python3 links to; ~/.local), $CONDA_PREFIX/lib; the driver's directories
 * for libcuda alone. Pure: nothing is loaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/cuda/libsearch.h"
#include "tests/harness.h"

static char root[] = "/tmp/dpc-test-libsearch-XXXXXX";
static rt_lib_place pl[RT_LIB_MAX_PLACES];
static char saved_path[8192];

static void mkdirs(const char *rel) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/%s'", root, rel);
    if (system(cmd)) fprintf(stderr, "cannot %s\n", cmd);
}

static void python(const char *bin_dir) { /* an executable bin_dir/python3 */
    char path[1200];
    mkdirs(bin_dir);
    snprintf(path, sizeof path, "%s/%s/python3", root, bin_dir);
    FILE *f = fopen(path, "w");
    if (f) fputs("#!/bin/sh\nexit 1\n", f), fclose(f);
    chmod(path, 0755);
}

/* Index of the place whose path ends in tail (after root), or -1. */
static int find(int n, const char *tail) {
    char want[1200];
    snprintf(want, sizeof want, "%s/%s", root, tail);
    for (int i = 0; i < n; i++)
        if (!strcmp(pl[i].path, want)) return i;
    return -1;
}

static void env(const char *name, const char *rel) {
    char v[1200];
    snprintf(v, sizeof v, "%s/%s", root, rel);
    setenv(name, v, 1);
}

TEST(set_up) {
    CHECK(mkdtemp(root) != NULL);
    python("venv/bin");
    mkdirs("venv/lib/python3.12/site-packages");
    python("base/bin"); /* the installation the venv's python3 links to */
    mkdirs("base/lib/python3.9/site-packages");
    python("other/bin");
    mkdirs("other/lib/python3.11/site-packages");
    mkdirs("home/.local/lib/python3.10/site-packages");
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/base/bin/python3", root);
    snprintf(b, sizeof b, "%s/venv/bin/python3", root);
    unlink(b);
    CHECK(symlink(a, b) == 0);
    snprintf(saved_path, sizeof saved_path, "%s",
             getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    char path[4000];
    snprintf(path, sizeof path, "%s/venv/bin:%s/nowhere:%s/other/bin:%s/venv/bin", root, root, root,
             root);
    setenv("PATH", path, 1);
    env("HOME", "home");
    env("CUDA_HOME", "cuda");
    env("CONDA_PREFIX", "conda");
    unsetenv("DPC_LIBCUBLAS");
    unsetenv("DPC_LIBCUDA");
}

TEST(site_packages_in_path_order_once_each) {
    char(*dirs)[RT_LIB_PATH_MAX] = calloc(16, RT_LIB_PATH_MAX);
    char(*via)[RT_LIB_PATH_MAX] = calloc(16, RT_LIB_PATH_MAX);
    int n = rt_lib_site_packages(dirs, via, 16);
    const char *want[] = {"venv/lib/python3.12/site-packages", "base/lib/python3.9/site-packages",
                          "other/lib/python3.11/site-packages",
                          "home/.local/lib/python3.10/site-packages"};
    CHECK_MSG(n == 4, "%d site-packages", n);
    for (int i = 0; i < 4 && i < n; i++) {
        char w[1200];
        snprintf(w, sizeof w, "%s/%s", root, want[i]);
        CHECK_STR(dirs[i], w);
    }
    if (n >= 4) {
        CHECK(strstr(via[0], "python3 ") && strstr(via[0], "/venv/bin/python3"));
        CHECK(strstr(via[1], "/venv/bin/python3") != NULL); /* found through the venv's link */
        CHECK_STR(via[3], "~/.local");
    }
    free(dirs);
    free(via);
}

TEST(the_order_of_the_rules) {
    int n = rt_lib_places(&rt_lib_descs[RT_LIB_CUBLAS], pl, RT_LIB_MAX_PLACES);
    CHECK(n > 5);
    CHECK(pl[0].rule == RT_LIB_RULE_LOADER);
    CHECK_STR(pl[0].path, "libcublas.so.13");
    int home = find(n, "cuda/lib64/libcublas.so.13");
    int cu13 = find(n, "venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13");
    int old = find(n, "venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.13");
    int base = find(n, "base/lib/python3.9/site-packages/nvidia/cu13/lib/libcublas.so.13");
    int local =
        find(n, "home/.local/lib/python3.10/site-packages/nvidia/cublas/lib/libcublas.so.13");
    int conda = find(n, "conda/lib/libcublas.so.13");
    CHECK_MSG(home == 1 && pl[home].rule == RT_LIB_RULE_CUDA_HOME, "CUDA_HOME at %d", home);
    CHECK(cu13 == 2 && old == 3 && base > old && local > base && conda == n - 1);
    CHECK(cu13 >= 0 && pl[cu13].rule == RT_LIB_RULE_WHEEL);
    CHECK(conda >= 0 && pl[conda].rule == RT_LIB_RULE_CONDA &&
          strstr(pl[conda].via, "$CONDA_PREFIX="));
    for (int i = 0; i < n; i++) CHECK_MSG(pl[i].rule != RT_LIB_RULE_DRIVER_DIR, "%s", pl[i].path);
    /* NCCL's and cuDNN's wheels have their own directories. */
    n = rt_lib_places(&rt_lib_descs[RT_LIB_NCCL], pl, RT_LIB_MAX_PLACES);
    CHECK(find(n, "venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2") == 2);
    n = rt_lib_places(&rt_lib_descs[RT_LIB_CUDNN], pl, RT_LIB_MAX_PLACES);
    CHECK(find(n, "venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9") == 2);
    n = rt_lib_places(&rt_lib_descs[RT_LIB_NVRTC], pl, RT_LIB_MAX_PLACES);
    CHECK(find(n, "venv/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.13") == 3);
}

TEST(the_environment_variable_alone) {
    setenv("DPC_LIBCUBLAS", "/opt/x/libcublas.so.13", 1);
    int n = rt_lib_places(&rt_lib_descs[RT_LIB_CUBLAS], pl, RT_LIB_MAX_PLACES);
    CHECK(n == 1 && pl[0].rule == RT_LIB_RULE_ENV);
    CHECK_STR(pl[0].path, "/opt/x/libcublas.so.13");
    CHECK_STR(pl[0].via, "$DPC_LIBCUBLAS");
    setenv("DPC_LIBCUBLAS", "", 1); /* empty: as if unset */
    CHECK(rt_lib_places(&rt_lib_descs[RT_LIB_CUBLAS], pl, RT_LIB_MAX_PLACES) > 1);
    unsetenv("DPC_LIBCUBLAS");
}

TEST(the_driver_in_its_directories) {
    unsetenv("CONDA_PREFIX");
    int n = rt_lib_places(&rt_lib_descs[RT_LIB_CUDA], pl, RT_LIB_MAX_PLACES);
    CHECK(n >= 5 && pl[0].rule == RT_LIB_RULE_LOADER);
    CHECK_STR(pl[0].path, "libcuda.so.1");
    int wsl = 0;
    for (int i = 1; i < n; i++) {
        CHECK_MSG(pl[i].rule == RT_LIB_RULE_DRIVER_DIR, "%s", pl[i].path);
        wsl |= !strcmp(pl[i].path, "/usr/lib/wsl/lib/libcuda.so.1");
    }
    CHECK(wsl);
}

TEST(cuda_home_unset_is_usr_local_cuda) {
    unsetenv("CUDA_HOME");
    int n = rt_lib_places(&rt_lib_descs[RT_LIB_NVRTC], pl, RT_LIB_MAX_PLACES);
    CHECK(n > 1 && pl[1].rule == RT_LIB_RULE_CUDA_HOME);
    CHECK_STR(pl[1].path, "/usr/local/cuda/lib64/libnvrtc.so.13");
    CHECK(strstr(pl[1].via, "unset") != NULL);
}

TEST(clean_up) {
    setenv("PATH", saved_path, 1);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
}

int main(void) {
    RUN(set_up);
    RUN(site_packages_in_path_order_once_each);
    RUN(the_order_of_the_rules);
    RUN(the_environment_variable_alone);
    RUN(the_driver_in_its_directories);
    RUN(cuda_home_unset_is_usr_local_cuda);
    RUN(clean_up);
    return harness_done();
}
