/**
 * An io_uring link from the poller's epoll set to a socket: one `IORING_OP_POLL_ADD` on the
 * epoll fd, linked (`IOSQE_IO_LINK`) to a one-byte `IORING_OP_SEND` into one end of a unix
 * socketpair. When the set becomes ready the kernel completes the poll and sends the byte on the
 * thread that submitted it (io_uring's task work, which wakes that thread out of its event
 * loop's `epoll_wait`), so a runtime that can watch a socket fd but not an epoll fd - Deno's
 * `node:net` accepts sockets and pipes only - is woken by its own event loop with no helper
 * thread. Runtime-neutral: each runtime binds the raw calls ({@link UringCalls}).
 *
 * The task work is delivered like a signal without a handler: it ends the JS thread's
 * `epoll_wait` early with EINTR (event loops retry it; other system calls restart by themselves)
 * and runs before the thread returns to user space, so by the time the runtime reads the byte
 * both completions are in the completion ring.
 *
 * The ring is four entries deep; at most one poll (and its send) is in flight. The ABI used
 * (`io_uring_params`, 64-byte SQEs, 16-byte CQEs, syscalls 425/426) is the same on x86-64 and
 * aarch64. {@link EpollLink.open} checks everything it relies on once (POLL_ADD, links, SEND:
 * Linux 5.6) and returns null where io_uring is missing or forbidden (a seccomp filter, the
 * `kernel.io_uring_disabled` sysctl), so the caller can wait another way.
 *
 * @module
 */

import type { NativePointer } from "../types/ctypes.ts";
import { native } from "./native.ts";
import { NativeBlock } from "./memory.ts";
import type { EpollWaiter, WaiterOptions } from "./wait.ts";
import { takeReady } from "./epoll-ready.ts";

/** An integer or address argument of a raw system call. */
export type Arg = number | bigint;

/** The raw calls of the link, bound by the runtime's waiter module. */
export interface UringCalls {
  /** `syscall(nr, a, b, c, d, e, f)` with integer arguments (addresses as bigint or number). */
  syscall(nr: number, a: Arg, b: Arg, c: Arg, d: Arg, e: Arg, f: Arg): number;
  /** `mmap(NULL, length, PROT_READ|PROT_WRITE, MAP_SHARED|MAP_POPULATE, fd, offset)`; null on failure. */
  mmap(length: number, fd: number, offset: number): NativePointer | null;
  /** `munmap(p, length)`. */
  munmap(p: NativePointer, length: number): number;
  /** `socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv)`. */
  socketpair(sv: NativePointer): number;
}

const SYS_IO_URING_SETUP = 425;
const SYS_IO_URING_ENTER = 426;
const IORING_OFF_SQ_RING = 0;
const IORING_OFF_CQ_RING = 0x8000000;
const IORING_OFF_SQES = 0x10000000;
const IORING_FEAT_SINGLE_MMAP = 1;
const IORING_ENTER_GETEVENTS = 1;
const IORING_OP_POLL_ADD = 6;
const IORING_OP_SEND = 26;
const IOSQE_IO_LINK = 4;
const POLLIN = 0x001;
const POLLOUT = 0x004;
const MSG_DONTWAIT = 0x40;
const MSG_NOSIGNAL = 0x4000;
const SQE_SIZE = 64;
const CQE_SIZE = 16;
const PARAMS_SIZE = 120;
const SQ_OFF = 40; // struct io_sqring_offsets in io_uring_params
const CQ_OFF = 80; // struct io_cqring_offsets
const POLL_TAG = 1n;
const SEND_TAG = 2n;

interface Mapping {
  p: NativePointer;
  length: number;
}

/** One epoll set -> one socket byte per readiness, through a private io_uring. */
export class EpollLink {
  /** The socket end that becomes readable (one byte per readiness); the runtime watches it. */
  readonly readFd: number;
  #calls: UringCalls;
  #epfd: number;
  #ring: number;
  #writeFd: number;
  #maps: Mapping[];
  #sq: DataView;
  #cq: DataView;
  #sqes: DataView;
  #sqTail: number;
  #sqMask: number;
  #sqArray: number;
  #cqHead: number;
  #cqTail: number;
  #cqMask: number;
  #cqes: number;
  #byte: NativeBlock;
  #armed = false;
  #failed = false;
  #closed = false;

  /**
   * Sets up the ring and the socketpair and checks that a linked poll+send works; null (with
   * everything released) where it does not.
   */
  static open(calls: UringCalls, epfd: number): EpollLink | null {
    const n = native();
    const params = new NativeBlock(PARAMS_SIZE, 8);
    const sv = new NativeBlock(8, 8);
    let ring = -1;
    const maps: Mapping[] = [];
    let pair: [number, number] | null = null;
    try {
      ring = calls.syscall(SYS_IO_URING_SETUP, 4, n.address(params.ptr), 0, 0, 0, 0);
      if (ring < 0) return null;
      const pv = params.view;
      const sqEntries = pv.getUint32(0, true);
      const cqEntries = pv.getUint32(4, true);
      const features = pv.getUint32(20, true);
      const sqSize = pv.getUint32(SQ_OFF + 24, true) + sqEntries * 4;
      const cqSize = pv.getUint32(CQ_OFF + 20, true) + cqEntries * CQE_SIZE;
      const single = (features & IORING_FEAT_SINGLE_MMAP) !== 0;
      const map = (length: number, offset: number): NativePointer | null => {
        const p = calls.mmap(length, ring, offset);
        if (p) maps.push({ p, length });
        return p;
      };
      const sqRing = map(single ? Math.max(sqSize, cqSize) : sqSize, IORING_OFF_SQ_RING);
      const cqRing = single ? sqRing : map(cqSize, IORING_OFF_CQ_RING);
      const sqes = map(sqEntries * SQE_SIZE, IORING_OFF_SQES);
      if (!sqRing || !cqRing || !sqes) return null;
      if (calls.socketpair(sv.ptr) !== 0) return null;
      pair = [sv.view.getInt32(0, true), sv.view.getInt32(4, true)];
      const link = new EpollLink(calls, epfd, ring, pair, maps, params, {
        sq: sqRing,
        sqSize: single ? Math.max(sqSize, cqSize) : sqSize,
        cq: cqRing,
        cqSize: single ? Math.max(sqSize, cqSize) : cqSize,
        sqes,
        sqeBytes: sqEntries * SQE_SIZE,
      });
      if (!link.#selfTest()) {
        link.close();
        n.libc.close(pair[0]);
        pair = null;
        ring = -1;
        maps.length = 0;
        return null;
      }
      ring = -1; // owned by the link now
      pair = null;
      maps.length = 0;
      return link;
    } catch {
      return null;
    } finally {
      for (const m of maps) calls.munmap(m.p, m.length);
      if (ring >= 0) n.libc.close(ring);
      if (pair) {
        n.libc.close(pair[0]);
        n.libc.close(pair[1]);
      }
      params.free();
      sv.free();
    }
  }

  private constructor(
    calls: UringCalls,
    epfd: number,
    ring: number,
    pair: [number, number],
    maps: Mapping[],
    params: NativeBlock,
    m: {
      sq: NativePointer;
      sqSize: number;
      cq: NativePointer;
      cqSize: number;
      sqes: NativePointer;
      sqeBytes: number;
    },
  ) {
    const n = native();
    const pv = params.view;
    this.#calls = calls;
    this.#epfd = epfd;
    this.#ring = ring;
    this.readFd = pair[0];
    this.#writeFd = pair[1];
    this.#maps = [...maps];
    this.#sq = new DataView(n.arrayBuffer(m.sq, m.sqSize));
    this.#cq = new DataView(n.arrayBuffer(m.cq, m.cqSize));
    this.#sqes = new DataView(n.arrayBuffer(m.sqes, m.sqeBytes));
    this.#sqTail = pv.getUint32(SQ_OFF + 4, true);
    this.#sqMask = this.#sq.getUint32(pv.getUint32(SQ_OFF + 8, true), true);
    this.#sqArray = pv.getUint32(SQ_OFF + 24, true);
    this.#cqHead = pv.getUint32(CQ_OFF, true);
    this.#cqTail = pv.getUint32(CQ_OFF + 4, true);
    this.#cqMask = this.#cq.getUint32(pv.getUint32(CQ_OFF + 8, true), true);
    this.#cqes = pv.getUint32(CQ_OFF + 20, true);
    this.#byte = new NativeBlock(8, 8);
  }

  /** A poll (and its send) is in flight. */
  get armed(): boolean {
    return this.#armed;
  }

  /** A submission or completion failed: stop using the link. */
  get failed(): boolean {
    return this.#failed;
  }

  /**
   * Submits the linked poll+send unless one is in flight. If the set is ready already, the byte
   * is sent at once. Returns false (and marks the link failed) if the kernel refused.
   */
  arm(): boolean {
    if (this.#closed || this.#failed) return false;
    if (this.#armed) return true;
    this.#push(IORING_OP_POLL_ADD, IOSQE_IO_LINK, this.#epfd, 0n, 0, POLLIN, POLL_TAG);
    this.#push(
      IORING_OP_SEND,
      0,
      this.#writeFd,
      native().address(this.#byte.ptr),
      1,
      MSG_DONTWAIT | MSG_NOSIGNAL,
      SEND_TAG,
    );
    const r = this.#calls.syscall(SYS_IO_URING_ENTER, this.#ring, 2, 0, 0, 0, 0);
    if (r !== 2) {
      this.#failed = true;
      return false;
    }
    this.#armed = true;
    return true;
  }

  /** Takes every completion; a completed poll ends `armed`. Returns false if one failed. */
  reap(): boolean {
    if (this.#closed) return false;
    const cq = this.#cq;
    let head = cq.getUint32(this.#cqHead, true);
    const tail = cq.getUint32(this.#cqTail, true);
    while (head !== tail) {
      const at = this.#cqes + (head & this.#cqMask) * CQE_SIZE;
      const tag = cq.getBigUint64(at, true);
      const res = cq.getInt32(at + 8, true);
      if (tag === POLL_TAG) this.#armed = false;
      if (res < 0) this.#failed = true;
      head = (head + 1) >>> 0;
    }
    cq.setUint32(this.#cqHead, head, true);
    return !this.#failed;
  }

  /**
   * Closes the ring (cancelling what is in flight), the write end and the mappings. The read end
   * belongs to whoever watches it and is not closed here. Idempotent.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const libc = native().libc;
    for (const m of this.#maps) this.#calls.munmap(m.p, m.length);
    this.#maps = [];
    libc.close(this.#ring);
    libc.close(this.#writeFd);
    this.#byte.free();
  }

  #push(
    op: number,
    flags: number,
    fd: number,
    addr: bigint,
    len: number,
    opFlags: number,
    tag: bigint,
  ): void {
    const sq = this.#sq;
    const tail = sq.getUint32(this.#sqTail, true);
    const index = tail & this.#sqMask;
    const s = this.#sqes;
    const at = index * SQE_SIZE;
    for (let i = 0; i < SQE_SIZE; i += 8) s.setBigUint64(at + i, 0n, true);
    s.setUint8(at, op);
    s.setUint8(at + 1, flags);
    s.setInt32(at + 4, fd, true);
    s.setBigUint64(at + 16, addr, true);
    s.setUint32(at + 24, len, true);
    s.setUint32(at + 28, opFlags, true);
    s.setBigUint64(at + 32, tag, true);
    sq.setUint32(this.#sqArray + index * 4, index, true);
    sq.setUint32(this.#sqTail, (tail + 1) >>> 0, true);
  }

  /**
   * Runs the link once on something ready now (the write end is writable): the poll must
   * complete, the linked send must deliver its byte, and both completions must be reaped.
   */
  #selfTest(): boolean {
    this.#push(IORING_OP_POLL_ADD, IOSQE_IO_LINK, this.#writeFd, 0n, 0, POLLOUT, POLL_TAG);
    this.#push(
      IORING_OP_SEND,
      0,
      this.#writeFd,
      native().address(this.#byte.ptr),
      1,
      MSG_DONTWAIT | MSG_NOSIGNAL,
      SEND_TAG,
    );
    const r = this.#calls.syscall(
      SYS_IO_URING_ENTER,
      this.#ring,
      2,
      2,
      IORING_ENTER_GETEVENTS,
      0,
      0,
    );
    if (r !== 2) return false;
    const cq = this.#cq;
    const head = cq.getUint32(this.#cqHead, true);
    if (((cq.getUint32(this.#cqTail, true) - head) >>> 0) !== 2) return false;
    this.#armed = true;
    if (!this.reap() || this.#armed) return false;
    // the byte arrived: take it, the runtime has not seen this socket yet
    const libc = native().libc;
    return Number(libc.read(this.readFd, this.#byte.ptr, 8)) === 1;
  }
}

/** The socket end of a link as the runtime's event loop holds it. */
export interface LinkSocket {
  /** Keeps the process alive while events are wanted. */
  ref(): void;
  /** Lets an idle process exit. */
  unref(): void;
}

/**
 * The io_uring waiter of both runtimes: the link's poll is armed while events are wanted; a byte
 * on the socket means the set was ready, so the ready fds are taken and the poll re-armed. If the
 * link or the socket fails, the runtime's other waiter takes over and `kind` says so. A subclass
 * only says how its runtime watches the socket: it calls {@link UringWaiter.ready} when a byte
 * arrives and {@link UringWaiter.fail} when the socket fails.
 */
export abstract class UringWaiter implements EpollWaiter {
  readonly #o: WaiterOptions;
  readonly #link: EpollLink;
  readonly #events: NativeBlock;
  readonly #fds: Int32Array;
  #wanted = false;
  #closed = false;
  readonly #stopped = (): boolean => this.#closed;
  #fallback: EpollWaiter | null = null;

  /** Sets up the waiter over an open link. */
  constructor(o: WaiterOptions, link: EpollLink) {
    this.#o = o;
    this.#link = link;
    this.#events = new NativeBlock(o.maxEvents * o.eventSize, 16);
    this.#fds = new Int32Array(o.maxEvents);
  }

  /** The kind's name while no fallback is in use. */
  protected abstract get name(): string;
  /** The runtime's handle of the link's read end (null until it has one). */
  protected abstract socket(): LinkSocket | null;
  /** Closes the link's read end (through the runtime's handle when there is one). */
  protected abstract closeReadEnd(): void;
  /** The waiter that takes over when this one fails. */
  protected abstract fallbackWaiter(o: WaiterOptions): EpollWaiter;

  /** The path in use. */
  get kind(): string {
    return this.#fallback?.kind ?? this.name;
  }

  /** See {@link EpollWaiter.want}. */
  want(on: boolean): void {
    if (this.#closed) return;
    if (this.#fallback) return this.#fallback.want(on);
    this.#wanted = on;
    if (on) {
      this.socket()?.ref();
      if (!this.#link.arm()) this.fail();
    } else this.socket()?.unref();
  }

  /** See {@link EpollWaiter.close}. */
  close(release: () => void): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#wanted = false;
    this.#events.free();
    if (this.#fallback) return this.#fallback.close(release);
    this.#teardown();
    release();
  }

  /** A byte arrived: the set was ready when the poll completed. */
  protected ready(): void {
    if (this.#closed || this.#fallback) return;
    if (!this.#link.reap()) return this.fail();
    takeReady(this.#o, this.#events, this.#fds, this.#stopped);
    if (this.#wanted && !this.#closed && !this.#fallback && !this.#link.arm()) this.fail();
  }

  /** The link or the socket failed: the fallback waiter takes over. */
  protected fail(): void {
    if (this.#fallback || this.#closed) return;
    const fallback = this.#fallback = this.fallbackWaiter(this.#o);
    this.#teardown();
    if (this.#wanted) fallback.want(true);
  }

  #teardown(): void {
    this.closeReadEnd();
    this.#link.close();
  }
}
