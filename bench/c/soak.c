/*
 * The C reference of bench/soak.ts: the same connection cycles as the library's, in C, with the
 * resident set size reported as JSON lines on stdout.
 *
 *   soak cm-server ADDR COUNT EVERY      rdma_cm RC echo server (ephemeral port)
 *   soak cm-client ADDR PORT CYCLES EVERY
 *   soak rs-server ADDR COUNT EVERY      rsocket stream echo server
 *   soak rs-client ADDR PORT CYCLES EVERY
 *
 * cm cycle (librdmacm + libibverbs, the calls in the order the library makes them):
 * rdma_create_event_channel, rdma_create_id, rdma_resolve_addr, rdma_resolve_route,
 * ibv_alloc_pd, ibv_create_comp_channel, ibv_create_cq, rdma_create_qp, a registered buffer,
 * receives posted, rdma_connect with private data; one message each way; rdma_disconnect (and
 * its DISCONNECTED event); QP, MR, CQ, channel, PD, id and event channel destroyed.
 *
 * rs cycle (rsocket, what the library's streams speak): rsocket, rconnect, 4 KiB written and
 * read back, rshutdown(SHUT_WR), read to the end, rclose (non-blocking; waits are rpoll checks,
 * see rs_wait).
 *
 * Every wait is bounded (see WAIT_MS): a failed cycle is counted and skipped, as the library's
 * loops in bench/soak.ts do.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#define DEPTH 8
#define SLOT 256
#define MSG 4096

static void die(const char *what) {
  fprintf(stderr, "soak: %s: %s\n", what, strerror(errno));
  exit(1);
}

static long rss_bytes(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  return resident * sysconf(_SC_PAGESIZE);
}

/*
 * Every wait is bounded, as the library's are (a lost message or CM exchange in the guest's
 * soft-RoCE would otherwise hang the loop): a cycle whose wait runs out is counted, its reason
 * kept, its resources released, and the loop goes on; more than MAX_FAILED failures end it. A
 * server with no connection for IDLE_MS ends its loop (its client failed cycles).
 */
#define WAIT_MS 60000
#define IDLE_MS 90000
#define MAX_FAILED 10

static char failed_json[4096] = "";
static int failed_count;

/* Records a failed cycle (JSON string list for the done line); ends the process past the limit. */
static void cycle_failed(const char *side, long i, const char *why) {
  size_t at = strlen(failed_json);
  fprintf(stderr, "soak: %s %ld failed: %s\n", side, i, why);
  snprintf(failed_json + at, sizeof failed_json - at, "%s\"%s %ld: %s\"", at ? "," : "", side, i,
           why);
  if (++failed_count > MAX_FAILED) {
    fprintf(stderr, "soak: more than %d failed cycles\n", MAX_FAILED);
    exit(1);
  }
}

/* Waits until `fd` is readable; 0, or -1 after `ms`. */
static int wait_readable(int fd, int ms) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  int n = poll(&p, 1, ms);
  return n > 0 ? 0 : -1;
}

static void report(const char *key, long i) {
  printf("{\"%s\":%ld,\"rss\":%ld}\n", key, i, rss_bytes());
  fflush(stdout);
}

/* The next event on `ch` if it is `type` within `ms`; else NULL, with the reason in `why`. */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type type,
                                    int ms, char *why, size_t whylen) {
  struct rdma_cm_event *ev;
  if (wait_readable(ch->fd, ms)) {
    snprintf(why, whylen, "no %s in %d ms", rdma_event_str(type), ms);
    return NULL;
  }
  if (rdma_get_cm_event(ch, &ev)) die("rdma_get_cm_event");
  if (ev->event != type) {
    snprintf(why, whylen, "expected %s, got %s (status %d)", rdma_event_str(type),
             rdma_event_str(ev->event), ev->status);
    rdma_ack_cm_event(ev);
    return NULL;
  }
  return ev;
}

/* The verbs side of one connection: what tests/device/peers/endpoint.ts makes. */
struct ep {
  struct ibv_pd *pd;
  struct ibv_comp_channel *ch;
  struct ibv_cq *cq;
  struct ibv_mr *mr;
  char *buf;
  int recvs, sends; /* completions taken and not yet waited for */
};

static void ep_open(struct ep *e, struct rdma_cm_id *id) {
  struct ibv_qp_init_attr attr;
  e->pd = ibv_alloc_pd(id->verbs);
  if (!e->pd) die("ibv_alloc_pd");
  e->ch = ibv_create_comp_channel(id->verbs);
  if (!e->ch) die("ibv_create_comp_channel");
  e->cq = ibv_create_cq(id->verbs, DEPTH * 4, NULL, e->ch, 0);
  if (!e->cq) die("ibv_create_cq");
  e->recvs = e->sends = 0;
  memset(&attr, 0, sizeof attr);
  attr.send_cq = attr.recv_cq = e->cq;
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = DEPTH;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  if (rdma_create_qp(id, e->pd, &attr)) die("rdma_create_qp");
  if (posix_memalign((void **)&e->buf, 4096, SLOT * DEPTH * 2)) die("posix_memalign");
  memset(e->buf, 0, SLOT * DEPTH * 2);
  e->mr = ibv_reg_mr(e->pd, e->buf, SLOT * DEPTH * 2, IBV_ACCESS_LOCAL_WRITE);
  if (!e->mr) die("ibv_reg_mr");
  for (int i = 0; i < DEPTH; i++) {
    struct ibv_sge sge = {(uintptr_t)(e->buf + i * SLOT), SLOT, e->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
    if (ibv_post_recv(id->qp, &wr, &bad)) die("ibv_post_recv");
  }
}

/* Waits for one receive (or send) completion through the channel: arm, drain, wait; -1 after
 * WAIT_MS. */
static int ep_wait(struct ep *e, int recv) {
  int *have = recv ? &e->recvs : &e->sends;
  while (*have == 0) {
    struct ibv_wc wc;
    int n;
    if (ibv_req_notify_cq(e->cq, 0)) die("ibv_req_notify_cq");
    while ((n = ibv_poll_cq(e->cq, 1, &wc)) > 0) {
      if (wc.status != IBV_WC_SUCCESS) {
        fprintf(stderr, "soak: completion status %s\n", ibv_wc_status_str(wc.status));
        return -1;
      }
      if (wc.opcode & IBV_WC_RECV) e->recvs++;
      else e->sends++;
    }
    if (n < 0) die("ibv_poll_cq");
    if (*have > 0) break;
    struct ibv_cq *cq;
    void *ctx;
    if (wait_readable(e->ch->fd, WAIT_MS)) return -1;
    if (ibv_get_cq_event(e->ch, &cq, &ctx)) die("ibv_get_cq_event");
    ibv_ack_cq_events(cq, 1);
  }
  (*have)--;
  return 0;
}

/* Posts a SEND of `text` (its completion is taken by a later ep_wait or dropped at ep_close). */
static void ep_post(struct ep *e, struct rdma_cm_id *id, const char *text) {
  size_t len = strlen(text);
  char *at = e->buf + DEPTH * SLOT;
  memcpy(at, text, len);
  struct ibv_sge sge = {(uintptr_t)at, (uint32_t)len, e->mr->lkey};
  struct ibv_send_wr wr = {.wr_id = 1000, .sg_list = &sge, .num_sge = 1,
                           .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;
  if (ibv_post_send(id->qp, &wr, &bad)) die("ibv_post_send");
}

static void ep_close(struct ep *e, struct rdma_cm_id *id) {
  rdma_destroy_qp(id);
  ibv_dereg_mr(e->mr);
  free(e->buf);
  ibv_destroy_cq(e->cq);
  ibv_destroy_comp_channel(e->ch);
  ibv_dealloc_pd(e->pd);
}

static void cm_client(const char *addr, int port, long cycles, long every) {
  struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, addr, &dst.sin_addr);
  for (long i = 1; i <= cycles; i++) {
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *id;
    struct rdma_cm_event *ev;
    struct ep e;
    int opened = 0;
    char tag[32], msg[64], why[160] = "";
    if (!ch) die("rdma_create_event_channel");
    if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) die("rdma_create_id");
    if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000)) die("rdma_resolve_addr");
    if (!(ev = expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, WAIT_MS, why, sizeof why))) goto failed;
    rdma_ack_cm_event(ev);
    if (rdma_resolve_route(id, 2000)) die("rdma_resolve_route");
    if (!(ev = expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, WAIT_MS, why, sizeof why))) goto failed;
    rdma_ack_cm_event(ev);
    ep_open(&e, id);
    opened = 1;
    snprintf(tag, sizeof tag, "c%ld", i);
    struct rdma_conn_param param = {.private_data = tag, .private_data_len = strlen(tag) + 1,
                                    .responder_resources = 1, .initiator_depth = 1,
                                    .retry_count = 7, .rnr_retry_count = 7};
    if (rdma_connect(id, &param)) die("rdma_connect");
    if (!(ev = expect(ch, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS, why, sizeof why))) goto failed;
    rdma_ack_cm_event(ev);
    snprintf(msg, sizeof msg, "ping %s 0", tag);
    ep_post(&e, id, msg);
    if (ep_wait(&e, 0)) {
      snprintf(why, sizeof why, "the ping's send did not complete");
      goto failed;
    }
    if (ep_wait(&e, 1)) {
      snprintf(why, sizeof why, "no pong");
      goto failed;
    }
    if (rdma_disconnect(id)) die("rdma_disconnect");
    if (!(ev = expect(ch, RDMA_CM_EVENT_DISCONNECTED, WAIT_MS, why, sizeof why))) goto failed;
    rdma_ack_cm_event(ev);
    goto release;
  failed:
    cycle_failed("cycle", i, why);
    rdma_disconnect(id);
  release:
    if (opened) ep_close(&e, id);
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ch);
    if (i == 1 || i % every == 0) report("cycle", i);
  }
}

static void cm_server(const char *addr, long count, long every) {
  struct sockaddr_in src = {.sin_family = AF_INET};
  struct rdma_event_channel *ch = rdma_create_event_channel();
  struct rdma_cm_id *listen_id;
  inet_pton(AF_INET, addr, &src.sin_addr);
  if (!ch) die("rdma_create_event_channel");
  if (rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP)) die("rdma_create_id");
  if (rdma_bind_addr(listen_id, (struct sockaddr *)&src)) die("rdma_bind_addr");
  if (rdma_listen(listen_id, 32)) die("rdma_listen");
  printf("{\"ready\":true,\"port\":%d}\n", ntohs(rdma_get_src_port(listen_id)));
  fflush(stdout);
  for (long i = 1; i <= count; i++) {
    char reply[64], welcome[32], why[160] = "";
    struct rdma_cm_event *ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, i == 1 ? -1 : IDLE_MS,
                                      why, sizeof why);
    if (!ev) {
      if (!strncmp(why, "no ", 3)) break; /* idle: the client is done */
      cycle_failed("connection", i--, why); /* a late event of a failed connection */
      continue;
    }
    struct rdma_cm_id *id = ev->id;
    struct ep e;
    rdma_ack_cm_event(ev);
    ep_open(&e, id);
    snprintf(welcome, sizeof welcome, "welcome:%ld", i);
    struct rdma_conn_param param = {.private_data = welcome,
                                    .private_data_len = strlen(welcome) + 1,
                                    .responder_resources = 1, .initiator_depth = 1};
    if (rdma_accept(id, &param)) die("rdma_accept");
    if (!(ev = expect(ch, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS, why, sizeof why))) goto failed;
    rdma_ack_cm_event(ev);
    if (ep_wait(&e, 1)) {
      snprintf(why, sizeof why, "no ping");
      goto failed;
    }
    snprintf(reply, sizeof reply, "pong%s", e.buf + 4);
    /*
     * The pong's completion is not waited for: the client disconnects once it has the pong, and
     * on rxe an RC send whose ACK never came keeps being retried (retry count 7 is endless there)
     * until this side's QP leaves RTS at the disconnect; waiting first deadlocked 1 in ~900.
     */
    ep_post(&e, id, reply);
    if (!(ev = expect(ch, RDMA_CM_EVENT_DISCONNECTED, WAIT_MS, why, sizeof why))) goto failed;
    rdma_ack_cm_event(ev);
    goto release;
  failed:
    cycle_failed("connection", i, why);
  release:
    rdma_disconnect(id);
    ep_close(&e, id);
    rdma_destroy_id(id);
    if (i == 1 || i % every == 0) report("served", i);
  }
  rdma_destroy_id(listen_id);
  rdma_destroy_event_channel(ch);
}

/*
 * Waits until `fd` is ready for `events`; 0, or -1 after `ms` (< 0: no limit). It checks with
 * rpoll and a timeout of 0 (a check that returns at once) and sleeps 100 µs between checks, never
 * letting rpoll itself wait: librdmacm 44 (Debian 12's) returns from an rpoll whose timeout expired
 * without leaving its wait gate, so once rsocket's connection thread signals the next event every
 * later rpoll in the process spins on sched_yield without end (later rdma-core releases leave the
 * gate); and a waiting rpoll could sleep through the completion it waited for until rsocket's own
 * periodic wake-up (5 s in that release).
 */
static int rs_wait(int fd, short events, int ms) {
  struct pollfd p = {.fd = fd, .events = events};
  struct timespec start, t, pause = {0, 100000};
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    p.revents = 0;
    int n = rpoll(&p, 1, 0);
    if (n > 0) return 0;
    if (n < 0) return -1;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long waited = (t.tv_sec - start.tv_sec) * 1000 + (t.tv_nsec - start.tv_nsec) / 1000000;
    if (ms >= 0 && waited >= ms) return -1;
    nanosleep(&pause, NULL);
  }
}

/* Moves all of `buf` on a non-blocking rsocket; 0, or -1 (reason in `why`). */
static int full(int fd, char *buf, size_t len, int write, char *why, size_t whylen) {
  for (size_t off = 0; off < len;) {
    ssize_t n = write ? rsend(fd, buf + off, len - off, 0) : rrecv(fd, buf + off, len - off, 0);
    if (n > 0) {
      off += n;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (rs_wait(fd, write ? POLLOUT : POLLIN, WAIT_MS)) {
        snprintf(why, whylen, "%s waited over %d ms", write ? "rsend" : "rrecv", WAIT_MS);
        return -1;
      }
    } else {
      snprintf(why, whylen, "%s: %s", write ? "rsend" : "rrecv",
               n == 0 ? "end of stream" : strerror(errno));
      return -1;
    }
  }
  return 0;
}

/* Reads to the end of the stream (discarding, or echoing when `echo`); 0, or -1. */
static int drain(int fd, char *buf, size_t size, int echo, char *why, size_t whylen) {
  for (;;) {
    ssize_t n = rrecv(fd, buf, size, 0);
    if (n == 0) return 0;
    if (n > 0) {
      if (echo && full(fd, buf, n, 1, why, whylen)) return -1;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (rs_wait(fd, POLLIN, WAIT_MS)) {
        snprintf(why, whylen, "rrecv waited over %d ms", WAIT_MS);
        return -1;
      }
    } else {
      snprintf(why, whylen, "rrecv: %s", strerror(errno));
      return -1;
    }
  }
}

static void rs_client(const char *addr, int port, long cycles, long every) {
  struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(port)};
  static char out[MSG], in[MSG];
  inet_pton(AF_INET, addr, &dst.sin_addr);
  for (int i = 0; i < MSG; i++) out[i] = (char)i;
  for (long i = 1; i <= cycles; i++) {
    char why[160] = "";
    int fd = rsocket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) die("rsocket");
    rfcntl(fd, F_SETFL, O_NONBLOCK);
    if (rconnect(fd, (struct sockaddr *)&dst, sizeof dst) && errno != EINPROGRESS) {
      snprintf(why, sizeof why, "rconnect: %s", strerror(errno));
      goto failed;
    }
    if (rs_wait(fd, POLLOUT, WAIT_MS)) {
      snprintf(why, sizeof why, "not connected in %d ms", WAIT_MS);
      goto failed;
    }
    if (full(fd, out, MSG, 1, why, sizeof why) || full(fd, in, MSG, 0, why, sizeof why)) {
      goto failed;
    }
    if (memcmp(in, out, MSG)) {
      fprintf(stderr, "soak: echo differs\n");
      exit(1);
    }
    rshutdown(fd, SHUT_WR);
    if (drain(fd, in, MSG, 0, why, sizeof why)) goto failed;
    goto release;
  failed:
    cycle_failed("cycle", i, why);
  release:
    rclose(fd);
    if (i == 1 || i % every == 0) report("cycle", i);
  }
}

static void rs_server(const char *addr, long count, long every) {
  struct sockaddr_in src = {.sin_family = AF_INET};
  socklen_t len = sizeof src;
  static char buf[65536];
  int lfd = rsocket(AF_INET, SOCK_STREAM, 0);
  inet_pton(AF_INET, addr, &src.sin_addr);
  if (lfd < 0) die("rsocket");
  if (rbind(lfd, (struct sockaddr *)&src, sizeof src)) die("rbind");
  if (rlisten(lfd, 32)) die("rlisten");
  if (rgetsockname(lfd, (struct sockaddr *)&src, &len)) die("rgetsockname");
  printf("{\"ready\":true,\"port\":%d}\n", ntohs(src.sin_port));
  fflush(stdout);
  for (long i = 1; i <= count; i++) {
    char why[160] = "";
    if (rs_wait(lfd, POLLIN, i == 1 ? -1 : IDLE_MS)) break; /* idle: the client is done */
    int fd = raccept(lfd, NULL, NULL);
    if (fd < 0) die("raccept");
    rfcntl(fd, F_SETFL, O_NONBLOCK);
    /*
     * At the client's end of stream, rclose alone: it sends one DISCONNECT and waits, without a
     * bound, for its acknowledgement. rshutdown(SHUT_WR) first would send one too, and rclose
     * then a second, which the client (closing once the first arrived) may never acknowledge:
     * on rxe that wait never ended, 1 in some thousands of cycles.
     */
    if (drain(fd, buf, sizeof buf, 1, why, sizeof why)) cycle_failed("connection", i, why);
    rclose(fd);
    if (i == 1 || i % every == 0) report("served", i);
  }
  rclose(lfd);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: soak cm-server|rs-server ADDR COUNT EVERY\n"
                    "       soak cm-client|rs-client ADDR PORT CYCLES EVERY\n");
    return 2;
  }
  const char *role = argv[1], *addr = argv[2];
  if (!strcmp(role, "cm-server")) cm_server(addr, atol(argv[3]), atol(argv[4]));
  else if (!strcmp(role, "rs-server")) rs_server(addr, atol(argv[3]), atol(argv[4]));
  else if (argc >= 6 && !strcmp(role, "cm-client"))
    cm_client(addr, atoi(argv[3]), atol(argv[4]), atol(argv[5]));
  else if (argc >= 6 && !strcmp(role, "rs-client"))
    rs_client(addr, atoi(argv[3]), atol(argv[4]), atol(argv[5]));
  else return 2;
  printf("{\"done\":true,\"rss\":%ld,\"failed\":[%s]}\n", rss_bytes(), failed_json);
  return 0;
}
