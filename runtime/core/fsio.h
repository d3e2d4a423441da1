/* fsio.h — durable-file helpers shared by the runtime's writers (safetensors, data shards,
 * checkpoints, metrics): checked full writes, fsync of files and directories, temp-file-then-
 * rename, mkdir -p, and the classification of an errno into HYP_EINPUT / HYP_EFAIL.
 *
 * The crash-safety recipe every writer here follows:
 *     fd = hyp_fs_tmpfile(final, tmp)      -> "<final>.tmp-XXXXXX" in the same directory
 *     hyp_fs_write_all(fd, ...)            -> loops over short writes and EINTR
 *     fsync(fd); close(fd)
 *     rename(tmp, final)                   -> atomic on POSIX within one filesystem
 *     hyp_fs_fsync_dir(dirname(final))     -> makes the rename itself durable
 * so a reader sees either the old file or the whole new one, never a prefix.
 */
#ifndef HYP_FSIO_H
#define HYP_FSIO_H

#include <stddef.h>
#include <stdint.h>

#include "hyp_err.h"

/* HYP_EINPUT for errno values that mean "the path the user gave is wrong" (ENOENT, EACCES,
 * ENOTDIR, EISDIR, EROFS, EEXIST, ENAMETOOLONG, ELOOP), else HYP_EFAIL (ENOSPC, EIO, ENOMEM...). */
int hyp_fs_errcode(int err);

/* Writes all n bytes (looping over short writes and EINTR). 0 on success, else -1 with errno. */
int hyp_fs_write_all(int fd, const void *buf, size_t n);
/* Reads exactly n bytes unless EOF comes first. Returns bytes read, or -1 with errno. */
long long hyp_fs_read_full(int fd, void *buf, size_t n);

/* fsync()s the directory `dir` (so renames/creates inside it are durable). 0 or -1/errno. */
int hyp_fs_fsync_dir(const char *dir);
/* fsync()s the directory that contains `path`. 0 or -1/errno. */
int hyp_fs_fsync_parent(const char *path);

/* Writes dirname(path) into out (cap bytes). "" paths and bare names give ".". */
void hyp_fs_dirname(const char *path, char *out, size_t cap);

/* mkdir -p: creates dir and missing parents (mode 0777 & ~umask). */
int hyp_fs_mkdirs(const char *dir, hyp_err *e);

/* Creates "<final>.tmp-XXXXXX" (mode 0644) next to final; the name goes into tmp (cap bytes) and
 * the open fd into *fd. Returns HYP_OK, or an error code with e filled (*fd = -1). */
int hyp_fs_tmpfile(const char *final, char *tmp, size_t cap, int *fd, hyp_err *e);

/* Atomically replaces `path` with the n bytes at buf: temp file, fsync, rename, fsync dir.
 * On failure nothing is left behind and the old file (if any) is untouched. */
int hyp_fs_write_atomic(const char *path, const void *buf, size_t n, hyp_err *e);

/* Reads a whole (small) file into a malloc'd NUL-terminated buffer; *n = its length.
 * Files over max_bytes are refused (HYP_EINPUT). The caller frees *out. */
int hyp_fs_read_small(const char *path, size_t max_bytes, char **out, size_t *n, hyp_err *e);

/* Atomically swaps two paths (renameat2 RENAME_EXCHANGE). 0, or -1 with errno (ENOSYS/EINVAL
 * where the kernel or filesystem cannot: callers fall back to two renames). */
int hyp_fs_exchange(const char *a, const char *b);

/* Removes a directory that holds only plain files (no recursion into subdirectories). If allow is
 * not NULL, every entry's name must pass allow() or nothing is deleted (-1, errno ENOTEMPTY).
 * 0, or -1 with errno. */
int hyp_fs_remove_flat(const char *dir, int (*allow)(const char *name));

/* 1 if path exists (any type), 0 if not. */
int hyp_fs_exists(const char *path);
/* 1 if path is a directory. */
int hyp_fs_is_dir(const char *path);

/* Lowercase hex of n bytes into out (2n+1 bytes). */
void hyp_fs_hex(const uint8_t *bytes, size_t n, char *out);

#endif
