/* base/trust.h — the ownership rule for the files dpc runs code from (the
 * kernel cache's directory, the CUDA libraries it loads by a path it
 * chose), and the walk that applies it.
 *
 * The rule. Every directory on the path from "/" down belongs to root or
 * the effective user and no one else may write it, unless it is sticky
 * (like /tmp: others may add names there, not rename or remove ours); a
 * symbolic link on the way is followed only when root or the effective
 * user owns it; the file at the end belongs to root or the effective user,
 * no one else may write it, and it is a regular file. Then no other user
 * can change what the path names, or what the file holds, between the
 * check and the use.
 *
 * The walk opens one name at a time with openat(O_NOFOLLOW) from a
 * descriptor of the directory before it, so what is checked is what is
 * opened; the caller keeps the last directory's descriptor and uses names
 * relative to it (or /proc/self/fd/N/NAME), so no rename or link along the
 * path after the walk changes which directory that is.
 *
 * Usage:
 *     base_trust_how how = {.what = "kernel cache directory /x", .through =
 *                           "refusing to load kernels through it", .create = 1};
 *     base_trust_walk w;
 *     if (base_trust_walk_path(&w, "/x", &how, err, sizeof err)) ...;  // w.dir: /x itself
 *
 *     base_trust_file f;   // a file: its directory's descriptor, its name, the file opened
 *     if (base_trust_open_file(&f, "/usr/lib/libfoo.so", "refusing to load it", err, n)) ...;
 *     ... dlopen("/proc/self/fd/<f.dir>/<f.name>") ...; base_trust_file_close(&f);
 */
#ifndef DPC_BASE_TRUST_H
#define DPC_BASE_TRUST_H

#include <limits.h>
#include <stddef.h>
#include <sys/stat.h>

/* How a walk speaks: messages start with `what` ("kernel cache directory
 * /x", or the file's path) and a refused directory ends "; THROUGH HINT"
 * (hint: "" or " (set DPC_CACHE_DIR to ...)"). create: make a missing
 * directory 0700. last_dir: the last name is a directory, checked as one on
 * the way (else the caller checks it, as the cache does with a stricter
 * rule). */
typedef struct {
    const char *what, *through, *hint;
    const char *
        path; /* the path walked, as given: a message about it names it once (NULL: always "WHAT: AT, on its path,") */
    int create;
    int check_last;
} base_trust_how;

/* 0 when st, a directory on the way, passes the rule; else -1, errno
 * EPERM and a message naming `at`, its owner and mode. (Every refusal by
 * the rule below sets errno EPERM; a system call's failure keeps its
 * errno.) */
int base_trust_check_dir(const base_trust_how *how, const char *at, const struct stat *st,
                         char *err, size_t errlen);

/* Walks path (relative: from the working directory), every name a
 * directory: 0 and *dir a descriptor (O_PATH) of the last one, the
 * physical path in at; -1 + message (the first directory that fails the
 * rule, or the system call that failed: errno kept). */
int base_trust_walk_path(int *dir, char *at, size_t atlen, const char *path,
                         const base_trust_how *how, char *err, size_t errlen);

/* A file opened under the rule: its directory (O_PATH, kept open by the
 * caller as long as it uses the name), its name in it (never a link), the
 * file itself (O_RDONLY) and its physical path. */
typedef struct {
    int dir, fd;
    char name[NAME_MAX + 1];
    char real[PATH_MAX + NAME_MAX + 2];
    struct stat st;
} base_trust_file;

/* Opens path under the rule: 0, or -1 + a message starting with path and
 * saying which part failed and why (errno kept for a system call's
 * failure: ENOENT when the file or a directory is missing). A link at the
 * end is followed as a link on the way is. */
int base_trust_open_file(base_trust_file *f, const char *path, const char *through, char *err,
                         size_t errlen);
/* Closes what base_trust_open_file opened (either descriptor may be -1). */
void base_trust_file_close(base_trust_file *f);

#endif
