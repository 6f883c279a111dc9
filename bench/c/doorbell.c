/*
 * Doorbell timing for bench/doorbell.sh, loaded with LD_PRELOAD into a C tool or a Deno/Bun
 * process: times every write() on a /dev/infiniband/uverbs* fd (soft-RoCE's post_send rings
 * the kernel that way, and the kernel then runs the whole send inline) and prints the median
 * and the quartiles on stderr every 500 such calls and at exit, as
 * `doorbell <pid> <count> <p25> <median> <p75> <max> <voluntary> <involuntary> <total> <cpu>`:
 * the microseconds, then the process's context switches so far (getrusage), the microseconds
 * spent in all of them, and the process's CPU time so far (user + system, ms).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MAX_SAMPLES 200000
static ssize_t (*real_write)(int, const void *, size_t);
static double samples[MAX_SAMPLES];
static long count;
static double total;
static int uverbs_fd = -1;

static int is_uverbs(int fd) {
  char path[64], link[128];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, link, sizeof link - 1);
  if (n <= 0) return 0;
  link[n] = 0;
  return strstr(link, "uverbs") != NULL;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void report(void) {
  long n = count < MAX_SAMPLES ? count : MAX_SAMPLES;
  if (n == 0) return;
  double *s = malloc(n * sizeof *s);
  if (!s) return;
  memcpy(s, samples, n * sizeof *s);
  qsort(s, n, sizeof *s, by_value);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  fprintf(stderr, "doorbell %d %ld %.1f %.1f %.1f %.0f %ld %ld %.0f %.0f\n", getpid(), count, s[n / 4],
          s[n / 2], s[(3 * n) / 4], s[n - 1], ru.ru_nvcsw, ru.ru_nivcsw, total,
          (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
            (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3);
  free(s);
}

__attribute__((destructor)) static void at_exit(void) { report(); }

ssize_t write(int fd, const void *buf, size_t len) {
  if (!real_write) real_write = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
  if (fd != uverbs_fd) {
    if (!is_uverbs(fd)) return real_write(fd, buf, len);
    uverbs_fd = fd;
  }
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  ssize_t r = real_write(fd, buf, len);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double us = (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3;
  total += us;
  if (count < MAX_SAMPLES) samples[count] = us;
  if (++count % 500 == 0) report();
  return r;
}
