/*
 * Doorbell timing for bench/doorbell.sh, loaded with LD_PRELOAD into a C tool or a Deno/Bun
 * process: times every write() on a /dev/infiniband/uverbs* fd (soft-RoCE's post_send rings
 * the kernel that way, and the kernel then runs the whole send inline) and prints the median
 * and the quartiles on stderr every 500 such calls and at exit (a process may end without running
 * its exit handlers, as Bun's do), as
 * `doorbell <pid> <count> <p25> <median> <p75> <max> <voluntary> <involuntary> <total> <cpu>`:
 * the microseconds, then the process's context switches so far (getrusage), the microseconds
 * spent in all of them, and the process's CPU time so far (user + system, ms). The quartiles
 * come from a histogram with bins 1 % wide (so a report costs the same after a million calls as
 * after 500); the count, the maximum and the total are exact. With `DOORBELL_FROM=N` the first N
 * doorbells are neither timed nor counted, and the context switches and CPU time are counted from
 * the N-th on: a window after the engines' warm-up.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* bin i holds the times in [BIN_FLOOR * 1.01^i, BIN_FLOOR * 1.01^(i+1)) microseconds */
#define BIN_FLOOR 0.05
#define BINS 2000
#define LOG_STEP 0.009950330853168083 /* log(1.01), not computed per call */
static ssize_t (*real_write)(int, const void *, size_t);
static long bins[BINS];
static long count;
static double total, max_us;
static int uverbs_fd = -1;
static long skip = -1;     /* doorbells left before the window (DOORBELL_FROM) */
static struct rusage base; /* the process's counts when the window opened */

static int is_uverbs(int fd) {
  char path[64], link[128];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, link, sizeof link - 1);
  if (n <= 0) return 0;
  link[n] = 0;
  return strstr(link, "uverbs") != NULL;
}

static int bin_of(double us) {
  if (us < BIN_FLOOR) return 0;
  int i = (int)(log(us / BIN_FLOOR) / LOG_STEP);
  return i < BINS ? i : BINS - 1;
}

/* the time at quantile q: the geometric middle of the bin holding it */
static double quantile(double q) {
  long want = (long)(q * (count - 1)), seen = 0;
  for (int i = 0; i < BINS; i++) {
    seen += bins[i];
    if (seen > want) return BIN_FLOOR * pow(1.01, i + 0.5);
  }
  return max_us;
}

/* user + system CPU time in ms */
static double cpu_ms(const struct rusage *r) {
  return (r->ru_utime.tv_sec + r->ru_stime.tv_sec) * 1e3 +
         (r->ru_utime.tv_usec + r->ru_stime.tv_usec) / 1e3;
}

static void report(void) {
  if (count == 0) return;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  fprintf(stderr, "doorbell %d %ld %.1f %.1f %.1f %.0f %ld %ld %.0f %.0f\n", getpid(), count,
          quantile(0.25), quantile(0.5), quantile(0.75), max_us, ru.ru_nvcsw - base.ru_nvcsw,
          ru.ru_nivcsw - base.ru_nivcsw, total, cpu_ms(&ru) - cpu_ms(&base));
}

__attribute__((destructor)) static void at_exit(void) { report(); }

ssize_t write(int fd, const void *buf, size_t len) {
  if (!real_write) real_write = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
  if (fd != uverbs_fd) {
    if (!is_uverbs(fd)) return real_write(fd, buf, len);
    uverbs_fd = fd;
  }
  if (skip < 0) {
    const char *from = getenv("DOORBELL_FROM");
    skip = from ? atol(from) : 0;
  }
  if (skip > 0) {
    if (--skip == 0) getrusage(RUSAGE_SELF, &base);
    return real_write(fd, buf, len);
  }
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  ssize_t r = real_write(fd, buf, len);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double us = (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3;
  total += us;
  if (us > max_us) max_us = us;
  bins[bin_of(us)]++;
  if (++count % 500 == 0) report();
  return r;
}
