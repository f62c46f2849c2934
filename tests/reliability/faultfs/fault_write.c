/* A write-failure injector for the output files of a run (LD_PRELOAD).
 *
 * Environment:
 *   FAULT_MATCH   substring of the path of the files to fail (e.g. "run.h5"); others pass
 *   FAULT_SKIP    suffix of paths never to fail (default ".lock")
 *   FAULT_AT      the n-th write to a matching file (1-based) fails, and every one after it
 *   FAULT_ERRNO   errno to fail with (default 122, EDQUOT)
 *   FAULT_SHORT   "1": the n-th write, when it extends the file, writes half its bytes first (a
 *                 short write), then fails: what a full disk, a quota or a size limit does to a
 *                 write that allocates. (A rewrite inside the file allocates nothing on these
 *                 file systems, so it fails whole or not at all.)
 *   FAULT_COUNT_FILE  at exit, write the number of writes seen on matching files there
 *
 * write/pwrite/pwrite64/writev/pwritev fail; statvfs, fallocate and reads are untouched, as on a
 * network file system whose quota is exceeded while it still reports free space. A file that
 * matches is tracked from its open(); the counter is shared by every matching file.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAXFD 4096
static unsigned char tracked[MAXFD];
static long count = 0;

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

static int matches(const char *path) {
    const char *m = getenv("FAULT_MATCH");
    if (!m || !*m || !path || !strstr(path, m)) return 0;
    const char *skip = getenv("FAULT_SKIP");
    if (!skip) skip = ".lock";
    size_t n = strlen(path), k = strlen(skip);
    return !(k && n >= k && strcmp(path + n - k, skip) == 0);
}

static void track(int fd, const char *path) {
    if (fd >= 0 && fd < MAXFD) tracked[fd] = (unsigned char)matches(path);
}

/* 0: let it through; 1: fail; 2: write half then fail (only a write past the end) */
static int verdict_at(int fd, off_t end);
static int verdict(int fd) { return verdict_at(fd, -1); }
static int verdict_at(int fd, off_t end) {
    if (fd < 0 || fd >= MAXFD || !tracked[fd]) return 0;
    count++;
    long at = env_int("FAULT_AT", 0);
    if (at <= 0) return 0;
    if (count < at) return 0;
    if (count == at && env_int("FAULT_SHORT", 0)) {
        struct stat st;
        if (end >= 0 && fstat(fd, &st) == 0 && end > st.st_size) return 2;
    }
    return 1;
}

static int fail(void) {
    errno = env_int("FAULT_ERRNO", 122);
    return -1;
}

#define REAL(name, ret, ...) \
    static ret (*real_##name)(__VA_ARGS__); \
    if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name)

int open(const char *path, int flags, ...) {
    REAL(open, int, const char *, int, ...);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) { va_list a; va_start(a, flags); mode = va_arg(a, int); va_end(a); }
    int fd = real_open(path, flags, mode);
    track(fd, path);
    return fd;
}
int open64(const char *path, int flags, ...) {
    REAL(open64, int, const char *, int, ...);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) { va_list a; va_start(a, flags); mode = va_arg(a, int); va_end(a); }
    int fd = real_open64(path, flags, mode);
    track(fd, path);
    return fd;
}
int openat(int dir, const char *path, int flags, ...) {
    REAL(openat, int, int, const char *, int, ...);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) { va_list a; va_start(a, flags); mode = va_arg(a, int); va_end(a); }
    int fd = real_openat(dir, path, flags, mode);
    track(fd, path);
    return fd;
}
int openat64(int dir, const char *path, int flags, ...) {
    REAL(openat64, int, int, const char *, int, ...);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) { va_list a; va_start(a, flags); mode = va_arg(a, int); va_end(a); }
    int fd = real_openat64(dir, path, flags, mode);
    track(fd, path);
    return fd;
}
int close(int fd) {
    REAL(close, int, int);
    if (fd >= 0 && fd < MAXFD) tracked[fd] = 0;
    return real_close(fd);
}
int dup2(int old, int new) {
    REAL(dup2, int, int, int);
    int r = real_dup2(old, new);
    if (r >= 0 && new < MAXFD && old >= 0 && old < MAXFD) tracked[new] = tracked[old];
    return r;
}
ssize_t write(int fd, const void *buf, size_t n) {
    REAL(write, ssize_t, int, const void *, size_t);
    int v = verdict_at(fd, lseek(fd, 0, SEEK_CUR) + (off_t)n);
    if (v == 2 && n > 1) return real_write(fd, buf, n / 2);
    if (v) return fail();
    return real_write(fd, buf, n);
}
ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    REAL(pwrite, ssize_t, int, const void *, size_t, off_t);
    int v = verdict_at(fd, off + (off_t)n);
    if (v == 2 && n > 1) return real_pwrite(fd, buf, n / 2, off);
    if (v) return fail();
    return real_pwrite(fd, buf, n, off);
}
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) {
    REAL(pwrite64, ssize_t, int, const void *, size_t, off_t);
    int v = verdict_at(fd, off + (off_t)n);
    if (v == 2 && n > 1) return real_pwrite64(fd, buf, n / 2, off);
    if (v) return fail();
    return real_pwrite64(fd, buf, n, off);
}
ssize_t writev(int fd, const struct iovec *iov, int k) {
    REAL(writev, ssize_t, int, const struct iovec *, int);
    if (verdict(fd)) return fail();
    return real_writev(fd, iov, k);
}
ssize_t pwritev(int fd, const struct iovec *iov, int k, off_t off) {
    REAL(pwritev, ssize_t, int, const struct iovec *, int, off_t);
    if (verdict(fd)) return fail();
    return real_pwritev(fd, iov, k, off);
}

/* FAULT_COUNT_FILE: at exit, the number of writes seen on matching files (to size FAULT_AT) */
__attribute__((destructor)) static void report_count(void) {
    const char *out = getenv("FAULT_COUNT_FILE");
    if (!out || !*out) return;
    REAL(open, int, const char *, int, ...);
    REAL(write, ssize_t, int, const void *, size_t);
    REAL(close, int, int);
    int fd = real_open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    char buf[32];
    int n = 0;
    long c = count;
    char tmp[32];
    int k = 0;
    do { tmp[k++] = (char)('0' + c % 10); c /= 10; } while (c && k < 30);
    while (k) buf[n++] = tmp[--k];
    buf[n++] = '\n';
    real_write(fd, buf, (size_t)n);
    real_close(fd);
}
