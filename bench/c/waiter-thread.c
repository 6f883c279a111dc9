/*
 * A native waiter thread for bench/waiters.ts: blocks in epoll_wait on the poller's set, leaves
 * the ready events in a buffer the JS thread owns, calls a thread-safe JS callback with their
 * count (or writes the count into a socket the JS thread reads) and sleeps until the JS thread has taken them (a write to ack_fd). Header-free, so Bun's
 * `cc()` (TinyCC) compiles it without libc headers; Deno's run of the bench builds it with the
 * system compiler. Needing a compiler at run time is why the library does not wait this way.
 */

typedef unsigned long wt_pthread_t;
int pthread_create(wt_pthread_t *thread, const void *attr, void *(*start)(void *), void *arg);
int pthread_detach(wt_pthread_t thread);
int epoll_wait(int epfd, void *events, int maxevents, int timeout);
long read(int fd, void *buf, unsigned long count);
long write(int fd, const void *buf, unsigned long count);
int *__errno_location(void);

#define WT_EINTR 4

struct wt {
  int epfd, max_events, ack_fd;
  void *events;
  void (*callback)(int);
  int notify_fd;
  volatile int stop;
};

static struct wt wt_state;

static void *wt_loop(void *arg) {
  struct wt *w = arg;
  unsigned long long ack;
  for (;;) {
    int n = epoll_wait(w->epfd, w->events, w->max_events, -1);
    if (w->stop) break;
    if (n < 0) {
      if (*__errno_location() == WT_EINTR) continue;
      break;
    }
    if (w->callback) w->callback(n);
    else if (write(w->notify_fd, &n, 4) != 4) break;
    if (read(w->ack_fd, &ack, 8) != 8 || w->stop) break;
  }
  return 0;
}

static int start(int epfd, void *events, int max_events, int ack_fd, void *callback, int notify_fd) {
  wt_pthread_t t;
  wt_state.epfd = epfd;
  wt_state.events = events;
  wt_state.max_events = max_events;
  wt_state.ack_fd = ack_fd;
  wt_state.callback = (void (*)(int))callback;
  wt_state.notify_fd = notify_fd;
  wt_state.stop = 0;
  int e = pthread_create(&t, 0, wt_loop, &wt_state);
  if (e == 0) pthread_detach(t);
  return e;
}

/* Asks the thread to stop; it leaves at its next wake (write the wake eventfd and ack_fd). */
void wt_stop(void) { wt_state.stop = 1; }

/* Starts the thread (one per process), calling `callback`. Returns 0 or an errno. */
int wt_start(int epfd, void *events, int max_events, int ack_fd, void *callback) {
  return start(epfd, events, max_events, ack_fd, callback, -1);
}

/* Starts the thread, which tells the JS thread by writing the count (4 bytes) into notify_fd. */
int wt_start_fd(int epfd, void *events, int max_events, int ack_fd, int notify_fd) {
  return start(epfd, events, max_events, ack_fd, 0, notify_fd);
}
