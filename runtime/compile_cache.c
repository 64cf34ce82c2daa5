/* runtime/compile_cache.c — run the host compiler on generated C, cache the
 * result by content hash. See compile_cache.h. */
#include "runtime/compile_cache.h"

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/backend.h"
#include "runtime/check.h"

extern char **environ;

uint64_t rt_hash(uint64_t h, const void *data, size_t n) {
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* mkdir -p: creates each missing component of path. */
static int mkdirs(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST) return -1;
    return 0;
}

char *rt_cache_dir(char *err, size_t errlen) {
    const char *env = getenv("DPC_CACHE_DIR");
    char path[4096];
    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
    } else {
        const char *home = getenv("HOME");
        if (!home || !*home) home = "/tmp";
        snprintf(path, sizeof path, "%s/.cache/dpc", home);
    }
    if (mkdirs(path)) {
        snprintf(err, errlen, "cannot create the kernel cache directory %s: %s", path,
                 strerror(errno));
        return NULL;
    }
    char *out = strdup(path);
    RT_CHECK_ALLOC(out);
    return out;
}

static const char *compiler(void) {
    const char *cc = getenv("CC");
    return cc && *cc ? cc : "cc";
}

/* The CPU model line: a module built with -march=native on one machine may
 * not run on another that shares the cache directory. */
static uint64_t hash_cpu(uint64_t h) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return h;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) || !strncmp(line, "flags", 5)) {
            h = rt_hash(h, line, strlen(line));
            if (line[0] == 'f') break;
        }
    fclose(f);
    return h;
}

/* Appends s to the command in single quotes (shell-safe). */
static void quote(char *cmd, size_t n, const char *s) {
    size_t len = strlen(cmd);
    if (len + 1 < n) cmd[len++] = '\'';
    for (; *s && len + 5 < n; s++) {
        if (*s == '\'') {
            memcpy(cmd + len, "'\\''", 4);
            len += 4;
        } else {
            cmd[len++] = *s;
        }
    }
    if (len + 1 < n) cmd[len++] = '\'';
    cmd[len] = 0;
}

static int write_file(const char *path, const char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    int rc = fclose(f);
    return w == n && rc == 0 ? 0 : -1;
}

/* A name no other thread or process uses at the same time. */
static void temp_name(char *out, size_t n, const char *base, const char *ext) {
    static unsigned counter;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    unsigned c = counter++;
    pthread_mutex_unlock(&mu);
    snprintf(out, n, "%s.tmp%ld.%u%s", base, (long)getpid(), c, ext);
}

static int run_shell(const char *cmd) {
    pid_t pid;
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    int rc = posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ);
    if (rc) {
        errno = rc;
        RT_SYS_FAIL("posix_spawn /bin/sh");
        return -1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            RT_SYS_FAIL("waitpid");
            return -1;
        }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char *read_text(const char *path, size_t max) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(max + 1);
    RT_CHECK_ALLOC(buf);
    size_t n = fread(buf, 1, max, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

char *rt_cache_compile_c(const char *source, int *hit, char *err, size_t errlen) {
    if (hit) *hit = 0;
    char *dir = rt_cache_dir(err, errlen);
    if (!dir) return NULL;
    const char *cc = compiler();
    uint64_t h = rt_hash(RT_HASH_INIT, cc, strlen(cc) + 1);
    h = rt_hash(h, RT_CC_FLAGS, sizeof RT_CC_FLAGS);
    h = hash_cpu(h);
    size_t srclen = strlen(source);
    h = rt_hash(h, source, srclen);
    /* A second, differently seeded hash makes a collision astronomically
     * unlikely without a cryptographic hash. */
    uint64_t h2 = rt_hash(h ^ 0x9e3779b97f4a7c15ull, source, srclen);
    char base[4200], so[4300], c_path[4300];
    snprintf(base, sizeof base, "%s/dpc-%016" PRIx64 "%08" PRIx32, dir, h, (uint32_t)h2);
    snprintf(so, sizeof so, "%s.so", base);
    snprintf(c_path, sizeof c_path, "%s.c", base);
    free(dir);
    if (access(so, R_OK) == 0) {
        if (hit) *hit = 1;
        char *out = strdup(so);
        RT_CHECK_ALLOC(out);
        return out;
    }
    char tmp_c[4400], tmp_so[4400], tmp_log[4400];
    temp_name(tmp_c, sizeof tmp_c, base, ".c");
    temp_name(tmp_so, sizeof tmp_so, base, ".so");
    temp_name(tmp_log, sizeof tmp_log, base, ".log");
    if (write_file(tmp_c, source, srclen) || rename(tmp_c, c_path)) {
        snprintf(err, errlen, "cannot write kernel source %s: %s", c_path, strerror(errno));
        unlink(tmp_c);
        return NULL;
    }
    char cmd[16384] = "";
    snprintf(cmd, sizeof cmd, "%s %s -o ", cc, RT_CC_FLAGS);
    quote(cmd, sizeof cmd, tmp_so);
    strncat(cmd, " ", sizeof cmd - strlen(cmd) - 1);
    quote(cmd, sizeof cmd, c_path);
    strncat(cmd, " 2>", sizeof cmd - strlen(cmd) - 1);
    quote(cmd, sizeof cmd, tmp_log);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = run_shell(cmd);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc != 0) {
        char *log = read_text(tmp_log, 4000);
        snprintf(err, errlen, "compiling %s failed (%s %s):\n%s", c_path, cc, RT_CC_FLAGS,
                 log && *log ? log : "(no compiler output)");
        free(log);
        unlink(tmp_log);
        unlink(tmp_so);
        return NULL;
    }
    unlink(tmp_log);
    if (rename(tmp_so, so)) {
        snprintf(err, errlen, "cannot move %s into place: %s", tmp_so, strerror(errno));
        unlink(tmp_so);
        return NULL;
    }
    if (rt_debug_level() >= 1)
        fprintf(stderr, "dpc: cpu: compiled %s in %.2f s\n", so,
                (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    char *out = strdup(so);
    RT_CHECK_ALLOC(out);
    return out;
}
