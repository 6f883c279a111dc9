/*
 * The C reference of bench/open-conns.ts: one process opens WARM rsocket connections to a stream
 * server (one 64-byte message each way on each), then COUNT more, and holds them all open; prints
 * its resident set size and open fds after the first WARM and after the last as one JSON line.
 *
 *   open-conns ADDR PORT WARM COUNT RING QUEUE
 *
 * RING: SO_SNDBUF and SO_RCVBUF bytes (0: rsocket's defaults); QUEUE: RDMA_SQSIZE and RDMA_RQSIZE
 * (0: rsocket's defaults). Blocking rsockets: every call returns or fails on its own.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <rdma/rsocket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long rss_bytes(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f)) {
    if (!strncmp(line, "VmRSS:", 6)) kb = atol(line + 6);
  }
  if (f) fclose(f);
  return kb * 1024;
}

static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  while (d && readdir(d)) n++;
  if (d) closedir(d);
  return n - 3; /* ".", ".." and the directory's own fd */
}

static void die(const char *what) {
  perror(what);
  exit(1);
}

int main(int argc, char **argv) {
  if (argc < 7) {
    fprintf(stderr, "usage: open-conns ADDR PORT WARM COUNT RING QUEUE\n");
    return 2;
  }
  struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
  inet_pton(AF_INET, argv[1], &dst.sin_addr);
  long warm = atol(argv[3]), count = atol(argv[4]);
  int ring = atoi(argv[5]), queue = atoi(argv[6]);
  long rss0 = 0;
  int fds0 = 0;
  for (long i = 0; i < warm + count; i++) {
    char msg[64] = {0};
    if (i == warm) {
      rss0 = rss_bytes();
      fds0 = open_fds();
    }
    int fd = rsocket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) die("rsocket");
    if (ring) {
      rsetsockopt(fd, SOL_SOCKET, SO_SNDBUF, &ring, sizeof ring);
      rsetsockopt(fd, SOL_SOCKET, SO_RCVBUF, &ring, sizeof ring);
    }
    if (queue) {
      rsetsockopt(fd, SOL_RDMA, RDMA_SQSIZE, &queue, sizeof queue);
      rsetsockopt(fd, SOL_RDMA, RDMA_RQSIZE, &queue, sizeof queue);
    }
    if (rconnect(fd, (struct sockaddr *)&dst, sizeof dst)) die("rconnect");
    if (rsend(fd, msg, sizeof msg, 0) != sizeof msg) die("rsend");
    for (size_t got = 0; got < sizeof msg;) {
      ssize_t n = rrecv(fd, msg + got, sizeof msg - got, 0);
      if (n <= 0) die("rrecv");
      got += (size_t)n;
    }
  }
  printf("{\"before\":{\"rss\":%ld,\"fds\":%d},\"after\":{\"rss\":%ld,\"fds\":%d}}\n", rss0, fds0,
         rss_bytes(), open_fds());
  fflush(stdout);
  return 0;
}
