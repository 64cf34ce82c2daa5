/* ir/file.c — atomic replacement of files and bounded reads (file.h). */
#include "ir/file.h"
#include "ir/err.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct ir_file {
    int fd;
    int failed;        /* errno of the first failed write, or 0 */
    char *target;      /* the file to replace (a symlink resolved) */
    char *tmp;         /* the temporary beside it */
    const char *shown; /* the path as the caller named it, for messages */
    char shown_buf[1];
};

static const char *kind_of(mode_t m) {
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "of another type";
}

/* The file to write for path: path itself, or what the symlink path
 * names. *exists and *mode describe it. Heap string or NULL + message. */
static char *resolve_target(const char *path, int *exists, mode_t *mode, char *err, size_t errlen) {
    struct stat sb;
    *exists = 0, *mode = 0;
    if (!*path) {
        ir_fail(err, errlen, "an empty file name");
        return NULL;
    }
    if (lstat(path, &sb) != 0) {
        if (errno != ENOENT) {
            ir_fail(err, errlen, "%s: %s", path, strerror(errno));
            return NULL;
        }
        char *t = strdup(path);
        if (!t) ir_fail(err, errlen, "%s: out of memory", path);
        return t;
    }
    char *t;
    if (S_ISLNK(sb.st_mode)) {
        /* The user named the link: write through it, to the file it names. */
        t = realpath(path, NULL);
        if (!t) {
            ir_fail(err, errlen, "%s: a symbolic link that cannot be followed: %s", path,
                    strerror(errno));
            return NULL;
        }
        if (stat(t, &sb) != 0) {
            ir_fail(err, errlen, "%s: %s", path, strerror(errno));
            free(t);
            return NULL;
        }
    } else {
        t = strdup(path);
        if (!t) {
            ir_fail(err, errlen, "%s: out of memory", path);
            return NULL;
        }
    }
    if (!S_ISREG(sb.st_mode)) {
        ir_fail(err, errlen, "%s: not a regular file (%s); refusing to replace it", path,
                kind_of(sb.st_mode));
        free(t);
        return NULL;
    }
    *exists = 1, *mode = sb.st_mode;
    return t;
}

/* A fresh O_CREAT|O_EXCL temporary beside target: O_EXCL fails on any
 * existing name, a planted symlink included, and the name is random. */
static int make_temp(const char *target, mode_t mode, char **tmp_out) {
    size_t len = strlen(target) + 32;
    char *tmp = malloc(len);
    if (!tmp) {
        errno = ENOMEM;
        return -1;
    }
    static unsigned long counter;
    uint64_t x = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)tmp;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    x ^= (uint64_t)ts.tv_nsec << 20 ^ (uint64_t)ts.tv_sec;
    int fd = -1;
    for (int i = 0; i < 100 && fd < 0; i++) {
        x += __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) * 0xD1B54A32D192ED03ull;
        x ^= x >> 29, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 32;
        snprintf(tmp, len, "%s.tmp.%012llx", target, (unsigned long long)(x & 0xffffffffffffull));
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        int e = errno;
        free(tmp);
        errno = e;
        return -1;
    }
    *tmp_out = tmp;
    return fd;
}

static char *dir_of(const char *path) {
    char *d = strdup(path);
    if (!d) return NULL;
    char *slash = strrchr(d, '/');
    if (!slash) {
        free(d);
        return strdup(".");
    }
    if (slash == d)
        slash[1] = 0;
    else
        *slash = 0;
    return d;
}

/* Makes the rename durable; best effort, as not every file system can. */
static void sync_dir(const char *path) {
    char *d = dir_of(path);
    if (!d) return;
    int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(d);
}

ir_file *ir_file_open(const char *path, char *err, size_t errlen) {
    int exists;
    mode_t mode;
    char *target = resolve_target(path, &exists, &mode, err, errlen);
    if (!target) return NULL;
    ir_file *f = calloc(1, sizeof *f + strlen(path));
    if (!f) {
        free(target);
        ir_fail(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    strcpy(f->shown_buf, path);
    f->shown = f->shown_buf;
    f->target = target;
    /* A replaced file keeps its permission bits; a new one gets 0666 less
     * the umask, as fopen would give it. */
    f->fd = make_temp(target, exists ? (mode & 0777) : 0666, &f->tmp);
    if (f->fd < 0) {
        char *d = dir_of(target);
        ir_fail(err, errlen, "%s: cannot write in %s: %s", path, d ? d : "its directory",
                strerror(errno));
        free(d);
        free(target);
        free(f);
        return NULL;
    }
    /* The umask does not apply when the mode came from the old file. */
    if (exists) fchmod(f->fd, mode & 0777);
    return f;
}

void ir_file_write(ir_file *f, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n && !f->failed) {
        ssize_t w = write(f->fd, b, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n);
        if (w < 0) {
            if (errno == EINTR) continue;
            f->failed = errno;
            break;
        }
        b += w;
        n -= (size_t)w;
    }
}

static void file_free(ir_file *f) {
    free(f->target);
    free(f->tmp);
    free(f);
}

void ir_file_abort(ir_file *f) {
    if (!f) return;
    close(f->fd);
    unlink(f->tmp);
    file_free(f);
}

int ir_file_commit(ir_file *f, char *err, size_t errlen) {
    const char *step = NULL;
    int e = f->failed;
    if (e)
        step = "cannot write";
    else if (fsync(f->fd) != 0)
        step = "cannot write (fsync)", e = errno;
    if (close(f->fd) != 0 && !step) step = "cannot write", e = errno;
    if (!step && rename(f->tmp, f->target) != 0) step = "cannot write (rename)", e = errno;
    if (step) {
        unlink(f->tmp);
        ir_fail(err, errlen, "%s: %s: %s", f->shown, step, strerror(e));
        file_free(f);
        return -1;
    }
    sync_dir(f->target);
    file_free(f);
    return 0;
}

int ir_file_write_all(const char *path, const void *p, size_t n, char *err, size_t errlen) {
    ir_file *f = ir_file_open(path, err, errlen);
    if (!f) return -1;
    ir_file_write(f, p, n);
    return ir_file_commit(f, err, errlen);
}

int ir_file_check_writable(const char *path, const char *what, char *err, size_t errlen) {
    char why[1024];
    ir_file *f = ir_file_open(path, why, sizeof why);
    if (!f) return ir_fail(err, errlen, "%s %s", what, why);
    ir_file_abort(f);
    return 0;
}

int ir_file_check_dir(const char *path, const char *what, char *err, size_t errlen) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        /* EEXIST: another process made it between the stat and here. */
        if (errno != ENOENT || (mkdir(path, 0777) != 0 && errno != EEXIST))
            return ir_fail(err, errlen, "%s %s: cannot create the directory: %s", what, path,
                           strerror(errno));
    } else if (!S_ISDIR(sb.st_mode)) {
        return ir_fail(err, errlen, "%s %s: not a directory", what, path);
    }
    size_t len = strlen(path) + 16;
    char *probe = malloc(len);
    if (!probe) return ir_fail(err, errlen, "%s %s: out of memory", what, path);
    snprintf(probe, len, "%s/.dpc-probe", path);
    char *tmp;
    int fd = make_temp(probe, 0600, &tmp);
    free(probe);
    if (fd < 0)
        return ir_fail(err, errlen, "%s %s: cannot write in the directory: %s", what, path,
                       strerror(errno));
    close(fd);
    unlink(tmp);
    free(tmp);
    return 0;
}

int ir_file_same(const char *a, const char *b) {
    struct stat x, y;
    return a && b && stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev &&
           x.st_ino == y.st_ino;
}

int ir_file_open_read(const char *path, long long *size, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return ir_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return ir_fail(err, errlen, "%s: cannot open: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return ir_fail(err, errlen, "%s: not a regular file (%s); refusing to read it", path,
                       kind_of(sb.st_mode));
    }
    /* Regular files ignore O_NONBLOCK; cleared all the same. */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    *size = (long long)sb.st_size;
    return fd;
}

int ir_file_read_exact(int fd, void *p, size_t n) {
    unsigned char *at = p;
    while (n) {
        ssize_t r = read(fd, at, n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) return 1;
        at += r, n -= (size_t)r;
    }
    return 0;
}

unsigned char *ir_file_read(const char *path, size_t max, size_t *len, char *err, size_t errlen) {
    long long size;
    int fd = ir_file_open_read(path, &size, err, errlen);
    if (fd < 0) return NULL;
    if ((unsigned long long)size > max) {
        close(fd);
        ir_fail(err, errlen, "%s: %lld bytes, more than the %zu this file may have", path, size,
                max);
        return NULL;
    }
    unsigned char *buf = malloc((size_t)size + 1);
    if (!buf) {
        close(fd);
        ir_fail(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    /* Then one byte more than fstat said, to notice a file that grew. */
    unsigned char extra;
    int rc = ir_file_read_exact(fd, buf, (size_t)size);
    if (rc == 0) {
        int more = ir_file_read_exact(fd, &extra, 1);
        rc = more == 1 ? 0 : more == 0 ? 1 : -1;
    }
    int e = errno;
    close(fd);
    if (rc) {
        free(buf);
        if (rc < 0)
            ir_fail(err, errlen, "%s: cannot read: %s", path, strerror(e));
        else
            ir_fail(err, errlen, "%s: changed while being read", path);
        return NULL;
    }
    size_t got = (size_t)size;
    buf[got] = 0;
    *len = got;
    return buf;
}
