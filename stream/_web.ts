/**
 * A connection's web streams: its receiving side as a byte `ReadableStream` (BYOB reads go
 * straight into the reader's buffer; a BYOB read with `{ min }` is filled by repeated pulls) and
 * its sending side as a `WritableStream` (closing it is `closeWrite()`, aborting it `close()`).
 * Built on the connection's public calls only.
 *
 * @module
 */

/** What the web streams use of a connection. */
interface ByteConn {
  read(p: Uint8Array): Promise<number | null>;
  write(p: Uint8Array): Promise<number>;
  closeWrite(): Promise<void>;
  close(): void;
}

/** The receiving side of `conn` as a byte stream. */
export function readableOf(conn: ByteConn): ReadableStream<Uint8Array<ArrayBuffer>> {
  return new ReadableStream({
    type: "bytes",
    autoAllocateChunkSize: 65536,
    pull: async (c: ReadableByteStreamController) => {
      const req = c.byobRequest!;
      const v = req.view!;
      const n = await conn.read(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
      if (n === null) {
        c.close();
        req.respond(0);
      } else req.respond(n);
    },
  });
}

/** The sending side of `conn` as a stream. */
export function writableOf(conn: ByteConn): WritableStream<Uint8Array> {
  return new WritableStream<Uint8Array>({
    write: async (chunk) => {
      await conn.write(chunk);
    },
    close: () => conn.closeWrite(),
    abort: () => conn.close(),
  });
}
