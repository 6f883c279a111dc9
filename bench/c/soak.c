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
 * read back, rshutdown(SHUT_WR), read to the end, rclose.
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
#include <signal.h>
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
 * A cycle that takes longer than this ends the process (a lost event would otherwise hang it).
 * Above the connection manager's own give-up on a lost DREQ (about 100 s measured on rxe), so
 * that a resent MAD is waited for as the library waits for it.
 */
#define CYCLE_LIMIT_S 180

/* The cycle in progress, for the alarm's message. */
static volatile long current_cycle;

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "soak: a cycle took over 180 s, cycle ";
  char num[24];
  int n = 0;
  long v = current_cycle;
  do num[sizeof num - 1 - n++] = (char)('0' + v % 10); while ((v /= 10) > 0 && n < 20);
  if (write(2, msg, sizeof msg - 1) < 0 || write(2, num + sizeof num - n, n) < 0 ||
      write(2, "\n", 1) < 0)
    _exit(3);
  _exit(3);
}

static void report(const char *key, long i) {
  printf("{\"%s\":%ld,\"rss\":%ld}\n", key, i, rss_bytes());
  fflush(stdout);
}

static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type type) {
  struct rdma_cm_event *ev;
  if (rdma_get_cm_event(ch, &ev)) die("rdma_get_cm_event");
  if (ev->event != type) {
    fprintf(stderr, "soak: expected %s, got %s (status %d)\n", rdma_event_str(type),
            rdma_event_str(ev->event), ev->status);
    exit(1);
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

/* Waits for one receive (or send) completion through the channel: arm, drain, wait. */
static void ep_wait(struct ep *e, int recv) {
  int *have = recv ? &e->recvs : &e->sends;
  while (*have == 0) {
    struct ibv_wc wc;
    int n;
    if (ibv_req_notify_cq(e->cq, 0)) die("ibv_req_notify_cq");
    while ((n = ibv_poll_cq(e->cq, 1, &wc)) > 0) {
      if (wc.status != IBV_WC_SUCCESS) {
        fprintf(stderr, "soak: completion status %s\n", ibv_wc_status_str(wc.status));
        exit(1);
      }
      if (wc.opcode & IBV_WC_RECV) e->recvs++;
      else e->sends++;
    }
    if (n < 0) die("ibv_poll_cq");
    if (*have > 0) break;
    struct ibv_cq *cq;
    void *ctx;
    if (ibv_get_cq_event(e->ch, &cq, &ctx)) die("ibv_get_cq_event");
    ibv_ack_cq_events(cq, 1);
  }
  (*have)--;
}

static void ep_send(struct ep *e, struct rdma_cm_id *id, const char *text) {
  size_t len = strlen(text);
  char *at = e->buf + DEPTH * SLOT;
  memcpy(at, text, len);
  struct ibv_sge sge = {(uintptr_t)at, (uint32_t)len, e->mr->lkey};
  struct ibv_send_wr wr = {.wr_id = 1000, .sg_list = &sge, .num_sge = 1,
                           .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;
  if (ibv_post_send(id->qp, &wr, &bad)) die("ibv_post_send");
  ep_wait(e, 0);
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
    current_cycle = i;
    alarm(CYCLE_LIMIT_S);
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *id;
    struct ep e;
    char tag[32], msg[64];
    if (!ch) die("rdma_create_event_channel");
    if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) die("rdma_create_id");
    if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000)) die("rdma_resolve_addr");
    rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
    if (rdma_resolve_route(id, 2000)) die("rdma_resolve_route");
    rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
    ep_open(&e, id);
    snprintf(tag, sizeof tag, "c%ld", i);
    struct rdma_conn_param param = {.private_data = tag, .private_data_len = strlen(tag) + 1,
                                    .responder_resources = 1, .initiator_depth = 1,
                                    .retry_count = 7, .rnr_retry_count = 7};
    if (rdma_connect(id, &param)) die("rdma_connect");
    rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
    snprintf(msg, sizeof msg, "ping %s 0", tag);
    ep_send(&e, id, msg);
    ep_wait(&e, 1);
    if (rdma_disconnect(id)) die("rdma_disconnect");
    rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
    ep_close(&e, id);
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
    current_cycle = i;
    alarm(i == 1 ? 0 : CYCLE_LIMIT_S);
    struct rdma_cm_event *ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
    struct rdma_cm_id *id = ev->id;
    struct ep e;
    char reply[64], welcome[32];
    rdma_ack_cm_event(ev);
    ep_open(&e, id);
    snprintf(welcome, sizeof welcome, "welcome:%ld", i);
    struct rdma_conn_param param = {.private_data = welcome,
                                    .private_data_len = strlen(welcome) + 1,
                                    .responder_resources = 1, .initiator_depth = 1};
    if (rdma_accept(id, &param)) die("rdma_accept");
    rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
    ep_wait(&e, 1);
    snprintf(reply, sizeof reply, "pong%s", e.buf + 4);
    ep_send(&e, id, reply);
    rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
    rdma_disconnect(id);
    ep_close(&e, id);
    rdma_destroy_id(id);
    if (i == 1 || i % every == 0) report("served", i);
  }
  rdma_destroy_id(listen_id);
  rdma_destroy_event_channel(ch);
}

static void full(int fd, char *buf, size_t len, int write) {
  for (size_t off = 0; off < len;) {
    ssize_t n = write ? rsend(fd, buf + off, len - off, 0) : rrecv(fd, buf + off, len - off, 0);
    if (n <= 0) die(write ? "rsend" : "rrecv");
    off += n;
  }
}

static void rs_client(const char *addr, int port, long cycles, long every) {
  struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(port)};
  static char out[MSG], in[MSG];
  inet_pton(AF_INET, addr, &dst.sin_addr);
  for (int i = 0; i < MSG; i++) out[i] = (char)i;
  for (long i = 1; i <= cycles; i++) {
    current_cycle = i;
    alarm(CYCLE_LIMIT_S);
    int fd = rsocket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) die("rsocket");
    if (rconnect(fd, (struct sockaddr *)&dst, sizeof dst)) die("rconnect");
    full(fd, out, MSG, 1);
    full(fd, in, MSG, 0);
    if (memcmp(in, out, MSG)) {
      fprintf(stderr, "soak: echo differs\n");
      exit(1);
    }
    rshutdown(fd, SHUT_WR);
    if (rrecv(fd, in, MSG, 0) != 0) die("rrecv (end of stream)");
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
    current_cycle = i;
    alarm(i == 1 ? 0 : CYCLE_LIMIT_S);
    int fd = raccept(lfd, NULL, NULL);
    ssize_t n;
    if (fd < 0) die("raccept");
    while ((n = rrecv(fd, buf, sizeof buf, 0)) > 0) full(fd, buf, n, 1);
    if (n < 0) die("rrecv");
    rshutdown(fd, SHUT_WR);
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
  signal(SIGALRM, on_alarm);
  if (!strcmp(role, "cm-server")) cm_server(addr, atol(argv[3]), atol(argv[4]));
  else if (!strcmp(role, "rs-server")) rs_server(addr, atol(argv[3]), atol(argv[4]));
  else if (argc >= 6 && !strcmp(role, "cm-client"))
    cm_client(addr, atoi(argv[3]), atol(argv[4]), atol(argv[5]));
  else if (argc >= 6 && !strcmp(role, "rs-client"))
    rs_client(addr, atoi(argv[3]), atol(argv[4]), atol(argv[5]));
  else return 2;
  printf("{\"done\":true,\"rss\":%ld}\n", rss_bytes());
  return 0;
}
