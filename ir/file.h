/* ir/file.h — the one way dpc and dprun write and bound-read files.
 *
 * Usage:
 *     ir_file *f = ir_file_open("out.safetensors", err, sizeof err);  // NULL + message
 *     if (!f) ...;
 *     ir_file_write(f, bytes, n);        // buffered errors: checked at commit
 *     if (ir_file_commit(f, err, sizeof err)) ...;  // or ir_file_abort(f)
 *
 *     ir_file_write_all("a.plan", buf, len, err, sizeof err);   // the same, at once
 *     ir_file_check_writable("m.json", "--metrics", err, sizeof err);  // before work
 *     ir_file_same("a", "b");            // 1: both exist and are one file
 *     unsigned char *b = ir_file_read("x", max, &len, err, sizeof err);
 *
 * A write makes a fresh temporary with mkstemp (O_CREAT|O_EXCL, an
 * unpredictable name) in the target's directory, so a link planted at any
 * name is never opened; the data is fsynced, renamed over the target and
 * the directory fsynced, so the target is always the old file or the
 * complete new one. A target that exists and is not a regular file (a
 * device, FIFO, directory) is refused rather than replaced. When the target
 * itself is a symlink the user named, it is resolved and the file it names
 * is replaced (in that file's directory): writing through it is what was
 * asked. The replacement keeps the old file's permission bits (else 0666
 * less the umask, as fopen).
 *
 * ir_file_read reads only a regular file (opened O_NONBLOCK, so a FIFO
 * neither blocks nor is read) of at most max bytes: /dev/zero or a FIFO
 * named as an input is refused at once instead of read forever.
 */
#ifndef DPC_IR_FILE_H
#define DPC_IR_FILE_H

#include <stddef.h>

typedef struct ir_file ir_file;

/* Starts replacing path. NULL + message (naming path) on failure. */
ir_file *ir_file_open(const char *path, char *err, size_t errlen);
/* Appends n bytes; a failure is remembered and reported by commit. */
void ir_file_write(ir_file *f, const void *p, size_t n);
/* fsync, rename over the target, fsync the directory; frees f. 0 or -1. */
int ir_file_commit(ir_file *f, char *err, size_t errlen);
/* Removes the temporary, leaves the target as it was; frees f. */
void ir_file_abort(ir_file *f);
/* open + write + commit. */
int ir_file_write_all(const char *path, const void *p, size_t n, char *err, size_t errlen);

/* Checks now that path could be written later: an existing target is a
 * regular file (through a symlink), and a temporary can be made in its
 * directory (made and removed). what names the option in the message
 * ("--metrics"). 0 or -1 + message. */
int ir_file_check_writable(const char *path, const char *what, char *err, size_t errlen);
/* The same for a directory the run will write files in (--checkpoint,
 * --sweep-dir): created when missing (its parent must exist), then a
 * temporary made in it and removed. */
int ir_file_check_dir(const char *path, const char *what, char *err, size_t errlen);
/* 1 when a and b both exist and are the same file (st_dev, st_ino). */
int ir_file_same(const char *a, const char *b);

/* Opens path for reading only when it is a regular file (O_NONBLOCK, so
 * a FIFO does not block the open); its size in *size. fd or -1 + message. */
int ir_file_open_read(const char *path, long long *size, char *err, size_t errlen);
/* Reads exactly n bytes from fd, retrying when a signal interrupts: 0; -1
 * on a read error (errno says why); 1 when the file ends first. */
int ir_file_read_exact(int fd, void *p, size_t n);
/* The whole of a regular file of at most max bytes (NUL-terminated, the
 * terminator not counted in *len); NULL + message otherwise. */
unsigned char *ir_file_read(const char *path, size_t max, size_t *len, char *err, size_t errlen);

#endif
