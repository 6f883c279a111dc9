/*
 * Wake-up latency helper for bench/wakeup.ts. A writer thread writes an eventfd at random
 * gaps and stamps the time of each write; the waiter (JS through the poller, or C blocked in
 * epoll_wait: wk_c_baseline) stamps the time it woke. Built as a shared library at run time.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define MAX_ITERS 100000
static double stamp[MAX_ITERS], woken[MAX_ITERS];
static volatile int acked[MAX_ITERS];
static int g_fd, g_iters, g_min, g_max;
static pthread_t writer;

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void *write_loop(void *arg) {
  (void)arg;
  uint64_t one = 1;
  unsigned seed = 12345;
  for (int i = 0; i < g_iters; i++) {
    usleep(g_min + rand_r(&seed) % (g_max - g_min + 1));
    stamp[i] = now_ns();
    if (write(g_fd, &one, 8) != 8) return NULL;
    while (!__atomic_load_n(&acked[i], __ATOMIC_ACQUIRE)) usleep(20);
  }
  return NULL;
}

/* Starts the writer thread on fd: iters writes, gaps in [min_us, max_us]. */
int wk_start(int fd, int iters, int min_us, int max_us) {
  if (iters > MAX_ITERS) iters = MAX_ITERS;
  g_fd = fd, g_iters = iters, g_min = min_us, g_max = max_us;
  for (int i = 0; i < iters; i++) acked[i] = 0;
  return pthread_create(&writer, NULL, write_loop, NULL);
}

/* The waiter woke for write i: stamps it (wk_stamp) and lets the writer go on (wk_ack). */
void wk_stamp(int i) { woken[i] = now_ns(); }
void wk_ack(int i) { __atomic_store_n(&acked[i], 1, __ATOMIC_RELEASE); }
void wk_woken(int i) {
  wk_stamp(i);
  wk_ack(i);
}

/* Joins the writer thread. */
int wk_join(void) { return pthread_join(writer, NULL); }

/* Wake-up latency of write i in nanoseconds. */
double wk_latency(int i) { return woken[i] - stamp[i]; }

/* The C baseline: a thread blocked in epoll_wait on an eventfd. */
int wk_c_baseline(int iters, int min_us, int max_us) {
  int efd = eventfd(0, EFD_NONBLOCK), ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.fd = efd}, out[8];
  epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev);
  wk_start(efd, iters, min_us, max_us);
  uint64_t v;
  for (int i = 0; i < iters; i++) {
    while (epoll_wait(ep, out, 8, -1) < 1) {}
    wk_stamp(i);
    /* drain before the ack: the next write must not be drained with this one (its edge would
       be gone), whatever delays the waiter between stamp and drain */
    while (read(efd, &v, 8) == 8) {}
    wk_ack(i);
  }
  wk_join();
  close(ep);
  close(efd);
  return 0;
}
