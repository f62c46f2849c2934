/* A read-only mount, as seen through libc (LD_PRELOAD): every call that would change a file or
 * a directory entry under RO_DIR fails with EROFS, as the kernel answers on a read-only mount.
 *
 * The tests run as root, for whom permission bits stop no write, and a read-only bind mount
 * needs privileges a CI runner lacks; Python's os functions and HDF5's file driver all go
 * through these libc entry points, so a reader that tries to write, create, delete, rename or
 * truncate anything there fails as it would on the mount.
 *
 * Environment: RO_DIR  the directory (a path prefix) made read-only.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

static int under(const char *path) {
    const char *d = getenv("RO_DIR");
    return d && *d && path && strncmp(path, d, strlen(d)) == 0;
}

static int writes(int flags) {
    return (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC));
}

#define REAL(name, ret, ...) \
    static ret (*real_##name)(__VA_ARGS__); \
    if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name)
#define REFUSE(cond) do { if (cond) { errno = EROFS; return -1; } } while (0)

int open(const char *path, int flags, ...) {
    REAL(open, int, const char *, int, ...);
    va_list a; va_start(a, flags); mode_t mode = va_arg(a, int); va_end(a);
    REFUSE(under(path) && writes(flags));
    return real_open(path, flags, mode);
}
int open64(const char *path, int flags, ...) {
    REAL(open64, int, const char *, int, ...);
    va_list a; va_start(a, flags); mode_t mode = va_arg(a, int); va_end(a);
    REFUSE(under(path) && writes(flags));
    return real_open64(path, flags, mode);
}
int openat(int dir, const char *path, int flags, ...) {
    REAL(openat, int, int, const char *, int, ...);
    va_list a; va_start(a, flags); mode_t mode = va_arg(a, int); va_end(a);
    REFUSE(under(path) && writes(flags));
    return real_openat(dir, path, flags, mode);
}
int openat64(int dir, const char *path, int flags, ...) {
    REAL(openat64, int, int, const char *, int, ...);
    va_list a; va_start(a, flags); mode_t mode = va_arg(a, int); va_end(a);
    REFUSE(under(path) && writes(flags));
    return real_openat64(dir, path, flags, mode);
}
int creat(const char *path, mode_t mode) {
    REAL(creat, int, const char *, mode_t);
    REFUSE(under(path));
    return real_creat(path, mode);
}
int unlink(const char *path) {
    REAL(unlink, int, const char *);
    REFUSE(under(path));
    return real_unlink(path);
}
int unlinkat(int dir, const char *path, int flags) {
    REAL(unlinkat, int, int, const char *, int);
    REFUSE(under(path));
    return real_unlinkat(dir, path, flags);
}
int rename(const char *a, const char *b) {
    REAL(rename, int, const char *, const char *);
    REFUSE(under(a) || under(b));
    return real_rename(a, b);
}
int renameat(int da, const char *a, int db, const char *b) {
    REAL(renameat, int, int, const char *, int, const char *);
    REFUSE(under(a) || under(b));
    return real_renameat(da, a, db, b);
}
int renameat2(int da, const char *a, int db, const char *b, unsigned int flags) {
    REAL(renameat2, int, int, const char *, int, const char *, unsigned int);
    REFUSE(under(a) || under(b));
    return real_renameat2(da, a, db, b, flags);
}
int truncate(const char *path, off_t n) {
    REAL(truncate, int, const char *, off_t);
    REFUSE(under(path));
    return real_truncate(path, n);
}
int mkdir(const char *path, mode_t mode) {
    REAL(mkdir, int, const char *, mode_t);
    REFUSE(under(path));
    return real_mkdir(path, mode);
}
int symlink(const char *target, const char *path) {
    REAL(symlink, int, const char *, const char *);
    REFUSE(under(path));
    return real_symlink(target, path);
}
int link(const char *a, const char *b) {
    REAL(link, int, const char *, const char *);
    REFUSE(under(b));
    return real_link(a, b);
}
