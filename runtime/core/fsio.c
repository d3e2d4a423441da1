/* fsio.c — durable-file helpers shared by the runtime's writers; see fsio.h for the recipe. */
#include "fsio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int hyp_fs_errcode(int err) {
    switch (err) {
    case ENOENT: case EACCES: case EPERM: case ENOTDIR: case EISDIR: case EROFS: case EEXIST:
    case ENAMETOOLONG: case ELOOP: case ENOTEMPTY:
        return HYP_EINPUT;
    default:
        return HYP_EFAIL;
    }
}

int hyp_fs_write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) { errno = EIO; return -1; }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

long long hyp_fs_read_full(int fd, void *buf, size_t n) {
    char *p = buf;
    size_t got = 0;
    while (got < n) {
        size_t chunk = n - got > ((size_t)1 << 30) ? ((size_t)1 << 30) : n - got;
        ssize_t r = read(fd, p + got, chunk);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (long long)got;
}

int hyp_fs_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    /* Some filesystems refuse fsync on directories; the rename is as durable as they allow. */
    if (rc != 0 && (errno == EINVAL || errno == EBADF || errno == ENOTSUP)) rc = 0;
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

void hyp_fs_dirname(const char *path, char *out, size_t cap) {
    if (cap == 0) return;
    const char *slash = strrchr(path, '/');
    if (!slash) { snprintf(out, cap, "."); return; }
    size_t len = (size_t)(slash - path);
    while (len > 0 && path[len - 1] == '/') len--; /* "a//b" -> "a" */
    if (len == 0) { snprintf(out, cap, "/"); return; }
    snprintf(out, cap, "%.*s", (int)len, path);
}

int hyp_fs_fsync_parent(const char *path) {
    char dir[4096];
    hyp_fs_dirname(path, dir, sizeof dir);
    return hyp_fs_fsync_dir(dir);
}

int hyp_fs_mkdirs(const char *dir, hyp_err *e) {
    char buf[4096];
    size_t n = strlen(dir);
    if (n == 0) return hyp_fail(e, HYP_EINPUT, "(empty path): no directory given — give a path");
    if (n >= sizeof buf)
        return hyp_fail(e, HYP_EINPUT, "%.200s...: path too long — use a shorter path", dir);
    memcpy(buf, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
            int err = errno;
            return hyp_fail(e, hyp_fs_errcode(err),
                            "%s: cannot create directory: %s — check the path and permissions",
                            buf, strerror(err));
        }
        buf[i] = c;
    }
    if (!hyp_fs_is_dir(dir))
        return hyp_fail(e, HYP_EINPUT, "%s: exists but is not a directory — choose another path",
                        dir);
    return HYP_OK;
}

int hyp_fs_tmpfile(const char *final, char *tmp, size_t cap, int *fd, hyp_err *e) {
    *fd = -1;
    int len = snprintf(tmp, cap, "%s.tmp-XXXXXX", final);
    if (len < 0 || (size_t)len >= cap)
        return hyp_fail(e, HYP_EINPUT, "%s: path too long — use a shorter path", final);
    int f = mkstemp(tmp);
    if (f < 0) {
        int err = errno;
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot create a file here: %s — check that "
                        "the directory exists and is writable", final, strerror(err));
    }
    (void)fchmod(f, 0644); /* mkstemp makes 0600; these are ordinary data files */
    *fd = f;
    return HYP_OK;
}

int hyp_fs_write_atomic(const char *path, const void *buf, size_t n, hyp_err *e) {
    char tmp[4096 + 32];
    int fd, rc = hyp_fs_tmpfile(path, tmp, sizeof tmp, &fd, e);
    if (rc != HYP_OK) return rc;
    if (hyp_fs_write_all(fd, buf, n) != 0 || fsync(fd) != 0) {
        int err = errno;
        close(fd);
        unlink(tmp);
        return hyp_fail(e, hyp_fs_errcode(err), "%s: write failed: %s — check free disk space",
                        path, strerror(err));
    }
    if (close(fd) != 0) {
        int err = errno;
        unlink(tmp);
        return hyp_fail(e, HYP_EFAIL, "%s: close failed: %s — check free disk space", path,
                        strerror(err));
    }
    if (rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot replace the file: %s — check the path",
                        path, strerror(err));
    }
    if (hyp_fs_fsync_parent(path) != 0) {
        int err = errno;
        return hyp_fail(e, HYP_EFAIL, "%s: fsync of its directory failed: %s", path,
                        strerror(err));
    }
    return HYP_OK;
}

int hyp_fs_read_small(const char *path, size_t max_bytes, char **out, size_t *n, hyp_err *e) {
    *out = NULL;
    if (n) *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        return hyp_fail(e, hyp_fs_errcode(err), "%s: cannot open: %s — check the path", path,
                        strerror(err));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return hyp_fail(e, HYP_EINPUT, "%s: not a regular file — check the path", path);
    }
    if ((unsigned long long)st.st_size > max_bytes) {
        close(fd);
        return hyp_fail(e, HYP_EINPUT, "%s: file is %lld bytes, more than the %zu this file may "
                        "have — it is not the file expected here", path, (long long)st.st_size,
                        max_bytes);
    }
    size_t sz = (size_t)st.st_size;
    char *buf = malloc(sz + 1);
    if (!buf) {
        close(fd);
        return hyp_fail(e, HYP_EFAIL, "%s: out of memory reading %zu bytes", path, sz);
    }
    long long got = hyp_fs_read_full(fd, buf, sz);
    int err = errno;
    close(fd);
    if (got < 0) {
        free(buf);
        return hyp_fail(e, HYP_EFAIL, "%s: read failed: %s", path, strerror(err));
    }
    buf[got] = '\0';
    *out = buf;
    if (n) *n = (size_t)got;
    return HYP_OK;
}

int hyp_fs_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

int hyp_fs_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

void hyp_fs_hex(const uint8_t *bytes, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

int hyp_fs_exchange(const char *a, const char *b) {
#ifdef SYS_renameat2
    /* RENAME_EXCHANGE = (1 << 1) in <linux/fs.h>; called directly so no _GNU_SOURCE is needed */
    return (int)syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, 1u << 1);
#else
    (void)a;
    (void)b;
    errno = ENOSYS;
    return -1;
#endif
}

int hyp_fs_remove_flat(const char *dir, int (*allow)(const char *name)) {
    for (int pass = allow ? 0 : 1; pass < 2; pass++) {
        DIR *d = opendir(dir);
        if (!d) return -1;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            if (pass == 0) {
                if (!allow(de->d_name)) {
                    closedir(d);
                    errno = ENOTEMPTY;
                    return -1;
                }
                continue;
            }
            char p[4096];
            int n = snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            if (n < 0 || (size_t)n >= sizeof p || unlink(p) != 0) {
                int err = (n < 0 || (size_t)n >= sizeof p) ? ENAMETOOLONG : errno;
                closedir(d);
                errno = err;
                return -1;
            }
        }
        closedir(d);
    }
    return rmdir(dir);
}
