/* runtime/device/cache_dir.c — the module cache's directory (device.h):
 * which one (DPC_CACHE_DIR or ~/.cache/dpc), walked from "/" one name at a
 * time without following a link someone else owns, created 0700 where
 * missing, every directory on the way and the cache itself checked as
 * trusted; then kept open, so every later access is relative to it. */
#include "runtime/device/device.h"
#include "base/err.h"
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/trust.h"
#include "runtime/check.h"

#define SUFFIX "set DPC_CACHE_DIR to a directory of your own"

/* The default directory: ~/.cache/dpc, HOME from the environment or, when
 * unset, the password database. Never a shared /tmp path another user
 * could have made first; /tmp/dpc-cache-UID only when the user has no home
 * at all, and then the ownership checks below still apply. */
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

/* The cache directory itself: this user's, and no one else may write it. */
static int check_final(const char *dir, const struct stat *st, char *err, size_t errlen) {
    uid_t me = geteuid();
    unsigned mode = (unsigned)(st->st_mode & 07777);
    if (st->st_uid != me)
        return base_fail(
            err, errlen,
            "kernel cache directory %s belongs to uid %ld (mode %04o), not to this user "
            "(uid %ld); refusing to load kernels from it (%s)",
            dir, (long)st->st_uid, mode, (long)me, SUFFIX);
    if (mode & 022)
        return base_fail(
            err, errlen,
            "kernel cache directory %s is writable by %s (mode %04o); refusing to load "
            "kernels from it (chmod go-w it, or %s)",
            dir, mode & 002 ? "everyone" : "its group", mode, SUFFIX);
    return 0;
}

void rt_cache_close(rt_cache *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

/* The directory named: DPC_CACHE_DIR, else the default, without trailing
 * slashes (c->path). */
static int name_dir(rt_cache *c, char *err, size_t errlen) {
    const char *env = getenv("DPC_CACHE_DIR");
    if (env && *env) {
        if (snprintf(c->path, sizeof c->path, "%s", env) >= (int)sizeof c->path)
            return base_fail(err, errlen, "DPC_CACHE_DIR is longer than %zu bytes",
                             sizeof c->path - 1);
    } else {
        default_dir(c->path, sizeof c->path);
    }
    for (size_t n = strlen(c->path); n > 1 && c->path[n - 1] == '/';) c->path[--n] = 0;
    return 0;
}

/* Walks the path from "/" one name at a time (base/trust.h: every
 * directory on the way under the ownership rule, a link followed only when
 * root or this user owns it, a missing name created 0700) and keeps the
 * last descriptor, reopened readable: the compiler runs in it (fchdir),
 * every later access is relative to it, and no rename or link along the
 * path, after the walk, changes which directory that is. Then the cache
 * itself is checked: this user's, and no one else may write it. */
int rt_cache_open(rt_cache *c, char *err, size_t errlen) {
    c->fd = -1;
    if (name_dir(c, err, errlen)) return -1;
    char what[sizeof c->path + 32], at[PATH_MAX];
    snprintf(what, sizeof what, "kernel cache directory %s", c->path);
    base_trust_how how = {.what = what,
                          .path = c->path,
                          .through = "refusing to load kernels through it",
                          .hint = " (" SUFFIX ")",
                          .create = 1};
    int dir;
    if (base_trust_walk_path(&dir, at, sizeof at, c->path, &how, err, errlen)) return -1;
    struct stat st;
    c->fd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(dir);
    if (c->fd < 0 || fstat(c->fd, &st)) {
        base_fail(err, errlen, "kernel cache directory %s: %s: %s", c->path, at, strerror(errno));
        rt_cache_close(c);
        return -1;
    }
    if (check_final(c->path, &st, err, errlen)) {
        rt_cache_close(c);
        return -1;
    }
    return 0;
}

char *rt_cache_path(const rt_cache *c, const char *name) {
    size_t n = strlen(c->path) + strlen(name) + 2;
    char *out = malloc(n);
    RT_CHECK_ALLOC(out);
    base_path_join(out, n, c->path, name);
    return out;
}
