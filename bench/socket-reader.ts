/**
 * A `node:net` socket read as a stream of bytes, for the benches' TCP loops (bench/stream.ts's
 * TCP rows and the soak's): what arrives is buffered until read.
 *
 * @module
 */

import type { Socket } from "node:net";

/** The reading side of a socket. */
export interface SocketReader {
  /** Fills `b`: resolves with `b.length`, or with fewer (or null) only at the end of the stream. */
  readFull(b: Uint8Array): Promise<number | null>;
  /** Resolves once the peer has ended the stream. */
  end(): Promise<void>;
}

/** Buffers what `sock` receives and reads it as {@link SocketReader} asks. */
export function socketReader(sock: Socket): SocketReader {
  const chunks: Uint8Array[] = [];
  let have = 0;
  let ended = false;
  let wake: (() => void) | null = null;
  const more = () => new Promise<void>((r) => (wake = r));
  sock.on("data", (d: Uint8Array) => {
    chunks.push(d);
    have += d.length;
    wake?.();
  });
  sock.on("end", () => {
    ended = true;
    wake?.();
  });
  return {
    async readFull(b) {
      const n = b.length;
      let off = 0;
      while (off < n) {
        while (have === 0) {
          if (ended) return off === 0 ? null : off;
          await more();
          wake = null;
        }
        const c = chunks[0];
        const take = Math.min(c.length, n - off);
        b.set(c.subarray(0, take), off);
        off += take;
        have -= take;
        if (take === c.length) chunks.shift();
        else chunks[0] = c.subarray(take);
      }
      return n;
    },
    async end() {
      while (!ended) {
        await more();
        wake = null;
      }
    },
  };
}
