/**
 * The TCP side channel of the C tools that exchange QP numbers out of band (the pingpong tools,
 * perftest): exact-length reads, one `write` per message.
 *
 * @module
 */

import type net from "node:net";

/** Buffered exact-length reads and whole-message writes over a TCP socket (Nagle off). */
export class Wire {
  readonly #socket: net.Socket;
  #chunks: Uint8Array[] = [];
  #have = 0;
  #ended = false;
  #error: Error | null = null;
  #wake: (() => void) | null = null;

  constructor(socket: net.Socket) {
    this.#socket = socket;
    socket.setNoDelay(true);
    socket.on("data", (d: Uint8Array) => {
      this.#chunks.push(new Uint8Array(d));
      this.#have += d.length;
      this.#notify();
    });
    socket.on("end", () => {
      this.#ended = true;
      this.#notify();
    });
    socket.on("error", (e: Error) => {
      this.#error = e;
      this.#notify();
    });
  }

  #notify(): void {
    const w = this.#wake;
    this.#wake = null;
    w?.();
  }

  /** Reads exactly `n` bytes, or fewer when the peer closes (`atMost`) first. */
  async read(n: number, atMost = false): Promise<Uint8Array> {
    while (this.#have < n) {
      if (this.#error) throw this.#error;
      if (this.#ended) {
        if (atMost) break;
        throw new Error(`${this.#have}/${n}: the peer closed the connection`);
      }
      await new Promise<void>((r) => (this.#wake = r));
    }
    const take = Math.min(n, this.#have);
    const out = new Uint8Array(take);
    let off = 0;
    while (off < take) {
      const c = this.#chunks[0];
      const k = Math.min(c.length, take - off);
      out.set(c.subarray(0, k), off);
      off += k;
      if (k === c.length) this.#chunks.shift();
      else this.#chunks[0] = c.subarray(k);
    }
    this.#have -= take;
    return out;
  }

  /** Writes and waits until the bytes are handed to the kernel. */
  write(bytes: Uint8Array): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#socket.write(bytes, (e?: Error | null) => (e ? reject(e) : resolve()));
    });
  }

  /**
   * Ends the connection gracefully: `end()` sends what is still queued, then FIN. (Destroying
   * right after could drop the final `done`, which a C server blocks on.) Unref'd, so a
   * closing socket does not keep the process alive.
   */
  close(): void {
    this.#socket.end();
    this.#socket.unref();
  }
}
