/* tests/unit/test_cache.c — runtime/device/cache.c: the directory checked
 * by rt_cache_open is the one used, even when its path is swapped for a
 * link to another folder holding an object and a matching record under the
 * predictable name (that object's constructor writes a marker, as it does
 * when a fresh walk follows the link: the control); the
 * same bytes loaded twice give one handle; a truncated object with a
 * matching record is compiled again, not mapped; reads take only regular
 * files this user owns, never through a link. */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/device/device.h"
#include "base/sha256.h"
#include "tests/harness.h"

static char dir[256], err[4096];
static const char src[] = "int dpc_cache_probe(void) { return 7; }\n";

static const char *at(const char *name) {
    static char buf[4][512];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", dir, name);
    return p;
}

static void put(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) fwrite(data, 1, n, f), fclose(f);
}

/* Opens the cache and loads src: the handle, *name the object's file name. */
static void *load(int *hit, char *name, size_t n) {
    rt_cache c;
    char *so = NULL;
    void *h = rt_cache_open(&c, err, sizeof err)
                  ? NULL
                  : rt_cache_load_c(&c, src, RTLD_NOW | RTLD_LOCAL, hit, &so, err, sizeof err);
    rt_cache_close(&c);
    if (so && name) snprintf(name, n, "%s", strrchr(so, '/') + 1);
    free(so);
    return h;
}

static int probe(void *h) {
    int (*f)(void) = h ? (int (*)(void))dlsym(h, "dpc_cache_probe") : NULL;
    return f ? f() : -1;
}

TEST(a_swap_after_the_check_is_not_seen) {
    CHECK(mkdir(at("shared"), 0755) == 0 && mkdir(at("evil"), 0700) == 0);
    setenv("DPC_CACHE_DIR", at("shared/cache"), 1);
    int hit = -1;
    char name[256] = "";
    void *first = load(&hit, name, sizeof name);
    CHECK_MSG(first && hit == 0 && probe(first) == 7, "%s", err);
    /* The attacker's object under the same name, its record beside it. */
    char evil_c[1024], cmd[2048], evil_so[512], rec[600];
    snprintf(evil_c, sizeof evil_c,
             "#include <stdio.h>\n"
             "__attribute__((constructor)) static void evil(void) {\n"
             "    FILE *f = fopen(\"%s\", \"w\"); if (f) fclose(f); }\n"
             "int dpc_cache_probe(void) { return 666; }\n",
             at("pwned"));
    put(at("evil.c"), evil_c, strlen(evil_c));
    snprintf(evil_so, sizeof evil_so, "%s", at("evil"));
    snprintf(evil_so + strlen(evil_so), sizeof evil_so - strlen(evil_so), "/%s", name);
    snprintf(cmd, sizeof cmd, "cc -shared -fPIC -o '%s' '%s'", evil_so, at("evil.c"));
    CHECK(system(cmd) == 0);
    FILE *f = fopen(evil_so, "rb");
    static unsigned char bytes[1 << 20];
    size_t n = f ? fread(bytes, 1, sizeof bytes, f) : 0;
    if (f) fclose(f);
    unsigned char d[32];
    char hex[66];
    base_sha256(bytes, n, d);
    base_sha256_hex(d, hex);
    strcat(hex, "\n");
    snprintf(rec, sizeof rec, "%s.sha256", evil_so);
    put(rec, hex, 65);

    /* Checked, then swapped for a link to the attacker's folder. */
    rt_cache c;
    CHECK_MSG(rt_cache_open(&c, err, sizeof err) == 0, "%s", err);
    CHECK(rename(at("shared/cache"), at("shared/cache.old")) == 0);
    CHECK(symlink(at("evil"), at("shared/cache")) == 0);
    char *so = NULL;
    void *h = rt_cache_load_c(&c, src, RTLD_NOW | RTLD_LOCAL, &hit, &so, err, sizeof err);
    rt_cache_close(&c);
    CHECK_MSG(h && hit == 1, "%s", err);
    CHECK(probe(h) == 7);
    CHECK(access(at("pwned"), F_OK) != 0);
    /* The same bytes again: one memfd, so dlopen hands back the same object. */
    CHECK(h == first);
    free(so);
    /* The control: a fresh walk sees the link, and this one is this
     * user's, so it is followed and the planted object is what loads; the
     * setup above is a real attack. */
    void *planted = load(&hit, NULL, 0);
    CHECK(planted && probe(planted) == 666 && access(at("pwned"), F_OK) == 0);
    unlink(at("pwned"));
    /* Another user's link is refused. */
    if (geteuid() == 0) {
        CHECK(lchown(at("shared/cache"), 65534, 65534) == 0);
        CHECK(rt_cache_open(&c, err, sizeof err) == -1);
        CHECK_MSG(strstr(err, "is a symbolic link owned by uid 65534"), "%s", err);
    }
    CHECK(access(at("pwned"), F_OK) != 0);
    if (planted) dlclose(planted);
    if (h) dlclose(h);
    if (first) dlclose(first);
}

TEST(a_truncated_object_with_its_record_is_compiled_again) {
    CHECK(mkdir(at("trunc"), 0700) == 0);
    setenv("DPC_CACHE_DIR", at("trunc"), 1);
    int hit = -1;
    char name[256] = "", path[512], rec[600];
    void *h = load(&hit, name, sizeof name);
    CHECK_MSG(h, "%s", err);
    snprintf(path, sizeof path, "%s/%s", at("trunc"), name);
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_size > 4096);
    static unsigned char bytes[4096];
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(bytes, 1, sizeof bytes, f) : 0;
    if (f) fclose(f);
    CHECK(n == sizeof bytes);
    put(path, bytes, n);
    unsigned char d[32];
    char hex[66];
    base_sha256(bytes, n, d);
    base_sha256_hex(d, hex);
    strcat(hex, "\n");
    snprintf(rec, sizeof rec, "%s.sha256", path);
    put(rec, hex, 65);
    void *again = load(&hit, NULL, 0);
    CHECK_MSG(again && hit == 0 && probe(again) == 7, "%s", err);
    CHECK(stat(path, &st) == 0 && st.st_size > 4096);
    if (h) dlclose(h);
    if (again) dlclose(again);
}

TEST(reads_take_regular_files_of_this_user_only) {
    CHECK(mkdir(at("reads"), 0700) == 0);
    setenv("DPC_CACHE_DIR", at("reads"), 1);
    rt_cache c;
    CHECK_MSG(rt_cache_open(&c, err, sizeof err) == 0, "%s", err);
    CHECK(rt_cache_write(&c, "plain", "abc", 3, err, sizeof err) == 0);
    size_t n = 0;
    unsigned char *b = rt_cache_read(&c, "plain", &n);
    CHECK(b && n == 3 && !memcmp(b, "abc", 4));
    free(b);
    CHECK(symlink("plain", at("reads/link")) == 0);
    CHECK(rt_cache_read(&c, "link", &n) == NULL);
    CHECK(mkfifo(at("reads/fifo"), 0600) == 0);
    CHECK(rt_cache_read(&c, "fifo", &n) == NULL); /* at once, not blocked */
    if (geteuid() == 0) {
        put(at("reads/theirs"), "x", 1);
        CHECK(chown(at("reads/theirs"), 65534, 65534) == 0);
        CHECK(rt_cache_read(&c, "theirs", &n) == NULL);
    }
    rt_cache_close(&c);
}

int main(void) {
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/dpc-test-cache-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) return 1;
    RUN(a_swap_after_the_check_is_not_seen);
    RUN(a_truncated_object_with_its_record_is_compiled_again);
    RUN(reads_take_regular_files_of_this_user_only);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) return 1;
    return harness_done();
}
