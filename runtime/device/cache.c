/* runtime/device/cache.c — run the host compiler on generated C, cache the
 * result by content hash. See device.h (the module cache). */
#include "runtime/device/device.h"
#include "ir/file.h"
#include "ir/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <pwd.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/check.h"
#include "runtime/clock.h"
#include "runtime/device/sha256.h"

extern char **environ;

/* mkdir -p: creates each missing component of path, private to its owner. */
static int mkdirs(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0700) && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0700) && errno != EEXIST) return -1;
    return 0;
}

/* The default directory: ~/.cache/dpc, HOME from the environment or, when
 * unset, the password database. Never a shared /tmp path another user
 * could have made first; /tmp/dpc-cache-UID only when the user has no home
 * at all, and then the ownership check below still applies. */
static void default_dir(char *path, size_t n) {
    const char *home = getenv("HOME");
    if (!home || !*home) {
        struct passwd *pw = getpwuid(geteuid());
        home = pw && pw->pw_dir && *pw->pw_dir ? pw->pw_dir : NULL;
    }
    if (home)
        snprintf(path, n, "%s/.cache/dpc", home);
    else
        snprintf(path, n, "/tmp/dpc-cache-%ld", (long)geteuid());
}

char *rt_cache_dir(char *err, size_t errlen) {
    const char *env = getenv("DPC_CACHE_DIR");
    char path[4096];
    if (env && *env)
        snprintf(path, sizeof path, "%s", env);
    else
        default_dir(path, sizeof path);
    if (mkdirs(path)) {
        ir_fail(err, errlen, "cannot create the kernel cache directory %s: %s", path,
                strerror(errno));
        return NULL;
    }
    /* What is in this directory gets dlopen'ed: it is the security boundary,
     * so it must be ours and no one else may write to it. */
    struct stat st;
    if (stat(path, &st) || !S_ISDIR(st.st_mode)) {
        ir_fail(err, errlen, "kernel cache %s is not a directory", path);
        return NULL;
    }
    if (st.st_uid != geteuid()) {
        ir_fail(err, errlen,
                "kernel cache directory %s belongs to uid %ld, not to this user (uid %ld); "
                "refusing to load kernels from it (set DPC_CACHE_DIR to a directory of your own)",
                path, (long)st.st_uid, (long)geteuid());
        return NULL;
    }
    if (st.st_mode & 022) {
        ir_fail(err, errlen,
                "kernel cache directory %s is writable by %s (mode %04o); refusing to load "
                "kernels from it (chmod go-w it, or set DPC_CACHE_DIR)",
                path, st.st_mode & 002 ? "everyone" : "its group", (unsigned)(st.st_mode & 07777));
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
            h = ir_fnv1a(h, line, strlen(line));
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

unsigned char *rt_cache_read(const char *path, size_t *len) {
    char err[64]; /* why does not matter: a cache miss */
    return ir_file_read(path, (size_t)1 << 30, len, err, sizeof err);
}

static void sum_path(char *out, size_t n, const char *obj) { snprintf(out, n, "%s.sha256", obj); }

int rt_cache_record(const char *obj, const void *data, size_t n) {
    unsigned char d[32];
    char hex[66], path[4400], why[256];
    rt_sha256(data, n, d);
    rt_sha256_hex(d, hex);
    strcat(hex, "\n");
    sum_path(path, sizeof path, obj);
    return ir_file_write_all(path, hex, 65, why, sizeof why);
}

int rt_cache_matches(const char *obj, const void *data, size_t n) {
    char path[4400];
    sum_path(path, sizeof path, obj);
    size_t got = 0;
    unsigned char *want = rt_cache_read(path, &got);
    if (!want) return 0;
    unsigned char d[32];
    char hex[65];
    rt_sha256(data, n, d);
    rt_sha256_hex(d, hex);
    int match = got == 65 && !memcmp(want, hex, 64) && want[64] == '\n';
    free(want);
    return match ? 1 : -1;
}

void rt_cache_rebuild_notice(const char *obj, int match) {
    fprintf(stderr, "dpc: kernel cache: %s %s; compiling it again\n", obj,
            match < 0 ? "does not match the checksum recorded when it was compiled (truncated or "
                        "corrupted)"
                      : "has no recorded checksum (not written by this dpc)");
}

void rt_cache_base(char *base, size_t n, const char *dir, const char *kind, uint64_t h,
                   const char *source) {
    size_t srclen = strlen(source);
    h = ir_fnv1a(h, source, srclen);
    /* A second, differently seeded hash makes a collision astronomically
     * unlikely without a cryptographic hash. */
    uint64_t h2 = ir_fnv1a(h ^ 0x9e3779b97f4a7c15ull, source, srclen);
    snprintf(base, n, "%s/dpc2-%s%016" PRIx64 "%08" PRIx32, dir, kind, h, (uint32_t)h2);
}

char *rt_cache_compile_c(const char *source, int *hit, char *err, size_t errlen) {
    if (hit) *hit = 0;
    char *dir = rt_cache_dir(err, errlen);
    if (!dir) return NULL;
    const char *cc = compiler();
    uint64_t h = ir_fnv1a_str(IR_FNV1A_INIT, cc);
    h = ir_fnv1a(h, RT_CC_FLAGS, sizeof RT_CC_FLAGS);
    h = hash_cpu(h);
    char base[4200], so[4300], c_path[4300];
    rt_cache_base(base, sizeof base, dir, "", h, source);
    snprintf(so, sizeof so, "%s.so", base);
    snprintf(c_path, sizeof c_path, "%s.c", base);
    free(dir);
    /* A cached object is used only when it is, byte for byte, what was
     * compiled for it: a truncated one (a 1000-byte prefix of a good .so
     * gave SIGBUS in dlopen) is compiled again. What keeps others' code out
     * is rt_cache_dir's check of the directory, not this. */
    size_t have_len = 0;
    unsigned char *have = rt_cache_read(so, &have_len);
    if (have) {
        int match = rt_cache_matches(so, have, have_len);
        free(have);
        if (match == 1) {
            if (hit) *hit = 1;
            char *out = strdup(so);
            RT_CHECK_ALLOC(out);
            return out;
        }
        rt_cache_rebuild_notice(so, match);
    }
    char tmp_so[4400], tmp_log[4400], why[1024];
    temp_name(tmp_so, sizeof tmp_so, base, ".so");
    temp_name(tmp_log, sizeof tmp_log, base, ".log");
    if (ir_file_write_all(c_path, source, strlen(source), why, sizeof why)) {
        ir_fail(err, errlen, "cannot write kernel source: %s", why);
        return NULL;
    }
    char cmd[16384] = "";
    snprintf(cmd, sizeof cmd, "%s %s -o ", cc, RT_CC_FLAGS);
    quote(cmd, sizeof cmd, tmp_so);
    strncat(cmd, " ", sizeof cmd - strlen(cmd) - 1);
    quote(cmd, sizeof cmd, c_path);
    strncat(cmd, " 2>", sizeof cmd - strlen(cmd) - 1);
    quote(cmd, sizeof cmd, tmp_log);
    double t0 = rt_now();
    int rc = run_shell(cmd);
    double seconds = rt_now() - t0;
    if (rc != 0) {
        char *log = read_text(tmp_log, 4000);
        ir_fail(err, errlen, "compiling %s failed (%s %s):\n%s", c_path, cc, RT_CC_FLAGS,
                log && *log ? log : "(no compiler output)");
        free(log);
        unlink(tmp_log);
        unlink(tmp_so);
        return NULL;
    }
    unlink(tmp_log);
    /* The checksum first, then the object: a reader that finds the object
     * finds its checksum. */
    size_t built_len = 0;
    unsigned char *built = rt_cache_read(tmp_so, &built_len);
    if (!built || rt_cache_record(so, built, built_len)) {
        ir_fail(err, errlen, "cannot record the checksum of %s: %s", so, strerror(errno));
        free(built);
        unlink(tmp_so);
        return NULL;
    }
    free(built);
    if (rename(tmp_so, so)) {
        ir_fail(err, errlen, "cannot move %s into place: %s", tmp_so, strerror(errno));
        unlink(tmp_so);
        return NULL;
    }
    if (rt_debug_level() >= 1) fprintf(stderr, "dpc: cpu: compiled %s in %.2f s\n", so, seconds);
    char *out = strdup(so);
    RT_CHECK_ALLOC(out);
    return out;
}
